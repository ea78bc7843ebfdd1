// Plan's progress lines: one before each strategy is simulated and, while
// simulations run, "still simulating" lines naming only strategies being
// simulated; none with the interval at 0. A fit check leaves the search
// out when a baseline fits, and searches when none does.
#include <set>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "src/planner/memory_floor.h"
#include "src/planner/plan.h"
#include "src/planner/planner_test_util.h"

namespace quilt {
namespace {

std::vector<std::string> Lines(double every_s) {
  // resnet50 on HAP's 64 GPUs: each baseline's simulation takes a while.
  auto w = testing::OnShippedCluster("resnet50", "hap_cluster");
  EXPECT_NE(w, nullptr);
  if (w == nullptr) return {};
  std::vector<std::string> lines;
  PlanOptions po;
  po.global_batch = 512;
  po.strategy = "dp-even-ps";
  po.simulation_progress_every_s = every_s;
  po.progress = [&](const std::string& line) { lines.push_back(line); };
  absl::StatusOr<PlanResult> plan = Plan(w->graph, w->topo, po);
  EXPECT_THAT(plan.status(), IsOk());
  return lines;
}

TEST(PlanProgress, LongSimulationsSayTheyAreStillGoing) {
  const std::vector<std::string> lines = Lines(0.001);
  std::set<std::string> announced;
  int still = 0;
  for (const std::string& line : lines) {
    if (absl::StartsWith(line, "simulating ")) {
      announced.insert(line.substr(11, line.find(" (") - 11));
    }
    if (!absl::StartsWith(line, "still simulating ")) continue;
    ++still;
    EXPECT_TRUE(absl::EndsWith(line, " s so far)")) << line;
    const std::string names = line.substr(17, line.find(" (") - 17);
    for (absl::string_view name : absl::StrSplit(names, ", ")) {
      // Only strategies announced before.
      EXPECT_TRUE(announced.count(std::string(name))) << line;
    }
  }
  EXPECT_TRUE(announced.count("dp-even-ps"));
  EXPECT_GT(still, 0);
}

TEST(PlanProgress, NoneWhenTheIntervalIsZero) {
  for (const std::string& line : Lines(0)) {
    EXPECT_FALSE(absl::StartsWith(line, "still simulating ")) << line;
  }
}

// Whether `plan` has an estimate named `name`.
bool Has(const PlanResult& plan, const std::string& name) {
  for (const auto& e : plan.report.estimates()) {
    if (e.name() == name) return true;
  }
  return false;
}

TEST(PlanFitCheck, SearchesOnlyWhenNoBaselineFits) {
  for (const auto& [model, batch, baseline_fits] :
       {std::tuple<const char*, int, bool>{"resnet50", 64, true}, {"gpt2_xl", 4, false}}) {
    auto w = testing::OnShippedCluster(model, "heterog_testbed");
    ASSERT_NE(w, nullptr);
    std::vector<std::string> lines;
    PlanOptions po;
    po.global_batch = batch;
    po.fit_check_only = true;
    po.progress = [&](const std::string& line) { lines.push_back(line); };
    absl::StatusOr<PlanResult> plan = Plan(w->graph, w->topo, po);
    ASSERT_THAT(plan.status(), IsOk());
    bool searched = false;
    for (const std::string& line : lines) searched |= absl::StartsWith(line, "searching");
    EXPECT_EQ(searched, !baseline_fits) << model;
    EXPECT_EQ(Has(*plan, "heterog"), !baseline_fits) << model;
    // Either way, the answer: a plan fits (gpt2_xl only the search's).
    EXPECT_FALSE(plan->report.best().empty()) << model;
    if (!baseline_fits) EXPECT_EQ(plan->report.best(), "heterog");
    // Where all-reduce's proportional split fits, it alone is simulated.
    int simulated = 0;
    for (const std::string& line : lines) simulated += absl::StartsWith(line, "simulating ");
    if (baseline_fits) {
      EXPECT_EQ(plan->report.best(), "dp-proportional-ring") << model;
      EXPECT_EQ(plan->report.estimates_size(), 1) << model;
      EXPECT_EQ(simulated, 1) << model;
    } else {
      EXPECT_GT(simulated, 5) << model;  // every baseline, and the search's plan
    }
  }
}

// `model` planned with the search alone at batch 64 on TwoNodes of
// `memory` bytes per device, as `po` says besides; its progress lines in
// `lines`. `at_floor`: at the memory floor's largest batch instead (past
// it by over 2 % and a row, where nothing fits, the planner says so
// without searching).
absl::StatusOr<PlanResult> PlanSearchOnly(const std::string& model, int64_t memory, PlanOptions po,
                                          std::vector<std::string>* lines, bool at_floor = false) {
  auto w = testing::Make(model, testing::TwoNodesWithMemory({memory}));
  po.global_batch = 64;
  if (at_floor) {
    absl::StatusOr<MemoryFloor> floor = ComputeMemoryFloor(w->graph);
    if (!floor.ok()) return floor.status();
    po.global_batch = std::max<int64_t>(1, floor->LargestBatch(TotalMemoryBytes(w->topo)));
  }
  po.strategy = "heterog";
  po.progress = [lines](const std::string& line) { lines->push_back(line); };
  return Plan(w->graph, w->topo, po);
}

// How many of `lines` start with `prefix` and hold `part`.
int Count(const std::vector<std::string>& lines, const std::string& prefix,
          const std::string& part = "") {
  int n = 0;
  for (const std::string& line : lines) {
    n += absl::StartsWith(line, prefix) && absl::StrContains(line, part);
  }
  return n;
}

TEST(PlanProgress, APlanOverMemoryOnTheCoarseModelSaysItIsRepaired) {
  // gpt2 on four devices of 1 GiB at the memory floor's batch: no plan
  // fits anywhere.
  std::vector<std::string> lines;
  PlanOptions po;
  po.search.time_budget_s = 0.5;
  po.accumulate = false;  // (no micro-batches: accumulation_test.cc)
  absl::StatusOr<PlanResult> plan =
      PlanSearchOnly("gpt2", int64_t{1} << 30, po, &lines, /*at_floor=*/true);
  ASSERT_THAT(plan.status(), IsOk());
  EXPECT_TRUE(plan->report.best().empty());
  EXPECT_EQ(Count(lines, "no plan found fits on the search's coarse model",
                  "moving ops off the devices over their memory"),
            1);
  // What the repair did is in the search's summary.
  for (const auto& e : plan->report.estimates()) {
    if (e.name() == "heterog") {
      EXPECT_TRUE(absl::StartsWith(e.search().memory_repair(),
                                   "the search's plan was over memory on its coarse model"))
          << e.search().memory_repair();
    }
  }
}

TEST(PlanProgress, APlanThatFitsOnlyOnTheCoarseModelIsRepairedInFull) {
  // The search told the devices hold twice what they do: its plan fits on
  // the coarse model and not in full, and is repaired before the search
  // runs again.
  std::vector<std::string> lines;
  PlanOptions po;
  po.search.memory_fraction = 2;
  po.search.time_budget_s = 1;
  po.accumulate = false;
  absl::StatusOr<PlanResult> plan = PlanSearchOnly("transformer", int64_t{7} << 28, po, &lines);
  ASSERT_THAT(plan.status(), IsOk());
  EXPECT_EQ(Count(lines, "the plan overflows memory in full; moving ops off the devices"), 1);
  // Nothing found fits 1.75 GiB at that batch (a search run again with
  // less of each device could, in time): the repair says how far over it
  // left the plan.
  for (const auto& e : plan->report.estimates()) {
    if (e.name() != "heterog" || e.feasible()) continue;
    EXPECT_TRUE(absl::StartsWith(e.search().memory_repair(),
                                 "the search's plan fit on its coarse model but not in full; on "
                                 "the full model "))
        << e.search().memory_repair();
    EXPECT_TRUE(absl::StrContains(e.search().memory_repair(), "over, in all"))
        << e.search().memory_repair();
  }
}

TEST(PlanProgress, TheSummarySaysWhetherTheStartFitMemory) {
  // On four devices: gpt2 on 1 GiB each at the memory floor's batch, where
  // no start fits; resnet50 on 16 GiB at batch 64, where the baseline it
  // starts from does.
  struct Case {
    std::string model;
    int64_t gib;
    bool over;
  };
  for (const Case& c : {Case{"gpt2", 1, true}, Case{"resnet50", 16, false}}) {
    SCOPED_TRACE(c.model);
    std::vector<std::string> lines;
    PlanOptions po;
    po.search.time_budget_s = 0.5;
    absl::StatusOr<PlanResult> plan =
        PlanSearchOnly(c.model, c.gib << 30, po, &lines, /*at_floor=*/c.over);
    ASSERT_THAT(plan.status(), IsOk());
    int seen = 0;
    for (const auto& e : plan->report.estimates()) {
      if (e.name() != "heterog") continue;
      ++seen;
      EXPECT_EQ(e.search().start_over_memory(), c.over) << e.search().start();
    }
    EXPECT_EQ(seen, 1);
  }
}

// resnet50 on eight devices of 2 GiB (bench/clusters/eight_2gib), a
// progress line after every batch of plans a search simulates.
absl::StatusOr<PlanResult> PlanOnEight2Gib(int64_t batch, double budget_s,
                                           std::vector<std::string>* lines) {
  absl::StatusOr<quilt::v1::ClusterSpec> spec =
      LoadClusterSpec("bench/clusters/eight_2gib.textproto");
  if (!spec.ok()) return spec.status();
  auto w = testing::Make("resnet50", *spec);
  PlanOptions po;
  po.global_batch = batch;
  po.strategy = "heterog";
  po.search.time_budget_s = budget_s;
  po.search.progress_every_s = 0;
  po.progress = [lines](const std::string& line) { lines->push_back(line); };
  return Plan(w->graph, w->topo, po);
}

TEST(PlanBudget, PlanningWhereABaselineFitsKeepsToTheBudget) {
  // At batch 184 no baseline fits the search's memory share on its coarse
  // model; dp-even-ps fits in full, so the share is raised to it, and, the
  // step being far from the compute lower bound, the layer-wise seeds are
  // searched from too, until the budget ends. The searches keep to the
  // search's share of the budget (3 s of the 4), with room for what runs
  // past it (the last plans, the plan's variants); they used to take the
  // whole budget and a repair a quarter more.
  std::vector<std::string> lines;
  absl::StatusOr<PlanResult> plan = PlanOnEight2Gib(184, 4, &lines);
  ASSERT_THAT(plan.status(), IsOk());
  EXPECT_EQ(plan->report.best(), "heterog");
  const quilt::v1::StrategyEstimate* h = testing::FindEstimate(plan->report, "heterog");
  ASSERT_NE(h, nullptr);
  EXPECT_TRUE(h->feasible());
  EXPECT_EQ(h->search().stopped_by(), "time budget");
  EXPECT_LE(h->search().search_wall_s(), 3 + 0.8);
  EXPECT_TRUE(absl::StrContains(h->search().memory_share(), "dp-even-ps"))
      << h->search().memory_share();
  EXPECT_TRUE(Count(lines, "searching from layer-wise split") > 0);
}

TEST(PlanBudget, AStartThatFitsInFullRaisesTheShareAndTheSearchConverges) {
  // At batch 168 too no baseline fits the share on the coarse model, and
  // data parallelism fits in full within 4 % of the compute lower bound:
  // the share is raised to the baselines that fit, the search converges
  // from there without the layer-wise seeds (no plan could gain enough to
  // pay for them). It used to search until the budget ended (7.6 s of 10).
  std::vector<std::string> lines;
  absl::StatusOr<PlanResult> plan = PlanOnEight2Gib(168, 10, &lines);
  ASSERT_THAT(plan.status(), IsOk());
  const quilt::v1::StrategyEstimate* h = testing::FindEstimate(plan->report, "heterog");
  ASSERT_NE(h, nullptr);
  EXPECT_TRUE(h->feasible());
  EXPECT_NE(h->search().stopped_by(), "time budget");
  const std::string& share = h->search().memory_share();
  EXPECT_TRUE(absl::StartsWith(share, "dp-even-") &&
              absl::StrContains(share, "over the search's 92 % share"))
      << share;
  EXPECT_FALSE(absl::StartsWith(h->search().start(), "layer-wise")) << h->search().start();
  EXPECT_EQ(Count(lines, "searching from layer-wise split"), 0);
  EXPECT_EQ(Count(lines, "no baseline fits the search's share of memory", "in full"), 1);
  EXPECT_EQ(Count(lines, "no plan found fits on the search's coarse model"), 0);
  // Never slower than a baseline, and within memory in full.
  for (const auto& e : plan->report.estimates()) {
    if (e.name() != "heterog" && e.feasible()) EXPECT_LE(h->step_time_s(), e.step_time_s());
  }
  for (const auto& d : h->memory()) EXPECT_LE(d.peak_bytes(), d.capacity_bytes()) << d.device();
}

TEST(PlanBudget, TheRepairSaysItPassesTheBudgetOnlyWhereItDoes) {
  // vgg19 on bench/clusters/small_mixed3 at batch 459: no baseline fits;
  // the search's plan fits its coarse model, not the full one, and is
  // repaired early, for at most a quarter of the budget: well within it.
  // The line used to say the repair went past the budget, from comparing
  // the time left with itself read a moment later.
  absl::StatusOr<quilt::v1::ClusterSpec> spec =
      LoadClusterSpec("bench/clusters/small_mixed3.textproto");
  ASSERT_THAT(spec.status(), IsOk());
  auto w = testing::Make("vgg19", *spec);
  std::vector<std::string> lines;
  PlanOptions po;
  po.global_batch = 459;
  po.strategy = "heterog";
  po.search.time_budget_s = 4;
  po.progress = [&lines](const std::string& line) { lines.push_back(line); };
  absl::StatusOr<PlanResult> plan = Plan(w->graph, w->topo, po);
  ASSERT_THAT(plan.status(), IsOk());
  const std::string repair = "the plan overflows memory in full; moving ops off the devices";
  int seen = 0;
  for (const std::string& line : lines) {
    if (!absl::StartsWith(line, repair)) continue;
    ++seen;
    // "(T s so far": begun at T, it ends by T + 1 s, the budget's quarter.
    const size_t open = line.find(" (");
    ASSERT_NE(open, std::string::npos) << line;
    const double at = std::stod(line.substr(open + 2));
    if (at + 1 < 4 - 0.1) {
      EXPECT_FALSE(absl::StrContains(line, "past the planning budget")) << line;
    }
  }
  EXPECT_GE(seen, 1);
}

}  // namespace
}  // namespace quilt
