// Validator::CheckRanges: every tensor range a program names lies within
// its tensor (rows of the global batch for a tensor on the batch, rows of
// dim 0 otherwise; 0, 0 for the whole), and every transfer, push and pull
// says the bytes its range holds.
#include "absl/strings/str_cat.h"
#include "src/planner/lower.h"
#include "src/planner/validator_state.h"

namespace quilt::validator_internal {

using quilt::v1::Instruction;
using quilt::v1::TensorRange;

absl::Status Validator::CheckRange(const TensorRange& r, int64_t id, int64_t bytes) const {
  auto where = [&] {
    return id >= 0 ? absl::StrCat("instruction ", id) : std::string("a device's resident list");
  };
  ASSIGN_OR_RETURN(const int t, Tensor(r.tensor(), r.tensor_index()));
  const TensorInfo& info = g_.tensors()[t];
  const int64_t extent = info.shape.HasBatch()    ? p_.global_batch()
                         : info.shape.rank() == 0 ? 1
                                                  : info.shape.dim(0).value;
  const bool whole = r.begin() == 0 && r.end() == 0;
  if (!whole && (r.begin() < 0 || r.end() <= r.begin() || r.end() > extent)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), " names rows [", r.begin(), ", ", r.end(), ") of '", r.tensor(),
                     "', which has ", extent, info.shape.HasBatch() ? " (the global batch)" : ""));
  }
  if (bytes != kUnstated && bytes != RangeBytes(info, r.begin(), r.end())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), " says ", bytes, " bytes of '", r.tensor(), "' rows [", r.begin(),
                     ", ", r.end(), "), which hold ", RangeBytes(info, r.begin(), r.end())));
  }
  return absl::OkStatus();
}

absl::Status Validator::CheckRanges() const {
  for (const quilt::v1::DeviceProgram& dp : p_.devices()) {
    for (const auto* list : {&dp.persistent(), &dp.feeds()}) {
      for (const TensorRange& r : *list) RETURN_IF_ERROR(CheckRange(r, -1, kUnstated));
    }
  }
  for (const Node& node : nodes_) {
    const Instruction& ins = *node.ins;
    switch (ins.kind_case()) {
      case Instruction::kSend:
        RETURN_IF_ERROR(CheckRange(ins.send().range(), ins.id(), ins.send().bytes()));
        break;
      case Instruction::kRecv:
        RETURN_IF_ERROR(CheckRange(ins.recv().range(), ins.id(), ins.recv().bytes()));
        RETURN_IF_ERROR(CheckRange(ins.recv().into(), ins.id(), kUnstated));
        break;
      case Instruction::kSplit:
        RETURN_IF_ERROR(CheckRange(ins.split().source(), ins.id(), kUnstated));
        for (const TensorRange& r : ins.split().parts()) {
          RETURN_IF_ERROR(CheckRange(r, ins.id(), kUnstated));
        }
        break;
      case Instruction::kConcat:
        for (const TensorRange& r : ins.concat().parts()) {
          RETURN_IF_ERROR(CheckRange(r, ins.id(), kUnstated));
        }
        RETURN_IF_ERROR(CheckRange(ins.concat().target(), ins.id(), kUnstated));
        break;
      case Instruction::kPsPush:
        RETURN_IF_ERROR(CheckRange(ins.ps_push().gradient(), ins.id(), ins.ps_push().bytes()));
        break;
      case Instruction::kPsAccumulate:
        RETURN_IF_ERROR(CheckRange(ins.ps_accumulate().gradient(), ins.id(), kUnstated));
        break;
      case Instruction::kPsPull:
        RETURN_IF_ERROR(CheckRange(ins.ps_pull().parameter(), ins.id(), ins.ps_pull().bytes()));
        break;
      default:
        break;
    }
  }
  return absl::OkStatus();
}

}  // namespace quilt::validator_internal
