// The planner's local search over a SearchSpace (HeteroG's search, DESIGN
// §5): first-improvement passes over moves (whole-plan changes, then
// aggregation changes group by group, runs of groups, single groups),
// plans simulated kSearchWindow at a time, restarts from the best plan
// kicked by random moves, until a pass and the restarts find nothing, the
// evaluation limit or the time budget. Deterministic for a seed, unless
// the time budget ends it. Besides: small action spaces enumerated, and a
// descent on the plans' lower bound that regroups a start.
#ifndef QUILT_SRC_PLANNER_LOCAL_SEARCH_H_
#define QUILT_SRC_PLANNER_LOCAL_SEARCH_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "src/planner/heterog.h"
#include "src/planner/search_space.h"

namespace quilt {

// Plans the search simulates at once (SearchSpace::EvaluateAll): the local
// search's next moves, the explanation's put-back plans. Fixed, so that the
// plans are the same whatever the threads.
inline constexpr size_t kSearchWindow = 2;

struct LocalSearchResult {
  PlanState best;
  Score score;
  // "converged", "evaluation limit" or "time budget".
  std::string stopped_by;
  // The fastest plan seen over the search's share of memory but within the
  // devices' whole memory, if any.
  std::optional<std::pair<PlanState, Score>> near;
  // Up to 8 plans that were the best before the result (the latest first).
  std::vector<std::pair<PlanState, Score>> earlier;
};

// Searches from `from` (of `from_score`) over `groups` op groups until
// `deadline` or the options' limits. `whole_placements`: try moving every
// group at once to the placements the space's estimate favours.
// `evaluation_cap` > 0: plans it judges at most, whether one fits or not
// (`cap_until_fit`: until one fits; then the options' limit alone).
// `start` names `from` in progress reports (SearchOptions::progress).
absl::StatusOr<LocalSearchResult> RunLocalSearch(SearchSpace* space, int groups,
                                                 const SearchOptions& options, absl::Time deadline,
                                                 bool whole_placements, const std::string& start,
                                                 int64_t evaluation_cap, const PlanState& from,
                                                 const Score& from_score,
                                                 bool cap_until_fit = false);

// Every state of `groups` groups, each taking one of `choices`, in both
// execution orders, until `deadline`: the best (the optimum, where the
// deadline does not end it first). For small action spaces.
absl::StatusOr<std::pair<PlanState, Score>> EnumerateStates(
    SearchSpace* space, int groups, const std::vector<std::pair<int, Method>>& choices,
    absl::Time deadline);

// Coordinate descent on the plans' lower bound (SearchSpace::BoundOf),
// from `from`: group by group, the placement and all-reduce method whose
// plan has the lowest bound, in rounds until none lowers it (at most
// `rounds`). Parameter servers are left as they are (the bound leaves
// their traffic out). Neither lowers nor simulates a plan: a seed for the
// search, to be simulated before it is used.
PlanState DescendBound(SearchSpace* space, int groups, const PlanState& from, int rounds);

// Coordinate descent on the plans' memory (SearchSpace::MemoryOverShare),
// from `from`: group by group, the placement and all-reduce method whose
// plan is least over the search's share of memory by that bound, the
// lower step bound among equals, in rounds until none lowers either (at
// most `rounds`). Parameter servers are left as they are. A seed for the
// search where nothing fits, to be simulated before it is used.
PlanState DescendMemory(SearchSpace* space, int groups, const PlanState& from, int rounds);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_LOCAL_SEARCH_H_
