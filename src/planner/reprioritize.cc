// Reprioritize (lower.h): new HEFT priorities for a lowered program's
// instructions under another execution order.
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/planner/lower.h"
#include "src/planner/priorities.h"

namespace quilt {

using quilt::v1::Instruction;

absl::Status Reprioritize(const Graph& g, const Topology& topo, const CostModel* cost,
                          quilt::v1::ExecutionOrder order, quilt::v1::DistributedProgram* prog) {
  ASSIGN_OR_RETURN(const GraphIndex ix, GraphIndex::Build(g));
  return Reprioritize(ix, topo, cost, order, prog);
}

absl::Status Reprioritize(const GraphIndex& ix, const Topology& topo, const CostModel* cost,
                          quilt::v1::ExecutionOrder order, quilt::v1::DistributedProgram* prog) {
  // Ids index the lowering's instruction list; those fused away are gaps.
  int64_t n = 0;
  for (const auto& dp : prog->devices()) {
    for (const auto& ins : dp.instructions()) n = std::max(n, ins.id() + 1);
  }
  Instruction gap;
  std::vector<std::pair<int, Instruction*>> instrs(n, {0, &gap});
  for (auto& dp : *prog->mutable_devices()) {
    const int device = topo.DeviceIndex(dp.device());
    if (device < 0) return absl::InvalidArgumentError("unknown device '" + dp.device() + "'");
    for (auto& ins : *dp.mutable_instructions()) {
      if (ins.id() < 0 || instrs[ins.id()].second != &gap) {
        return absl::InvalidArgumentError(absl::StrCat("instruction id ", ins.id(), " on ",
                                                       dp.device(), " is negative or repeated"));
      }
      instrs[ins.id()] = {device, &ins};
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t d : instrs[i].second->deps()) {
      if (d < 0 || d >= n || instrs[d].second == &gap) {
        return absl::InvalidArgumentError(
            absl::StrCat("instruction ", i, " depends on ", d, ", which no instruction is"));
      }
    }
  }
  // groups[id - 1]: the members of group `id`.
  std::vector<std::vector<int>> groups;
  for (const auto& group : prog->groups()) {
    if (group.id() < 1 || group.id() > prog->groups_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("group id ", group.id(), " is not in 1..", prog->groups_size()));
    }
    if (static_cast<size_t>(group.id()) > groups.size()) groups.resize(group.id());
    std::vector<int>& members = groups[group.id() - 1];
    for (const std::string& d : group.devices()) {
      members.push_back(topo.DeviceIndex(d));
      if (members.back() < 0) return absl::InvalidArgumentError("unknown device '" + d + "'");
    }
  }
  const std::vector<double> priority = HeftPriorities(instrs, groups, topo, ix, cost, order);
  for (int64_t i = 0; i < n; ++i) {
    if (instrs[i].second != &gap) instrs[i].second->set_priority(priority[i]);
  }
  prog->mutable_strategy()->set_order(order);
  return absl::OkStatus();
}

quilt::v1::ExecutionOrder OtherOrder(quilt::v1::ExecutionOrder order) {
  return order == quilt::v1::EXECUTION_ORDER_CRITICAL_PATH
             ? quilt::v1::EXECUTION_ORDER_TRANSFERS_FIRST
             : quilt::v1::EXECUTION_ORDER_CRITICAL_PATH;
}

std::vector<double> Priorities(const quilt::v1::DistributedProgram& program) {
  std::vector<double> out;
  for (const auto& dp : program.devices()) {
    for (const auto& ins : dp.instructions()) out.push_back(ins.priority());
  }
  return out;
}

void SetPriorities(const std::vector<double>& priorities, quilt::v1::DistributedProgram* program) {
  size_t k = 0;
  for (auto& dp : *program->mutable_devices()) {
    for (auto& ins : *dp.mutable_instructions()) {
      if (k < priorities.size()) ins.set_priority(priorities[k++]);
    }
  }
}

}  // namespace quilt
