// The search's memory share raised to a start that fits in full. The
// search judges memory on its coarsened graph, which misses short-lived
// tensors inside groups, so a plan may fill only a share of each device
// there (SearchOptions::memory_fraction). Near the edge of memory no
// baseline may fit that share although one fits in full: the search then
// meets no plan that fits and runs until its time budget ends. Where the
// search's start is over the share but fits every device in full, each
// device may hold on the coarse model as much as the start holds there:
// plans no fuller than one known to fit. (The full simulation after the
// search still decides: a plan over memory there is repaired or passed
// over, as any.)
#ifndef QUILT_SRC_PLANNER_MEMORY_SHARE_H_
#define QUILT_SRC_PLANNER_MEMORY_SHARE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "src/cluster/topology.h"
#include "src/cost/cost_model.h"
#include "src/graph/graph.h"
#include "src/planner/baselines.h"
#include "src/planner/search_space.h"

namespace quilt {

// A start over the share: its state in the search's space and the
// baseline it is.
struct ShareCandidate {
  PlanState state;
  const NamedStrategy* baseline = nullptr;
};

struct ShareRaise {
  // Whether a candidate fits in full and the caps were raised.
  bool raised = false;
  // The candidates over memory in full, by name.
  std::vector<std::string> over_in_full;
  // Those that fit: their fullest device's peak over its memory, the
  // highest; and their step, the lowest (in the faster execution order
  // where RaiseShareToStarts simulated both).
  double full_fraction = 0;
  double full_step_s = 0;
  // Devices whose cap is now above the share.
  int devices = 0;
  // What was done, in words (empty where nothing was).
  std::string description;
};

// The starts to simulate in full, at most `most`: of `starts` (each
// baseline with its state and score on the coarse model), those over the
// share by no more than the devices' memory above it, in all (the coarse
// model errs both ways), the closest to it first, each split once (the
// even and proportional splits are equal on equal devices).
std::vector<ShareCandidate> PickShareCandidates(
    const Topology& topo,
    const std::vector<std::pair<const NamedStrategy*, std::pair<PlanState, Score>>>& starts,
    size_t most, double memory_fraction);

// Simulates each candidate's baseline in full in its start's order; where
// some fit every device, raises `space`'s caps to the highest of their
// coarse peaks on each device (SearchSpace::RaiseMemoryCaps).
// `memory_fraction`: the share the space judges by. `step_at_least_s`
// (0: none): a candidate that fits with a step from there up to a quarter
// more is simulated in the other execution order too, which may take it
// below (the caller decides by it; further above, no order would).
// Errors: a baseline does not lower or simulate.
absl::StatusOr<ShareRaise> RaiseShareToStarts(SearchSpace* space, const Graph& g,
                                              const Topology& topo, const CostModel& cost,
                                              int64_t batch,
                                              const std::vector<ShareCandidate>& candidates,
                                              double memory_fraction, double step_at_least_s);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_MEMORY_SHARE_H_
