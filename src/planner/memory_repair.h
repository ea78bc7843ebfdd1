// Memory repair on the full graph: where the search's plan does not fit on
// the coarsened graph, the full simulation may still find it over memory
// by little on a few devices (the coarsened graph's memory errs both ways
// by percents, so near the edge the search may never see a fit). The
// repair moves groups off the devices the full simulation finds over their
// memory, one group at a time, to the placement of a neighbouring group or
// to a device with room, or serving a replicated group's parameters
// elsewhere; then, where whole groups are too large to move, it shifts
// forward ops (with their gradients and updates) across the boundary
// between a group with a device over its memory and a neighbouring group
// whose devices all have room, in runs of 1, 2, 4, … ops. Each round it
// takes the fastest move that fits, else the move that leaves the least
// over memory in all, until the plan fits, no move takes any off, or its
// time or simulations run out. (Taking instead the move that adds the
// least to the step per byte it takes off fitted fewer plans in the
// repair's time, none of them faster.) Every plan it judges is simulated in full, as
// `quiltctl plan` simulates its result.
#ifndef QUILT_SRC_PLANNER_MEMORY_REPAIR_H_
#define QUILT_SRC_PLANNER_MEMORY_REPAIR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/quilt/v1/strategy.pb.h"
#include "src/cluster/topology.h"
#include "src/cost/cost_model.h"
#include "src/graph/graph_index.h"
#include "src/planner/search_space.h"

namespace quilt {

// A forward op moved to the group numbered `to` (GroupPlacement.group):
// at the end of its ops, or at their front.
struct OpMove {
  std::string op;
  int to = 0;
  bool at_end = false;
};

struct RepairOutcome {
  PlanState state;  // the repaired plan (the start where nothing helped)
  // Then applied to the plan for the full graph (ApplyOpMoves), in order.
  std::vector<OpMove> op_moves;
  bool fits = false;      // whether it fits every device in full
  double step_s = 0;      // its full simulation's step
  double over_bytes = 0;  // bytes over capacity in full, summed (0 when it fits)
  int moves = 0;          // groups moved to another placement
  int served = 0;         // replicated groups' parameters served otherwise
  int shifts = 0;         // runs of ops shifted between groups (op_moves)
  int simulated = 0;      // plans simulated in full
  // It ended over memory by its deadline, not by its simulations: the
  // result depends on the machine's speed.
  bool ended_by_time = false;
};

// `index`: of the full training graph. Plans are judged with their
// gradients formed into collectives as `fusion` says
// (SearchSpace::FineStrategy). Errors: the start does not
// lower or simulate in full (a bug).
absl::StatusOr<RepairOutcome> RepairMemory(SearchSpace* space, const GraphIndex& index,
                                           const Topology& topo, const CostModel& cost,
                                           int64_t batch, const PlanState& start,
                                           absl::Time deadline, int max_simulations,
                                           int64_t fusion = SearchSpace::kFusePerGroup);

// What the repair did, in words, e.g. "moving 1 group and shifting 3 ops
// to neighbouring groups off the devices over their memory made it fit
// (40 plans simulated in full, 0.61 s)".
std::string DescribeRepair(const RepairOutcome& outcome, double seconds);

// Moves each op as `moves` says, in order (ops or groups not in
// `strategy` are passed over); the parameters a moved op reads are then
// aggregated as a parameter of its new group's ops is (where one is).
void ApplyOpMoves(const GraphIndex& index, const std::vector<OpMove>& moves,
                  quilt::v1::Strategy* strategy);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_MEMORY_REPAIR_H_
