// The batch a no-fit report suggests: CheckedBatch finds the largest batch
// that fits from an estimate too high or too low, within its checks and
// never at a batch that failed or below 1; and a plan report's suggestion
// fits when planned, where the memory model's own batch does not (vgg19 on
// one 2 GiB device); where no data-parallel plan fits at any batch, the
// search's closest plan is checked at fewer rows instead.
#include "src/planner/batch_hint.h"

#include <set>

#include "gtest/gtest.h"
#include "src/cluster/cluster_spec.h"
#include "src/common/status_matchers.h"
#include "src/planner/plan.h"
#include "src/planner/plan_heterog.h"
#include "src/planner/planner_test_util.h"

namespace quilt {
namespace {

TEST(CheckedBatch, FindsTheLargestThatFitsFromAnEstimateEitherSide) {
  for (int64_t failed : {2, 9, 100, 4097}) {
    for (int64_t truth = 0; truth < failed; truth += std::max<int64_t>(1, failed / 7)) {
      for (int64_t estimate : {int64_t{0}, truth - 1, truth, truth + 1, truth + failed / 10,
                               failed - 1, failed, 3 * failed}) {
        std::set<int64_t> asked;
        int calls = 0;
        auto fits = [&](int64_t b) {
          ++calls;
          asked.insert(b);
          EXPECT_GE(b, 1);
          EXPECT_LT(b, failed);
          return b <= truth;
        };
        const int64_t got = CheckedBatch(estimate, failed, 64, fits);
        EXPECT_EQ(got, truth) << "failed " << failed << " estimate " << estimate;
        EXPECT_LE(calls, 64);
        // Never the same batch twice.
        EXPECT_EQ(static_cast<size_t>(calls), asked.size());
      }
    }
  }
}

TEST(CheckedBatch, WithFewChecksReturnsOnlyABatchThatFitted) {
  for (int checks = 1; checks <= kBatchHintChecks; ++checks) {
    for (int64_t estimate : {10, 500, 999}) {
      int calls = 0;
      auto fits = [&](int64_t b) {
        ++calls;
        return b <= 300;
      };
      const int64_t got = CheckedBatch(estimate, 1000, checks, fits);
      EXPECT_LE(calls, checks);
      EXPECT_LE(got, 300);
      // An estimate that fits is never given up for less.
      if (estimate <= 300) EXPECT_GE(got, estimate);
    }
  }
  EXPECT_EQ(CheckedBatch(5, 1, kBatchHintChecks, [](int64_t) { return true; }), 0);
}

// Refinement stops when told: the first batch that fits is kept; a batch
// that fits is still searched for down to 1.
TEST(CheckedBatch, StopsRefiningWhenToldButStillFindsOneThatFits) {
  int calls = 0;
  auto fits = [&](int64_t b) {
    ++calls;
    return b <= 40;
  };
  EXPECT_EQ(CheckedBatch(30, 100, kBatchHintChecks, fits, [](bool found) { return !found; }), 30);
  EXPECT_EQ(calls, 1);
  calls = 0;
  const int64_t got =
      CheckedBatch(60, 100, kBatchHintChecks, fits, [](bool found) { return !found; });
  EXPECT_GT(got, 0);
  EXPECT_LE(got, 40);
}

// Checks stop when told, found or not: none begun, nothing suggested; the
// budget's end after a batch failed, nothing either.
TEST(CheckedBatch, StopsCheckingWhenTold) {
  int calls = 0;
  auto fits = [&](int64_t b) {
    ++calls;
    return b <= 40;
  };
  EXPECT_EQ(CheckedBatch(30, 100, kBatchHintChecks, fits, [](bool) { return false; }), 0);
  EXPECT_EQ(calls, 0);
  int allowed = 1;
  EXPECT_EQ(CheckedBatch(60, 100, kBatchHintChecks, fits, [&](bool) { return allowed-- > 0; }), 0);
  EXPECT_EQ(calls, 1);
}

// One device of 2 GiB: the memory model, fitted at 12 rows, takes vgg19's
// peak as affine in the rows and puts the limit past what fits. The
// report's batch fits on the device, one more does not.
TEST(BatchHint, TheSuggestedBatchFitsWhenPlanned) {
  quilt::v1::ClusterSpec spec = testing::TwoNodesWithMemory({int64_t{2} << 30});
  spec.mutable_nodes()->RemoveLast();
  spec.mutable_nodes(0)->mutable_devices()->RemoveLast();
  auto w = testing::Make("vgg19", spec);
  ASSERT_EQ(w->topo.num_devices(), 1);
  PlanOptions o;
  o.accumulate = false;  // (accumulation_test.cc: what fits then)
  o.global_batch = 12;
  absl::StatusOr<PlanResult> none = Plan(w->graph, w->topo, o);
  ASSERT_THAT(none.status(), IsOk());
  ASSERT_EQ(none->report.best(), "");
  const int64_t hint = none->report.data_parallel_batch_limit();
  ASSERT_GT(hint, 0);
  ASSERT_LT(hint, o.global_batch);
  o.strategy = "single-device";
  for (int64_t batch : {hint, hint + 1}) {
    o.global_batch = batch;
    absl::StatusOr<PlanResult> at = Plan(w->graph, w->topo, o);
    ASSERT_THAT(at.status(), IsOk());
    EXPECT_EQ(at->report.best(), batch == hint ? "single-device" : "") << "batch " << batch;
  }
  // Without the check, no suggestion.
  o.strategy = "all";
  o.global_batch = 12;
  o.check_batch_hint = false;
  absl::StatusOr<PlanResult> unchecked = Plan(w->graph, w->topo, o);
  ASSERT_THAT(unchecked.status(), IsOk());
  EXPECT_EQ(unchecked->report.data_parallel_batch_limit(), 0);
}

// Four devices of 2 GiB: the suggestion fits with the speed-proportional
// split.
TEST(BatchHint, TheSuggestedBatchFitsDataParallel) {
  auto w = testing::Make("vgg19", testing::TwoNodesWithMemory({int64_t{2} << 30}));
  PlanOptions o;
  o.accumulate = false;  // (accumulation_test.cc: what fits then)
  o.global_batch = 160;
  o.search.time_budget_s = 1;
  absl::StatusOr<PlanResult> none = Plan(w->graph, w->topo, o);
  ASSERT_THAT(none.status(), IsOk());
  ASSERT_EQ(none->report.best(), "");
  const int64_t hint = none->report.data_parallel_batch_limit();
  ASSERT_GT(hint, 0);
  o.global_batch = hint;
  o.strategy = "dp-proportional-ring";
  absl::StatusOr<PlanResult> at = Plan(w->graph, w->topo, o);
  ASSERT_THAT(at.status(), IsOk());
  EXPECT_EQ(at->report.best(), "dp-proportional-ring") << "batch " << hint;
}

// gpt2 on eight devices of 2 GiB: its parameters and optimizer state alone
// are over 2 GiB, so no data-parallel split fits at any batch; at batch 10
// the search finds nothing that fits either. The report suggests a batch
// at which the search's closest plan, as it is, fits, and says its step
// there; one row more, that plan does not fit.
TEST(BatchHint, WhereNoDataParallelPlanFits_TheClosestHybridPlanIsCheckedAtFewerRows) {
  absl::StatusOr<quilt::v1::ClusterSpec> spec =
      LoadClusterSpec("bench/clusters/eight_2gib.textproto");
  ASSERT_THAT(spec.status(), IsOk());
  auto w = testing::Make("gpt2", *spec);
  PlanOptions o;
  o.accumulate = false;  // (accumulation_test.cc: what fits then)
  o.global_batch = 10;
  o.search.time_budget_s = 3;
  absl::StatusOr<PlanResult> none = Plan(w->graph, w->topo, o);
  ASSERT_THAT(none.status(), IsOk());
  ASSERT_EQ(none->report.best(), "");
  EXPECT_EQ(none->report.data_parallel_batch_limit(), 0);
  const quilt::v1::StrategyEstimate* h = testing::FindEstimate(none->report, kHeteroG);
  ASSERT_NE(h, nullptr);
  ASSERT_FALSE(h->feasible());
  const int64_t hint = none->report.hybrid_batch_limit();
  ASSERT_GT(hint, 0);
  ASSERT_LT(hint, o.global_batch);
  PlanOptions given;
  given.strategy = "given";
  given.given = {NamedStrategy{"closest", h->strategy(), ""}};
  given.check_batch_hint = false;
  for (int64_t batch : {hint, hint + 1}) {
    given.global_batch = batch;
    absl::StatusOr<PlanResult> at = Plan(w->graph, w->topo, given);
    ASSERT_THAT(at.status(), IsOk());
    const quilt::v1::StrategyEstimate* e = testing::FindEstimate(at->report, "closest");
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->feasible(), batch == hint) << "batch " << batch << ": " << e->infeasible_reason();
    if (batch == hint) {
      EXPECT_NEAR(none->report.hybrid_batch_step_s(), e->step_time_s(), 1e-9 * e->step_time_s());
    }
  }
  // Without the checks, no suggestion.
  o.check_batch_hint = false;
  absl::StatusOr<PlanResult> unchecked = Plan(w->graph, w->topo, o);
  ASSERT_THAT(unchecked.status(), IsOk());
  EXPECT_EQ(unchecked->report.hybrid_batch_limit(), 0);
}

}  // namespace
}  // namespace quilt
