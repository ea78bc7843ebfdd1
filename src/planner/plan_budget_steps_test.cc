// The planning budget's end stops the steps after the first full
// simulations: the search plan's other forms are not simulated (the
// summary says how many were left untried) and the plan is still never
// slower than the best baseline; with time to spare, none is left
// untried. Where nothing fits, no batch to suggest is checked past the
// end: the memory model's batch is reported as unchecked.
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/planner/plan.h"
#include "src/planner/planner_test_util.h"

namespace quilt {
namespace {

absl::StatusOr<PlanResult> PlanWithBudget(const testing::World& w, double budget_s) {
  PlanOptions o;
  o.global_batch = 128;
  o.strategy = "all";
  o.search.time_budget_s = budget_s;
  return Plan(w.graph, w.topo, o);
}

TEST(PlanBudgetSteps, TheSearchPlansOtherFormsAreNotSimulatedPastTheEnd) {
  auto w = testing::OnShippedCluster("resnet50", "heterog_testbed");
  ASSERT_NE(w, nullptr);
  // (A budget that ends before the first full simulations do.)
  absl::StatusOr<PlanResult> hurried = PlanWithBudget(*w, 1e-3);
  ASSERT_THAT(hurried.status(), IsOk());
  const quilt::v1::StrategyEstimate* h = testing::FindEstimate(hurried->report, "heterog");
  ASSERT_NE(h, nullptr);
  EXPECT_TRUE(absl::StrContains(h->search().untried(), "other forms")) << h->search().untried();
  // Never slower than a baseline simulated, all the same.
  ASSERT_TRUE(h->feasible());
  for (const auto& e : hurried->report.estimates()) {
    if (e.name() != "heterog" && e.feasible()) {
      EXPECT_LE(h->step_time_s(), e.step_time_s()) << e.name();
    }
  }
  absl::StatusOr<PlanResult> unhurried = PlanWithBudget(*w, 60);
  ASSERT_THAT(unhurried.status(), IsOk());
  const quilt::v1::StrategyEstimate* u = testing::FindEstimate(unhurried->report, "heterog");
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(u->search().untried(), "");
}

// Four devices of 2 GiB: vgg19 at 160 fits nowhere.
TEST(PlanBudgetSteps, NoBatchToSuggestIsCheckedPastTheEnd) {
  auto w = testing::Make("vgg19", testing::TwoNodesWithMemory({int64_t{2} << 30}));
  PlanOptions o;
  o.global_batch = 160;
  o.search.time_budget_s = 1e-3;
  o.accumulate = false;  // (no micro-batches: the no-fit report is the point)
  absl::StatusOr<PlanResult> hurried = Plan(w->graph, w->topo, o);
  ASSERT_THAT(hurried.status(), IsOk());
  ASSERT_EQ(hurried->report.best(), "");
  EXPECT_EQ(hurried->report.data_parallel_batch_limit(), 0);
  const int64_t unchecked = hurried->report.data_parallel_batch_unchecked();
  EXPECT_GT(unchecked, 0);
  EXPECT_LT(unchecked, o.global_batch);
  // With time for it, the batch is checked, and none is said unchecked.
  o.search.time_budget_s = 10;
  absl::StatusOr<PlanResult> checked = Plan(w->graph, w->topo, o);
  ASSERT_THAT(checked.status(), IsOk());
  EXPECT_GT(checked->report.data_parallel_batch_limit(), 0);
  EXPECT_EQ(checked->report.data_parallel_batch_unchecked(), 0);
}

}  // namespace
}  // namespace quilt
