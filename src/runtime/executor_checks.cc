// Checks of a program's instructions before the executor runs any (Init):
// every tensor they name exists (TensorsNamed's, and a receive's range),
// every micro-batch they name is one of the program's,
// every peer or server device has a program, every push an accumulate
// waits for exists, and every all-reduce names a group its device belongs
// to; and that dependencies form no cycle. A program
// failing them is refused whole (INVALID_ARGUMENT naming the instruction)
// rather than failing, or worse, mid-step.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/runtime/executor_impl.h"

namespace quilt {
namespace {

std::string Where(const quilt::v1::DeviceProgram& dp, const quilt::v1::Instruction& ins) {
  return absl::StrCat("instruction ", ins.id(), " on ", dp.device());
}

}  // namespace

absl::Status Executor::Impl::CheckInstructions() const {
  for (int i = 0; i < program_.devices_size(); ++i) {
    const quilt::v1::DeviceProgram& dp = program_.devices(i);
    for (const quilt::v1::Instruction& ins : dp.instructions()) {
      auto tensor = [&](const std::string& name) -> absl::Status {
        if (tensor_ids_.contains(name)) return absl::OkStatus();
        return absl::InvalidArgumentError(
            absl::StrCat(Where(dp, ins), " names unknown tensor '", name, "'"));
      };
      auto device = [&](const std::string& id, const char* role) -> absl::Status {
        if (program_device_.contains(id)) return absl::OkStatus();
        return absl::InvalidArgumentError(
            absl::StrCat(Where(dp, ins), " names ", role, " '", id, "', which has no program"));
      };
      for (const std::string& t : TensorsNamed(ins, graph_, op_ids_, /*writes=*/true)) {
        RETURN_IF_ERROR(tensor(t));
      }
      if (ins.micro_batch() < 0 ||
          ins.micro_batch() > std::max<int64_t>(1, program_.micro_batches()) ||
          (ins.micro_batch() > 0 && program_.micro_batches() <= 1)) {
        return absl::InvalidArgumentError(absl::StrCat(Where(dp, ins), " is in micro-batch ",
                                                       ins.micro_batch(), "; the program has ",
                                                       program_.micro_batches()));
      }
      switch (ins.kind_case()) {
        case quilt::v1::Instruction::kSend:
          RETURN_IF_ERROR(device(ins.send().peer_device(), "peer device"));
          break;
        case quilt::v1::Instruction::kRecv:
          RETURN_IF_ERROR(tensor(ins.recv().range().tensor()));
          RETURN_IF_ERROR(device(ins.recv().peer_device(), "peer device"));
          break;
        case quilt::v1::Instruction::kAllReduce: {
          auto group = groups_.find(ins.all_reduce().group());
          if (group == groups_.end()) {
            return absl::InvalidArgumentError(absl::StrCat(
                Where(dp, ins), " all-reduces over unknown group ", ins.all_reduce().group()));
          }
          if (std::find(group->second.begin(), group->second.end(), i) == group->second.end()) {
            return absl::InvalidArgumentError(
                absl::StrCat(Where(dp, ins), " all-reduces over group ", ins.all_reduce().group(),
                             ", which its device is not a member of"));
          }
          break;
        }
        case quilt::v1::Instruction::kPsPush:
          RETURN_IF_ERROR(device(ins.ps_push().server_device(), "server device"));
          break;
        case quilt::v1::Instruction::kPsAccumulate:
          for (int64_t tag : ins.ps_accumulate().push_tags()) {
            if (!push_device_.contains(tag)) {
              return absl::InvalidArgumentError(
                  absl::StrCat(Where(dp, ins), " waits for push ", tag, ", which no device makes"));
            }
          }
          break;
        case quilt::v1::Instruction::kPsPull:
          RETURN_IF_ERROR(device(ins.ps_pull().server_device(), "server device"));
          break;
        default:
          break;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Executor::Impl::CheckAcyclic() const {
  std::vector<int> waiting(nodes_.size());
  std::vector<int> ready;
  for (size_t n = 0; n < nodes_.size(); ++n) {
    waiting[n] = nodes_[n].deps;
    if (waiting[n] == 0) ready.push_back(static_cast<int>(n));
  }
  size_t done = 0;
  while (!ready.empty()) {
    const int n = ready.back();
    ready.pop_back();
    ++done;
    for (int s : nodes_[n].succ) {
      if (--waiting[s] == 0) ready.push_back(s);
    }
  }
  if (done == nodes_.size()) return absl::OkStatus();
  for (size_t n = 0; n < nodes_.size(); ++n) {
    if (waiting[n] > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the instructions' dependencies form a cycle: instruction ", nodes_[n].ins->id(), " on ",
          devices_[nodes_[n].device]->id, " waits on it and could never start"));
    }
  }
  return absl::OkStatus();
}

}  // namespace quilt
