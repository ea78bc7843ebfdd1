#include "src/planner/accumulation.h"

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/cluster/cluster_spec.h"
#include "src/common/status_matchers.h"
#include "src/planner/micro_batches.h"
#include "src/planner/plan.h"
#include "src/planner/plan_heterog.h"
#include "src/planner/planner_test_util.h"
#include "src/planner/program_validator.h"

namespace quilt {
namespace {

using ::testing::HasSubstr;

// gpt2 on eight devices of 2 GiB at batch 10: no plan holds the batch at
// once (batch_hint_test.cc). The planner's plan then runs it as
// micro-batches: it fits every device, its program validates, it is the
// step the report gives, and the note says how many micro-batches of how
// many rows (equal, or one row apart). Without accumulation, nothing fits.
TEST(Accumulation, WhereNoPlanHoldsTheBatch_MicroBatchesFit) {
  absl::StatusOr<quilt::v1::ClusterSpec> spec =
      LoadClusterSpec("bench/clusters/eight_2gib.textproto");
  ASSERT_THAT(spec.status(), IsOk());
  auto w = testing::Make("gpt2", *spec);
  PlanOptions o;
  o.global_batch = 10;
  o.search.time_budget_s = 3;
  o.accumulate = false;
  absl::StatusOr<PlanResult> none = Plan(w->graph, w->topo, o);
  ASSERT_THAT(none.status(), IsOk());
  ASSERT_EQ(none->report.best(), "");

  o.accumulate = true;
  absl::StatusOr<PlanResult> r = Plan(w->graph, w->topo, o);
  ASSERT_THAT(r.status(), IsOk());
  ASSERT_EQ(r->report.best(), kHeteroG);
  const quilt::v1::StrategyEstimate* h = testing::FindEstimate(r->report, kHeteroG);
  ASSERT_NE(h, nullptr);
  const int k = h->strategy().micro_batches();
  ASSERT_GT(k, 1);
  EXPECT_LE(k, 10);
  EXPECT_THAT(h->note(), HasSubstr(DescribeMicroBatches(10, k)));
  for (const auto& m : h->memory()) {
    EXPECT_LE(m.peak_bytes(), m.capacity_bytes()) << m.device();
  }
  EXPECT_EQ(r->best_program.micro_batches(), k);
  EXPECT_EQ(r->best_program.global_batch(), 10);
  EXPECT_THAT(ValidateProgram(r->best_program, w->graph, w->topo), IsOk());
  // The reported step is the program's, simulated again.
  absl::StatusOr<SimResult> again = Simulate(r->best_program, w->graph, w->topo, *w->cost);
  ASSERT_THAT(again.status(), IsOk());
  EXPECT_NEAR(again->step_time_s, h->step_time_s(), 1e-9 * h->step_time_s());
  // The same plan without micro-batches does not fit.
  quilt::v1::Strategy whole = h->strategy();
  whole.set_micro_batches(0);
  PlanOptions given;
  given.strategy = "given";
  given.given = {NamedStrategy{"whole", whole, ""}};
  given.global_batch = 10;
  given.check_batch_hint = false;
  given.accumulate = false;
  absl::StatusOr<PlanResult> at = Plan(w->graph, w->topo, given);
  ASSERT_THAT(at.status(), IsOk());
  const quilt::v1::StrategyEstimate* e = testing::FindEstimate(at->report, "whole");
  ASSERT_NE(e, nullptr);
  EXPECT_FALSE(e->feasible());
}

// resnet50's batch norm reads sums over the whole batch: where nothing
// fits, the report says accumulation cannot run it, and why.
TEST(Accumulation, AGraphWhosePassReadsASumOverTheBatchIsRefusedWithTheReason) {
  auto w = testing::Make("resnet50", testing::TwoNodesWithMemory({int64_t{1} << 30}));
  PlanOptions o;
  o.global_batch = 512;
  o.search.time_budget_s = 1;
  absl::StatusOr<PlanResult> r = Plan(w->graph, w->topo, o);
  ASSERT_THAT(r.status(), IsOk());
  EXPECT_EQ(r->report.best(), "");
  bool named = false;
  for (const Op& op : w->graph.ops) {
    named |= absl::StartsWith(op.type, "BatchNorm") &&
             absl::StrContains(r->report.accumulation_refused(), "op '" + op.name + "'");
  }
  EXPECT_TRUE(named) << r->report.accumulation_refused();
}

}  // namespace
}  // namespace quilt
