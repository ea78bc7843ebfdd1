// One strategy's estimate: lowered, validated (optionally) and simulated,
// in one execution order or both, the faster kept; what Plan reports for
// each strategy it simulates.
#ifndef QUILT_SRC_PLANNER_ESTIMATE_H_
#define QUILT_SRC_PLANNER_ESTIMATE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "proto/quilt/v1/plan.pb.h"
#include "proto/quilt/v1/program.pb.h"
#include "src/cluster/topology.h"
#include "src/cost/cost_model.h"
#include "src/graph/graph.h"
#include "src/graph/graph_index.h"
#include "src/planner/arena_program.h"
#include "src/planner/baselines.h"
#include "src/sim/simulator.h"

namespace quilt {

// Lowers, validates and simulates one strategy into an estimate. With
// `both_orders`, the program is also simulated in the other execution
// order and the faster kept (the estimate's strategy says which).
// `program` gets the program without the training graph inside.
absl::StatusOr<quilt::v1::StrategyEstimate> Estimate(const Graph& graph, const Topology& topology,
                                                     const CostModel& cost,
                                                     const NamedStrategy& strategy, int64_t batch,
                                                     double lower_bound,
                                                     quilt::v1::DistributedProgram* program,
                                                     SimResult* sim, bool trace, bool both_orders);
// The same for the graph `index` resolves (built once by the caller).
absl::StatusOr<quilt::v1::StrategyEstimate> Estimate(
    const GraphIndex& index, const Topology& topology, const CostModel& cost,
    const NamedStrategy& strategy, int64_t batch, double lower_bound,
    quilt::v1::DistributedProgram* program, SimResult* sim, bool trace, bool both_orders);

// The same, the program lowered onto an arena of `program`'s own and left
// there, validated only with `validate` (Plan validates the one it
// returns, not every candidate: a tenth of its time on 64 devices).
absl::StatusOr<quilt::v1::StrategyEstimate> EstimateOnArena(
    const GraphIndex& index, const Topology& topology, const CostModel& cost,
    const NamedStrategy& strategy, int64_t batch, double lower_bound, ArenaProgram* program,
    SimResult* sim, bool trace, bool both_orders, bool validate = false);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_ESTIMATE_H_
