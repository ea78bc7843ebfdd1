// Instruction priorities: HEFT upward ranks (an instruction's own estimated
// time plus the largest rank among the instructions that wait for it), so
// that the critical path runs first; optionally with the ops that feed a
// transfer lifted by the communication queued behind it on its device
// (ExecutionOrder TRANSFERS_FIRST). Estimates come from the cost model;
// without one every instruction counts one unit.
#ifndef QUILT_SRC_PLANNER_PRIORITIES_H_
#define QUILT_SRC_PLANNER_PRIORITIES_H_

#include <utility>
#include <vector>

#include "proto/quilt/v1/program.pb.h"
#include "proto/quilt/v1/strategy.pb.h"
#include "src/cluster/topology.h"
#include "src/cost/cost_model.h"
#include "src/graph/graph_index.h"

namespace quilt {

// Every execution order a plan can have (Strategy.order).
inline constexpr quilt::v1::ExecutionOrder kExecutionOrders[] = {
    quilt::v1::EXECUTION_ORDER_CRITICAL_PATH, quilt::v1::EXECUTION_ORDER_TRANSFERS_FIRST};

// `instrs[i]` = (device, instruction with id i); `groups[g - 1]` = the
// device indices of collective group g. `hints` (optional, by index): a
// computation's op index, a transfer's peer (or server) device index,
// where its caller knows them (else they are looked up by name). Returns
// rank per index.
std::vector<double> HeftPriorities(
    const std::vector<std::pair<int, quilt::v1::Instruction*>>& instrs,
    const std::vector<std::vector<int>>& groups, const Topology& topology, const GraphIndex& graph,
    const CostModel* cost, quilt::v1::ExecutionOrder order,
    const std::vector<int>* hints = nullptr);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_PRIORITIES_H_
