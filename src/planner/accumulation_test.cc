#include "src/planner/accumulation.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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
  whole.set_micro_batches_in_flight(0);
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

// The transformer's layers over four devices as 4 micro-batches of 4
// rows, where fast/gpu:1 holds one micro-batch's activations but not two
// (its memory halfway between the two peaks). The planner's plans at a
// micro-batch's rows (here: only at 4 rows) are those layers, or, where it
// is asked to keep memory on fast/gpu:1, the same with that device's
// layers on fast/gpu:0. Accumulation then finds 2 in flight overflow
// fast/gpu:1, plans again keeping room for them there, and ends pipelined
// on the plan that leaves fast/gpu:1 out: faster than the layers one
// micro-batch at a time, fitting every device, the note saying so.
TEST(Accumulation, WhereMoreInFlightOverflow_PlannedAgainWithRoomForThem) {
  auto big = testing::Make("transformer");
  const quilt::v1::Strategy layers = testing::Stages(big->graph, big->topo, {0, 1, 2, 3});
  const quilt::v1::Strategy relieved = testing::Stages(big->graph, big->topo, {0, 0, 2, 3});
  auto peak = [&](const testing::World& w, quilt::v1::Strategy s, int in_flight,
                  const std::string& device) -> std::pair<int64_t, double> {
    s.set_micro_batches(4);
    s.set_micro_batches_in_flight(in_flight);
    absl::StatusOr<quilt::v1::DistributedProgram> p = Lower(w.graph, s, w.topo, w.cost.get(), 16);
    EXPECT_THAT(p.status(), IsOk());
    if (!p.ok()) return {0, 0};
    absl::StatusOr<SimResult> r = Simulate(*p, w.graph, w.topo, *w.cost);
    EXPECT_THAT(r.status(), IsOk());
    if (!r.ok()) return {0, 0};
    for (const auto& u : r->devices) {
      if (u.device == device) return {u.peak_memory_bytes, r->step_time_s};
    }
    return {0, r->step_time_s};
  };
  const int64_t one = peak(*big, layers, 1, "fast/gpu:1").first;
  const int64_t two = peak(*big, layers, 2, "fast/gpu:1").first;
  ASSERT_GT(two, one);
  auto w = testing::Make("transformer",
                         testing::TwoNodesWithMemory({int64_t{16} << 30, (one + two) / 2,
                                                      int64_t{16} << 30, int64_t{16} << 30}));
  auto graph_index = GraphIndex::Build(w->graph);
  ASSERT_THAT(graph_index.status(), IsOk());
  std::vector<std::map<std::string, double>> asked;
  PlanAt plan_at =
      [&](int64_t rows, const std::string& strategy,
          const std::map<std::string, double>& scale) -> std::optional<quilt::v1::Strategy> {
    if (rows != 4 || strategy != "heterog") return std::nullopt;
    asked.push_back(scale);
    auto it = scale.find("fast/gpu:1");
    return it != scale.end() && it->second < 1 ? relieved : layers;
  };
  quilt::v1::PlanReport report;
  report.set_hybrid_batch_limit(4);
  std::vector<std::string> lines;
  std::string why;
  std::optional<AccumulatedPlan> a = PlanAccumulation(
      w->graph, *graph_index, w->topo, *w->cost, 16, /*closest=*/nullptr, report, "heterog",
      plan_at, [&](const std::string& l) { lines.push_back(l); }, &why);
  ASSERT_TRUE(a.has_value()) << why;
  const quilt::v1::Strategy& s = a->strategy.strategy;
  EXPECT_EQ(s.micro_batches(), 4);
  EXPECT_GE(s.micro_batches_in_flight(), 2);
  EXPECT_EQ(s.groups(1).replicas(0).device(), "fast/gpu:0");  // the relieved plan
  ASSERT_GE(asked.size(), 2u);
  EXPECT_TRUE(asked.front().empty());
  EXPECT_LT(asked.back().at("fast/gpu:1"), 1.0);
  EXPECT_THAT(a->note, HasSubstr("in flight on each device (pipelined)"));
  EXPECT_THAT(absl::StrJoin(lines, "\n"), HasSubstr("memory kept for 2 of them in flight"));
  // It fits every device, and beats the layers one micro-batch at a time.
  absl::StatusOr<quilt::v1::DistributedProgram> p = Lower(w->graph, s, w->topo, w->cost.get(), 16);
  ASSERT_THAT(p.status(), IsOk());
  EXPECT_THAT(ValidateProgram(*p, w->graph, w->topo), IsOk());
  absl::StatusOr<SimResult> r = Simulate(*p, w->graph, w->topo, *w->cost);
  ASSERT_THAT(r.status(), IsOk());
  for (const auto& u : r->devices) EXPECT_FALSE(u.out_of_memory) << u.device;
  EXPECT_LT(r->step_time_s, peak(*w, layers, 1, "fast/gpu:1").second);
}

// Until a try fits, the tries go on whatever the budget says; once one
// fits, a budget that affords nothing more ends them. The transformer's
// layers over four devices as micro-batches of 4 rows, the plans at 8 rows
// not fitting: with a budget already spent, the 8-row plan and then the
// 4-row one are still planned, and that one, which fits, is the plan, one
// micro-batch at a time (more in flight, the next step, is not begun), the
// result saying it was cut short. With the budget affording everything,
// more in flight are tried and the plan is pipelined.
TEST(Accumulation, OnceATryFits_ABudgetSpentEndsTheTries) {
  auto w = testing::Make("transformer");
  auto graph_index = GraphIndex::Build(w->graph);
  ASSERT_THAT(graph_index.status(), IsOk());
  const quilt::v1::Strategy layers = testing::Stages(w->graph, w->topo, {0, 1, 2, 3});
  std::vector<int64_t> asked;
  PlanAt plan_at = [&](int64_t rows, const std::string& strategy,
                       const std::map<std::string, double>&) -> std::optional<quilt::v1::Strategy> {
    asked.push_back(rows);
    if (rows != 4 || strategy != "heterog") return std::nullopt;
    return layers;
  };
  quilt::v1::PlanReport report;
  report.set_hybrid_batch_limit(8);
  int refused = 0;
  std::string why;
  std::optional<AccumulatedPlan> spent =
      PlanAccumulation(w->graph, *graph_index, w->topo, *w->cost, 16, /*closest=*/nullptr, report,
                       "heterog", plan_at, {}, &why, [&](double, absl::Time) {
                         ++refused;
                         return false;
                       });
  ASSERT_TRUE(spent.has_value()) << why;
  EXPECT_EQ(asked, (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(spent->strategy.strategy.micro_batches(), 4);
  EXPECT_LE(spent->strategy.strategy.micro_batches_in_flight(), 1);
  EXPECT_TRUE(spent->cut_short);
  EXPECT_GT(refused, 0);
  // Its simulation in full comes with it: the program validates and
  // simulates again to the step it gives.
  ASSERT_NE(spent->full, nullptr);
  ASSERT_FALSE(spent->full->program.empty());
  EXPECT_THAT(ValidateProgram(*spent->full->program, w->graph, w->topo), IsOk());
  absl::StatusOr<SimResult> again = Simulate(*spent->full->program, w->graph, w->topo, *w->cost);
  ASSERT_THAT(again.status(), IsOk());
  EXPECT_NEAR(again->step_time_s, spent->full->estimate.step_time_s(), 1e-9 * again->step_time_s);
  EXPECT_EQ(spent->full->estimate.strategy().micro_batches(), 4);
  EXPECT_THAT(spent->note, HasSubstr("one after the other"));

  asked.clear();
  std::optional<AccumulatedPlan> unhurried =
      PlanAccumulation(w->graph, *graph_index, w->topo, *w->cost, 16, /*closest=*/nullptr, report,
                       "heterog", plan_at, {}, &why, [](double, absl::Time) { return true; });
  ASSERT_TRUE(unhurried.has_value()) << why;
  EXPECT_GT(asked.size(), 2u);
  EXPECT_FALSE(unhurried->cut_short);
  EXPECT_GE(unhurried->strategy.strategy.micro_batches_in_flight(), 2);
}

// The data-parallel kind's plan at a micro-batch's rows is often the one
// the search found there: a try that repeats an earlier one (its strategy,
// micro-batches and in-flight count) takes that one's outcome, and its
// line says so, rather than being simulated again; a plan at other
// micro-batches is no repeat.
TEST(Accumulation, ATryThatRepeatsAnEarlierOneIsNotSimulatedAgain) {
  auto w = testing::Make("transformer");
  auto graph_index = GraphIndex::Build(w->graph);
  ASSERT_THAT(graph_index.status(), IsOk());
  const quilt::v1::Strategy layers = testing::Stages(w->graph, w->topo, {0, 1, 2, 3});
  std::vector<std::string> asked;
  PlanAt plan_at = [&](int64_t rows, const std::string& strategy,
                       const std::map<std::string, double>&) -> std::optional<quilt::v1::Strategy> {
    asked.push_back(absl::StrCat(strategy, "@", rows));
    quilt::v1::Strategy s = layers;
    s.set_name(strategy);  // (a name is no difference)
    return s;
  };
  quilt::v1::PlanReport report;
  report.set_hybrid_batch_limit(8);
  report.set_data_parallel_batch_limit(8);
  std::vector<std::string> lines;
  std::string why;
  std::optional<AccumulatedPlan> p = PlanAccumulation(
      w->graph, *graph_index, w->topo, *w->cost, 16, /*closest=*/nullptr, report, "heterog",
      plan_at, [&](const std::string& line) { lines.push_back(line); }, &why,
      [](double, absl::Time) { return true; });
  ASSERT_TRUE(p.has_value()) << why;
  ASSERT_THAT(asked, ::testing::Contains(::testing::StartsWith("dp-")));
  const std::string kRepeat = " (the same plan as tried before: not simulated again)";
  std::vector<std::string> outcomes;  // (those simulated)
  int repeats = 0;
  bool dp_began = false;
  for (const std::string& line : lines) {
    if (absl::StartsWith(line, "planning dp-")) dp_began = true;
    if (!absl::StrContains(line, " s per step") && !absl::StrContains(line, "out of memory")) {
      continue;
    }
    if (!absl::EndsWith(line, kRepeat)) {
      outcomes.push_back(line);
      continue;
    }
    // Only the data-parallel kind's plans repeat here, each with the
    // outcome the same plan had when it was simulated.
    ++repeats;
    EXPECT_TRUE(dp_began) << line;
    EXPECT_THAT(outcomes, ::testing::Contains(line.substr(0, line.size() - kRepeat.size())))
        << absl::StrJoin(lines, "\n");
  }
  // 2 and 4 micro-batches at least, each simulated once.
  EXPECT_GE(outcomes.size(), 2u) << absl::StrJoin(lines, "\n");
  EXPECT_GE(repeats, 2) << absl::StrJoin(lines, "\n");
  // The plan comes with its program (not a repeat), and it validates.
  ASSERT_NE(p->full, nullptr);
  EXPECT_THAT(ValidateProgram(*p->full->program, w->graph, w->topo), IsOk());
}

}  // namespace
}  // namespace quilt
