// The search from the start regrouped by the plans' lower bound, beside
// the search from the start: the first search is the same with it, and
// its plan is weighed in full with every way of forming collectives.
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/planner/baselines.h"
#include "src/planner/heterog.h"
#include "src/planner/plan.h"
#include "src/planner/planner_test_util.h"

namespace quilt {
namespace {

// Where the start fits, the search also starts from the start regrouped
// by the bound, alongside: the first search is the same, and the other's
// plan is simulated in full with every way of forming collectives.
// vgg19 on HAP's cluster: the first search moves every group to the
// fastest nodes; from the regrouped start, the classifier alone moves to
// one node, far faster.
TEST(HeteroG, SearchesFromTheStartRegroupedByTheBoundAlongside) {
  auto f = testing::OnShippedCluster("vgg19", "hap_cluster");
  ASSERT_NE(f, nullptr);
  const int64_t batch = 512;
  const std::vector<NamedStrategy> baselines = Baselines(f->graph, f->topo, *f->cost, batch);
  SearchOptions without;
  without.time_budget_s = 300;
  without.bound_seed_evaluations = 0;
  SearchOptions with = without;
  with.bound_seed_evaluations = SearchOptions().bound_seed_evaluations;
  ASSERT_GT(with.bound_seed_evaluations, 0);
  absl::StatusOr<SearchResult> a =
      SearchHeteroG(f->graph, f->topo, *f->cost, batch, baselines, without);
  absl::StatusOr<SearchResult> b =
      SearchHeteroG(f->graph, f->topo, *f->cost, batch, baselines, with);
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  EXPECT_EQ(b->start, a->start);
  EXPECT_EQ(b->result_s, a->result_s);
  EXPECT_EQ(b->variants[0].SerializeAsString(), a->variants[0].SerializeAsString());
  EXPECT_TRUE(a->other_searches.empty());
  ASSERT_EQ(b->other_searches.size(), 1u);
  const SearchResult::OtherSearch& o = b->other_searches[0];
  EXPECT_TRUE(absl::EndsWith(o.start, "regrouped by the bound")) << o.start;
  EXPECT_LT(o.start_s, a->start_s);
  // Its choices are measured against the baseline it was regrouped from.
  EXPECT_EQ(o.against, a->start);
  EXPECT_EQ(o.choices.size(), a->choices.size());
  EXPECT_LT(o.result_s, 0.8 * a->result_s);
  EXPECT_EQ(o.variant_end - o.variant, 2 + with.bucket_bytes.size());
  EXPECT_EQ(o.variant_end, b->variants.size());
  // In full, the plan is the other search's, and faster.
  PlanOptions po;
  po.global_batch = batch;
  po.strategy = "heterog";
  po.search = without;
  absl::StatusOr<PlanResult> alone = Plan(f->graph, f->topo, po);
  po.search = with;
  absl::StatusOr<PlanResult> both = Plan(f->graph, f->topo, po);
  ASSERT_THAT(alone.status(), IsOk());
  ASSERT_THAT(both.status(), IsOk());
  ASSERT_EQ(both->report.best(), "heterog");
  const auto step = [](const PlanResult& r) {
    for (const auto& e : r.report.estimates()) {
      if (e.name() == "heterog") return e.step_time_s();
    }
    return 0.0;
  };
  EXPECT_LT(step(*both), 0.8 * step(*alone));
  for (const auto& e : both->report.estimates()) {
    if (e.name() == "heterog") {
      EXPECT_TRUE(absl::EndsWith(e.search().start(), "regrouped by the bound"))
          << e.search().start();
      EXPECT_EQ(e.search().decisions_against(), a->start);
    }
  }
}

}  // namespace
}  // namespace quilt
