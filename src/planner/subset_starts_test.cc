// Data parallelism over the fastest devices or nodes alone as a start: the
// best beats the score it is given, over one of SubsetOptions; searched
// from alongside the first search, it can lead to a faster plan.
#include "src/planner/subset_starts.h"

#include <algorithm>

#include "gtest/gtest.h"
#include "src/cluster/random_cluster.h"
#include "src/planner/heterog.h"
#include "src/planner/plan.h"
#include "src/planner/planner_test_util.h"

namespace quilt {
namespace {

// A node of four fast devices and two nodes of one slower device each,
// 1 Gbit/s between nodes.
quilt::v1::ClusterSpec FastNodeAndStragglers() {
  quilt::v1::ClusterSpec spec;
  spec.set_name("fast-node-and-stragglers");
  for (int n = 0; n < 3; ++n) {
    auto* node = spec.add_nodes();
    node->set_node_id(n == 0 ? "fast" : "slow" + std::to_string(n));
    for (int d = 0; d < (n == 0 ? 4 : 1); ++d) {
      testing::AddTestGpu(node, d, n == 0 ? 1.4e13 : 9e12);
    }
    node->mutable_intra_node_link()->set_bandwidth_bytes_per_s(1.2e11);
    node->mutable_nic()->set_bandwidth_bytes_per_s(1.25e8);
  }
  return spec;
}

// The plan of transformer at batch 256 on the bench's random cluster 3
// (5 nodes), with the subset starts or without.
absl::StatusOr<PlanResult> OnRandom3(bool subset_starts) {
  auto w = testing::Make("transformer", RandomCluster(3));
  PlanOptions po;
  po.global_batch = 256;
  po.strategy = "heterog";
  po.search.subset_starts = subset_starts;
  return Plan(w->graph, w->topo, po);
}

TEST(SubsetStarts, ASearchFromTheFastestNodesFindsAFasterPlan) {
  // There data parallelism over the fastest 2 nodes is faster on the
  // coarse model than every baseline; the search from it, alongside the
  // first, ends on a plan 10 % faster in full than the first search's.
  absl::StatusOr<PlanResult> with = OnRandom3(true);
  absl::StatusOr<PlanResult> without = OnRandom3(false);
  ASSERT_THAT(with.status(), IsOk());
  ASSERT_THAT(without.status(), IsOk());
  const quilt::v1::StrategyEstimate* a = testing::FindEstimate(with->report, "heterog");
  const quilt::v1::StrategyEstimate* b = testing::FindEstimate(without->report, "heterog");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(a->feasible() && b->feasible());
  EXPECT_LT(a->step_time_s(), b->step_time_s());
  // The explanation names where the plan's search began.
  EXPECT_EQ(a->search().start().rfind("data parallelism over ", 0), 0u) << a->search().start();
  EXPECT_EQ(b->search().start().rfind("data parallelism over ", 0), std::string::npos)
      << b->search().start();
}

TEST(SubsetStarts, TheBestStartIsOverASubsetAndBeatsTheGivenScore) {
  auto w = testing::Make("resnet50", FastNodeAndStragglers());
  absl::StatusOr<std::unique_ptr<CoarseModel>> coarse =
      CoarsenForSearch(w->graph, w->topo, *w->cost, 64, 0);
  ASSERT_THAT(coarse.status(), IsOk());
  SearchSpace space(w->topo, *w->cost, **coarse, 64, 0.92);
  ASSERT_FALSE(space.SubsetOptions().empty());
  // Against a score nothing beats: none.
  Score unbeatable;
  unbeatable.time_s = 1e-9;
  EXPECT_FALSE(BestSubsetStart(&space, (*coarse)->num_groups(), unbeatable, absl::InfiniteFuture())
                   .has_value());
  // Against one that does not fit: the fastest that fits, over a subset.
  Score over;
  over.time_s = 1e9;
  over.overflow_bytes = 1;
  std::optional<SubsetStart> s =
      BestSubsetStart(&space, (*coarse)->num_groups(), over, absl::InfiniteFuture());
  ASSERT_TRUE(s.has_value());
  EXPECT_TRUE(s->score.feasible());
  EXPECT_EQ(s->name.rfind("data parallelism over ", 0), 0u) << s->name;
  const int option = s->state.place[0];
  EXPECT_TRUE(std::count(space.SubsetOptions().begin(), space.SubsetOptions().end(), option));
  EXPECT_LT(space.options()[option].replicas.size(), 6u);
}

}  // namespace
}  // namespace quilt
