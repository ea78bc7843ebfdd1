// Pipelining a plan that holds the batch at once: which plans are tried
// and in which forms, and on HAP's cluster, where gpt2_xl fits no
// data-parallel plan and the search's plan puts its layers on different
// nodes, the plan the planner reports runs its batch pipelined, faster
// than the same placements one batch at a time.
#include "src/planner/pipelined_plan.h"

#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/planner/micro_batches.h"
#include "src/planner/plan.h"
#include "src/planner/plan_heterog.h"
#include "src/planner/planner_test_util.h"
#include "src/planner/program_validator.h"

namespace quilt {
namespace {

using ::testing::HasSubstr;

quilt::v1::StrategyEstimate Fitted(double step_s, double compute_s) {
  quilt::v1::StrategyEstimate e;
  e.set_feasible(true);
  e.set_step_time_s(step_s);
  e.set_compute_s(compute_s);
  return e;
}

TEST(PipelinedPlan, TriedOnlyWherePlansFitAtOnceAndWait) {
  EXPECT_TRUE(WorthPipelining(Fitted(1.0, 0.8)));
  EXPECT_TRUE(WorthPipelining(Fitted(1.0, 1 - kPipelineGainShare)));
  EXPECT_FALSE(WorthPipelining(Fitted(1.0, 0.99)));  // nothing to gain
  quilt::v1::StrategyEstimate over = Fitted(1.0, 0.5);
  over.set_feasible(false);
  EXPECT_FALSE(WorthPipelining(over));
  quilt::v1::StrategyEstimate accumulated = Fitted(1.0, 0.5);
  accumulated.mutable_strategy()->set_micro_batches(4);  // already micro-batches
  EXPECT_FALSE(WorthPipelining(accumulated));
}

TEST(PipelinedPlan, FormsKeepThePlacementsAndNeverExceedTheRows) {
  quilt::v1::Strategy plan;
  plan.set_name("heterog");
  plan.add_groups()->set_group(7);
  std::set<std::string> names;
  for (const bool small : {true, false}) {
    const std::vector<NamedStrategy> two = PipelinedForms(plan, "heterog", 16, 2, small);
    const std::vector<NamedStrategy> four = PipelinedForms(plan, "heterog", 16, 4, small);
    ASSERT_EQ(two.size(), 1u);
    ASSERT_EQ(four.size(), small ? 2u : 1u);  // 4 in flight on small clusters only
    std::vector<NamedStrategy> all = two;
    all.insert(all.end(), four.begin(), four.end());
    for (const NamedStrategy& f : all) {
      if (small) names.insert(f.name);
      EXPECT_GE(f.strategy.micro_batches_in_flight(), 2);
      EXPECT_LE(f.strategy.micro_batches_in_flight(), f.strategy.micro_batches());
      ASSERT_EQ(f.strategy.groups_size(), 1);
      EXPECT_EQ(f.strategy.groups(0).group(), 7);
    }
    EXPECT_EQ(two[0].strategy.micro_batches(), 2);
    for (const NamedStrategy& f : four) EXPECT_EQ(f.strategy.micro_batches(), 4);
  }
  EXPECT_EQ(names.size(), 3u);  // each form named apart
  // Two rows: two micro-batches of one row, no more.
  EXPECT_EQ(PipelinedForms(plan, "heterog", 2, 2, true).size(), 1u);
  EXPECT_TRUE(PipelinedForms(plan, "heterog", 2, 4, true).empty());
  EXPECT_TRUE(PipelinedForms(plan, "heterog", 1, 2, true).empty());
  const NamedStrategy one_row = PipelinedForms(plan, "heterog", 2, 2, true)[0];
  EXPECT_EQ(DescribePipelining(one_row.strategy, 2),
            DescribeMicroBatches(2, 2) + ", " + DescribeInFlight(2));
}

TEST(PipelinedPlan, GraphsThatReadASumOverTheBatchAreNotTried) {
  auto cnn = testing::OnShippedCluster("resnet50", "heterog_testbed");
  absl::StatusOr<GraphIndex> cnn_ix = GraphIndex::Build(cnn->graph);
  ASSERT_THAT(cnn_ix.status(), IsOk());
  EXPECT_THAT(MicroBatchesRefused(*cnn_ix, cnn->topo), HasSubstr("gradient accumulation"));
  auto lm = testing::OnShippedCluster("gpt2", "heterog_testbed");
  absl::StatusOr<GraphIndex> lm_ix = GraphIndex::Build(lm->graph);
  ASSERT_THAT(lm_ix.status(), IsOk());
  EXPECT_EQ(MicroBatchesRefused(*lm_ix, lm->topo), "");
}

// gpt2_xl at batch 16 on HAP's cluster: the search's plan holds the batch
// at once with its layers on different nodes, and its busiest device idles
// while the others work. The plan reported runs the batch as micro-batches
// with several in flight, says so, fits, validates, is the step its program
// simulates to, and beats the same placements one batch at a time; asked
// never to run micro-batches, the planner runs the batch at once.
TEST(PipelinedPlan, HapClusterGpt2XlRunsItsStagesPipelined) {
  auto w = testing::OnShippedCluster("gpt2_xl", "hap_cluster");
  PlanOptions o;
  o.global_batch = 16;
  o.strategy = kHeteroG;
  absl::StatusOr<PlanResult> r = Plan(w->graph, w->topo, o);
  ASSERT_THAT(r.status(), IsOk());
  ASSERT_EQ(r->report.best(), kHeteroG);
  const quilt::v1::StrategyEstimate* h = testing::FindEstimate(r->report, kHeteroG);
  ASSERT_NE(h, nullptr);
  ASSERT_TRUE(h->feasible()) << h->infeasible_reason();
  const quilt::v1::Strategy& s = h->strategy();
  ASSERT_GE(s.micro_batches(), 2);
  EXPECT_GE(s.micro_batches_in_flight(), 2);
  EXPECT_EQ(h->search().pipelined(), DescribePipelining(s, 16));
  EXPECT_GT(h->search().pipelined_saved_s(), 0);
  for (const auto& m : h->memory()) EXPECT_LE(m.peak_bytes(), m.capacity_bytes()) << m.device();
  EXPECT_THAT(ValidateProgram(r->best_program, w->graph, w->topo), IsOk());
  absl::StatusOr<SimResult> again = Simulate(r->best_program, w->graph, w->topo, *w->cost);
  ASSERT_THAT(again.status(), IsOk());
  EXPECT_NEAR(again->step_time_s, h->step_time_s(), 1e-9 * h->step_time_s());
  // The same placements one batch at a time: slower by what it says.
  quilt::v1::Strategy whole = s;
  whole.set_micro_batches(0);
  whole.set_micro_batches_in_flight(0);
  PlanOptions given = o;
  given.strategy = "given";
  given.given = {NamedStrategy{"file:whole", whole, ""}};
  absl::StatusOr<PlanResult> at_once = Plan(w->graph, w->topo, given);
  ASSERT_THAT(at_once.status(), IsOk());
  const quilt::v1::StrategyEstimate* a = testing::FindEstimate(at_once->report, "file:whole");
  ASSERT_NE(a, nullptr);
  EXPECT_NEAR(a->step_time_s() - h->step_time_s(), h->search().pipelined_saved_s(),
              1e-6 * a->step_time_s());
  EXPECT_LE(a->compute_s(), (1 - kPipelineGainShare) * a->step_time_s());
  // Never as micro-batches (--no-micro-batches): the plan runs the batch at
  // once.
  PlanOptions never = o;
  never.accumulate = false;
  absl::StatusOr<PlanResult> off = Plan(w->graph, w->topo, never);
  ASSERT_THAT(off.status(), IsOk());
  const quilt::v1::StrategyEstimate* n = testing::FindEstimate(off->report, kHeteroG);
  ASSERT_NE(n, nullptr);
  EXPECT_LE(n->strategy().micro_batches(), 1);
  EXPECT_EQ(n->search().pipelined(), "");
  EXPECT_EQ(off->best_program.micro_batches(), 0);
}

}  // namespace
}  // namespace quilt
