#include "src/planner/program_validator.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/graph/op_registry.h"

namespace quilt {
namespace {

using quilt::v1::Instruction;
using Range = std::pair<int64_t, int64_t>;

bool Covers(const Range& have, const Range& need) {
  if (have.first == 0 && have.second == 0) return true;
  return have.first <= need.first && need.second <= have.second && !(need.first == 0 && need.second == 0);
}

}  // namespace

absl::Status ValidateProgram(const quilt::v1::DistributedProgram& p, const Graph& g,
                             const Topology& topo) {
  const int64_t batch = p.global_batch();
  if (batch <= 0) return absl::InvalidArgumentError("the program has no global batch");
  std::map<std::string, const Op*> ops;
  for (const Op& op : g.ops) ops[op.name] = &op;
  std::unordered_map<int64_t, std::pair<int, const Instruction*>> by_id;
  std::map<int64_t, std::pair<int, const Instruction*>> sends, recvs, pushes;
  std::map<int64_t, std::vector<const Instruction*>> collectives;
  // Per op: computed ranges; per parameter gradient: aggregations.
  std::map<std::string, std::vector<Range>> op_ranges;
  std::map<std::string, int> aggregated;
  for (const auto& dp : p.devices()) {
    const int d = topo.DeviceIndex(dp.device());
    if (d < 0) return absl::InvalidArgumentError("unknown device '" + dp.device() + "'");
    std::set<int64_t> seen_here;
    for (const Instruction& ins : dp.instructions()) {
      if (!by_id.emplace(ins.id(), std::make_pair(d, &ins)).second) {
        return absl::InvalidArgumentError(absl::StrCat("instruction id ", ins.id(), " is used twice"));
      }
      for (int64_t dep : ins.deps()) {
        if (dep >= ins.id()) {
          return absl::InvalidArgumentError(absl::StrCat("instruction ", ins.id(), " on ", dp.device(),
                                                         " depends on a later instruction ", dep));
        }
      }
      switch (ins.kind_case()) {
        case Instruction::kSend:
          sends[ins.send().tag()] = {d, &ins};
          break;
        case Instruction::kRecv:
          recvs[ins.recv().tag()] = {d, &ins};
          break;
        case Instruction::kPsPush:
          pushes[ins.ps_push().tag()] = {d, &ins};
          break;
        case Instruction::kAllReduce:
          collectives[ins.all_reduce().collective_id()].push_back(&ins);
          break;
        case Instruction::kCompute: {
          auto it = ops.find(ins.compute().op());
          if (it == ops.end()) {
            return absl::InvalidArgumentError("instruction runs unknown op '" + ins.compute().op() + "'");
          }
          op_ranges[ins.compute().op()].push_back({ins.compute().begin(), ins.compute().end()});
          break;
        }
        case Instruction::KIND_NOT_SET:
          return absl::InvalidArgumentError(absl::StrCat("instruction ", ins.id(), " has no kind"));
        default:
          break;
      }
    }
  }
  for (const auto& [id, entry] : by_id) {
    for (int64_t dep : entry.second->deps()) {
      if (!by_id.count(dep)) {
        return absl::InvalidArgumentError(absl::StrCat("instruction ", id, " depends on missing instruction ", dep));
      }
    }
  }
  for (const auto& [tag, s] : sends) {
    auto r = recvs.find(tag);
    if (r == recvs.end()) return absl::InvalidArgumentError(absl::StrCat("send tag ", tag, " has no receive"));
    const auto& send = s.second->send();
    const auto& recv = r->second.second->recv();
    if (send.bytes() != recv.bytes() || send.range().tensor() != recv.range().tensor() ||
        topo.DeviceIndex(send.peer_device()) != r->second.first ||
        topo.DeviceIndex(recv.peer_device()) != s.first) {
      return absl::InvalidArgumentError(absl::StrCat("send/receive tag ", tag, " do not match"));
    }
  }
  for (const auto& [tag, r] : recvs) {
    if (!sends.count(tag)) return absl::InvalidArgumentError(absl::StrCat("receive tag ", tag, " has no send"));
  }
  for (const auto& [cid, members] : collectives) {
    const auto& first = members.front()->all_reduce();
    if (static_cast<int>(members.size()) != first.devices_size()) {
      return absl::InvalidArgumentError(absl::StrCat("all-reduce ", cid, " has ", members.size(),
                                                     " member instructions for ", first.devices_size(), " devices"));
    }
    for (const Instruction* m : members) {
      const auto& ar = m->all_reduce();
      if (ar.bytes() != first.bytes() || ar.tensors_size() != first.tensors_size()) {
        return absl::InvalidArgumentError(absl::StrCat("all-reduce ", cid, " members disagree"));
      }
    }
    for (const auto& t : first.tensors()) ++aggregated[t];
  }
  // Replicas of every op cover the batch (batch ops) exactly once.
  for (const Op& op : g.ops) {
    auto it = op_ranges.find(op.name);
    if (it == op_ranges.end()) {
      return absl::InvalidArgumentError("op '" + op.name + "' runs on no device");
    }
    bool batched = false;
    for (const std::string& t : op.outputs) batched |= g.FindTensor(t)->shape.HasBatch();
    for (const std::string& t : op.inputs) batched |= !t.empty() && g.FindTensor(t)->shape.HasBatch();
    if (!batched) continue;
    std::vector<Range> r = it->second;
    std::sort(r.begin(), r.end());
    int64_t at = 0;
    for (const Range& x : r) {
      if (x.first != at || x.second <= x.first) {
        return absl::InvalidArgumentError(absl::StrCat("the replicas of op '", op.name,
                                                       "' do not cover the batch [0, ", batch,
                                                       ") exactly once"));
      }
      at = x.second;
    }
    if (at != batch) {
      return absl::InvalidArgumentError(absl::StrCat("the replicas of op '", op.name,
                                                     "' stop at row ", at, " of ", batch));
    }
  }
  // Every gradient of a parameter updated on several devices is summed
  // exactly once (one all-reduce); parameter-server gradients by one
  // accumulation per shard.
  for (const Op& op : g.ops) {
    const OpSchema* s = OpRegistry::Global().Find(op.type);
    if (!s->is_update) continue;
    const std::string& grad = op.inputs[1];
    const auto& ranges = op_ranges[op.name];
    const bool sharded = std::any_of(ranges.begin(), ranges.end(),
                                     [](const Range& r) { return r != Range{0, 0}; });
    if (aggregated[grad] > 1) {
      return absl::InvalidArgumentError("gradient '" + grad + "' is all-reduced more than once");
    }
    (void)sharded;
  }
  // Inputs of computations: resident or written by a dependency.
  std::map<std::tuple<std::string, int>, std::vector<Range>> resident;
  for (const auto& dp : p.devices()) {
    const int d = topo.DeviceIndex(dp.device());
    for (const auto& r : dp.persistent()) resident[{r.tensor(), d}].push_back({r.begin(), r.end()});
    for (const auto& r : dp.feeds()) resident[{r.tensor(), d}].push_back({r.begin(), r.end()});
  }
  // Writes of each instruction: (tensor, range).
  auto writes = [&](const Instruction& ins, std::vector<std::pair<std::string, Range>>* out) {
    switch (ins.kind_case()) {
      case Instruction::kCompute: {
        const Op& op = *ops[ins.compute().op()];
        for (const std::string& t : op.outputs) {
          const bool bt = g.FindTensor(t)->shape.HasBatch();
          out->push_back({t, bt ? Range{ins.compute().begin(), ins.compute().end()} : Range{0, 0}});
        }
        break;
      }
      case Instruction::kRecv:
        out->push_back({ins.recv().into().tensor(), {ins.recv().into().begin(), ins.recv().into().end()}});
        break;
      case Instruction::kConcat:
        out->push_back({ins.concat().target().tensor(), {ins.concat().target().begin(), ins.concat().target().end()}});
        break;
      case Instruction::kAllReduce:
        for (const auto& t : ins.all_reduce().tensors()) out->push_back({t, {0, 0}});
        break;
      case Instruction::kPsAccumulate:
        out->push_back({ins.ps_accumulate().gradient().tensor(),
                        {ins.ps_accumulate().gradient().begin(), ins.ps_accumulate().gradient().end()}});
        break;
      case Instruction::kPsPull:
        out->push_back({ins.ps_pull().parameter().tensor(), {0, 0}});
        break;
      default:
        break;
    }
  };
  for (const auto& dp : p.devices()) {
    const int d = topo.DeviceIndex(dp.device());
    for (const Instruction& ins : dp.instructions()) {
      if (!ins.has_compute()) continue;
      const Op& op = *ops[ins.compute().op()];
      const OpSchema* s = OpRegistry::Global().Find(op.type);
      const Range own{ins.compute().begin(), ins.compute().end()};
      const bool shard = s->is_update && own != Range{0, 0};
      for (const std::string& in : op.inputs) {
        if (in.empty()) continue;
        const bool bt = g.FindTensor(in)->shape.HasBatch();
        const Range need = bt || shard ? own : Range{0, 0};
        bool ok = false;
        for (const Range& r : resident[{in, d}]) ok |= Covers(r, need) || r == need;
        for (int64_t dep : ins.deps()) {
          const auto& [dd, di] = by_id.at(dep);
          if (dd != d) continue;
          std::vector<std::pair<std::string, Range>> w;
          writes(*di, &w);
          for (const auto& [t, r] : w) ok |= t == in && (Covers(r, need) || r == need);
        }
        if (!ok) {
          return absl::InvalidArgumentError(absl::StrCat(
              "op '", op.name, "' on ", dp.device(), " reads '", in, "' rows [", need.first, ", ",
              need.second, "), which is neither resident there nor written by one of its dependencies"));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace quilt
