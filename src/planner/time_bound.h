// A lower bound on a plan state's coarse step time (SearchSpace::Evaluate)
// that neither lowers nor simulates it: each device runs its ops one at a
// time, so the step lasts at least the busiest device's forward and
// backward computation, plus the host's step overhead of the devices the
// plan uses. Per (group, placement option) the devices' seconds are
// computed once; a bound then costs a sum over the groups. The local search
// skips the moves whose bound shows they cannot beat the current plan.
#ifndef QUILT_SRC_PLANNER_TIME_BOUND_H_
#define QUILT_SRC_PLANNER_TIME_BOUND_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "src/cluster/topology.h"
#include "src/planner/coarse_graph.h"

namespace quilt {

struct PlacementOption;
struct PlanState;

class TimeBound {
 public:
  TimeBound(const CoarseModel& coarse, const Topology& topo, int64_t batch);
  // Seconds; never more than the simulated step time of `state` (whose
  // placements index `options`). Uses the coarse model's cost model: not
  // while another thread uses it.
  double Of(const PlanState& state, const std::vector<PlacementOption>& options);

 private:
  // Group k's forward and backward seconds on each device of `option`.
  const std::vector<std::pair<int, double>>& Seconds(int k, int option, const PlacementOption& o);

  const CoarseModel& coarse_;
  const Topology& topo_;
  int64_t batch_;
  // Per group: its ops other than updates, and whether each carries the batch.
  std::vector<std::vector<std::pair<int, bool>>> ops_;
  // [option][group]: (device, seconds); an empty slot list: not computed.
  std::vector<std::vector<std::vector<std::pair<int, double>>>> seconds_;
  std::vector<std::vector<bool>> known_;
  std::vector<double> busy_;  // scratch, per device
  std::vector<int> used_;     // scratch, per device: the last call that used it
  int calls_ = 0;
};

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_TIME_BOUND_H_
