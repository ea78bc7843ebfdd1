// Starting plans for the HeteroG search where no data-parallel split fits
// memory. Layer-wise seeds put the op groups, in order, on single devices
// (or whole nodes), each filled in proportion to its memory. Staged seeds
// cut the groups, in order, into k stages, each replicated over a run of
// devices in node order (replicas in proportion to speed), the cuts placed
// where every stage's fullest device is least full: the plans between data
// parallelism (one stage) and the layer-wise split (one device a stage);
// with fewer stages, each group computes over more devices. The seed
// nearest to fitting is also balanced group by group on the memory bound.
#ifndef QUILT_SRC_PLANNER_SEEDS_H_
#define QUILT_SRC_PLANNER_SEEDS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "src/cluster/topology.h"
#include "src/cost/cost_model.h"
#include "src/graph/graph.h"
#include "src/planner/coarse_graph.h"
#include "src/planner/search_space.h"

namespace quilt {

// Groups over single devices in order, node by node (or over whole nodes,
// `by_node`), each filled up to its memory with the groups' parameters,
// gradients, optimizer state and activations for the whole batch.
PlanState LayerwiseSeed(const Topology& topo, const CoarseModel& coarse, const Graph& g,
                        int64_t batch, bool by_node, SearchSpace* space);

struct StagedSeed {
  // Each stage's placement (not yet in the search's space), and each
  // group's stage.
  std::vector<PlacementOption> stage_options;
  std::vector<int> stage_of_group;
  Score score;  // on the coarse model
  int stages() const { return static_cast<int>(stage_options.size()); }
  // The seed as a state of `space` (its stages' options added to it).
  PlanState In(SearchSpace* space) const;
};

// The groups cut into k stages (the score left unset). A run of more
// devices than the batch has rows keeps its fastest devices, one row each;
// stages the cut leaves without groups are dropped (stages() is then less
// than k).
std::optional<StagedSeed> CutInStages(const Topology& topo, const CoarseModel& coarse,
                                      const Graph& g, int64_t batch, int k,
                                      const SearchSpace& space);

// The best `count` staged seeds on the coarse model, best first
// (Score::BetterThan: the fastest that fit, else the nearest to fitting;
// no two alike) of k = 2, 3, … stages, k below one stage a device and at
// most one a group. Fewer stages compute each group over more devices,
// but a stage over several nodes sums its gradients over their NICs:
// every k is simulated (at most a group count's worth), in a space of
// their own (`space` only lends its options' replica counts). None on a
// cluster of fewer than three devices or a graph of one group. Errors:
// the coarse model's.
absl::StatusOr<std::vector<StagedSeed>> FindStagedSeeds(const Topology& topo,
                                                        const CostModel& fine_cost,
                                                        const CoarseModel& coarse, const Graph& g,
                                                        int64_t batch, double memory_fraction,
                                                        int count, const SearchSpace& space);

// The name of MemoryBalancedSeed's seed.
inline constexpr char kMemoryBalancedSeed[] = "the closest seed balanced by memory";

// `from` (the seed nearest to fitting) descended on the plans' memory bound
// (DescendMemory, memory_bound.h) and simulated, where that changes it.
// The space gets options over runs of 2 to 4 consecutive nodes (at most
// half of them; on clusters of 3 to 16 nodes) first: a group too large
// for one node's memory at its rows may fit over two or three, where
// every device would hold it whole. None where the descent leaves `from`
// as it is or its plan cannot be simulated.
std::optional<std::pair<PlanState, Score>> MemoryBalancedSeed(const Topology& topo, int groups,
                                                              const PlanState& from,
                                                              SearchSpace* space);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_SEEDS_H_
