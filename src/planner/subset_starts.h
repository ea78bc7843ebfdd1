// Starts for the HeteroG search besides the data-parallel baselines: data
// parallelism over a subset of the devices by speed (the fastest k
// devices, a node, the fastest k nodes; SearchSpace::SubsetOptions), ring
// all-reduce, in either execution order. Where slower nodes sit behind
// slower links, data parallelism over the fastest nodes alone beats every
// baseline over the whole cluster (HAP's cluster: resnet50 over its two
// V100 machines, 0.32 s per step against 0.54 s; docs/BENCHMARKS.md), and
// the search, moving a group or a run of groups at a time, may not reach
// it from there.
#ifndef QUILT_SRC_PLANNER_SUBSET_STARTS_H_
#define QUILT_SRC_PLANNER_SUBSET_STARTS_H_

#include <optional>
#include <string>

#include "absl/time/time.h"
#include "src/planner/search_space.h"

namespace quilt {

struct SubsetStart {
  PlanState state;
  Score score;
  std::string name;  // "data parallelism over fastest 2 nodes"
};

// The fastest subset start within the search's memory share on the coarse
// model that beats `best` (a start that fits beats one that does not);
// none where none does, or none is judged before `deadline`. Starts
// whose bound cannot beat a `best` that fits are not simulated.
std::optional<SubsetStart> BestSubsetStart(SearchSpace* space, int groups, const Score& best,
                                           absl::Time deadline);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_SUBSET_STARTS_H_
