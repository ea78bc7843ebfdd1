// The HeteroG search: it finds the optimum of its action space where that
// can be enumerated, it is deterministic for a seed, it finds plans for
// models no data-parallel split fits, and through Plan it is never slower
// than the best baseline and reports the time its program simulates to.
#include "src/planner/heterog.h"

#include <random>
#include <set>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/cluster/cluster_spec.h"
#include "src/cluster/random_cluster.h"
#include "src/common/status_matchers.h"
#include "src/graph/autodiff.h"
#include "src/graph/zoo/layers.h"
#include "src/graph/zoo/zoo.h"
#include "src/planner/coarse_graph.h"
#include "src/planner/lower.h"
#include "src/planner/plan.h"
#include "src/planner/planner_test_util.h"
#include "src/planner/priorities.h"
#include "src/planner/program_validator.h"
#include "src/planner/search_space.h"
#include "src/sim/simulator.h"

namespace quilt {
namespace {

// Adds the backward pass and the updates: softmax cross-entropy, SGD with
// momentum 0.9 or Adam.
absl::Status Train(Graph* g, OptimizerSpec::Kind kind = OptimizerSpec::Kind::kSgd) {
  TrainingOptions to;
  to.loss = LossType::kSoftmaxCrossEntropy;
  to.optimizer.kind = kind;
  if (kind == OptimizerSpec::Kind::kSgd) to.optimizer.momentum = 0.9;
  return BuildTrainingGraph(g, to);
}

// x[1024] → fc1 (1024×4096) → relu → fc2 (4096×4096, 64 MiB) → relu → fc3.
Graph WideMlp() {
  Graph g;
  zoo::Layers l(&g, 1);
  absl::StatusOr<std::string> x = l.Input("x", DType::kF32, {1024});
  EXPECT_THAT(x.status(), IsOk());
  std::string y = *x;
  for (auto [name, in, out] : {std::tuple{"fc1", 1024, 4096}, std::tuple{"fc2", 4096, 4096},
                               std::tuple{"fc3", 4096, 10}}) {
    absl::StatusOr<std::string> z = l.Linear(name, y, in, out);
    EXPECT_THAT(z.status(), IsOk());
    y = *z;
    if (out != 10) {
      z = l.Relu(y);
      EXPECT_THAT(z.status(), IsOk());
      y = *z;
    }
  }
  g.outputs = {y};
  EXPECT_THAT(Train(&g), IsOk());
  return g;
}

// Eight equal layers of 2048 × 2048 (16 MiB each).
Graph DeepMlp() {
  Graph g;
  zoo::Layers l(&g, 1);
  absl::StatusOr<std::string> x = l.Input("x", DType::kF32, {2048});
  EXPECT_THAT(x.status(), IsOk());
  std::string y = *x;
  for (int i = 0; i < 8; ++i) {
    absl::StatusOr<std::string> z = l.Linear("fc" + std::to_string(i), y, 2048, i == 7 ? 10 : 2048);
    EXPECT_THAT(z.status(), IsOk());
    y = *z;
    if (i < 7) {
      z = l.Relu(y);
      EXPECT_THAT(z.status(), IsOk());
      y = *z;
    }
  }
  g.outputs = {y};
  EXPECT_THAT(Train(&g), IsOk());
  return g;
}

// Two fast GPUs on NVLink, one slow GPU behind a 10 Gbit/s NIC.
quilt::v1::ClusterSpec Mixed(int64_t memory = int64_t{16} << 30) {
  quilt::v1::ClusterSpec spec;
  spec.set_name("mixed");
  for (int n = 0; n < 2; ++n) {
    auto* node = spec.add_nodes();
    node->set_node_id(n == 0 ? "fast" : "slow");
    for (int d = 0; d < (n == 0 ? 2 : 1); ++d) {
      auto* dev = node->add_devices();
      dev->set_id(node->node_id() + "/gpu:" + std::to_string(d));
      dev->set_kind(quilt::v1::DEVICE_KIND_GPU);
      dev->set_index(d);
      dev->set_peak_fp32_flops_per_s(n == 0 ? 1.4e13 : 4e12);
      dev->set_efficiency(0.5);
      dev->set_memory_bandwidth_bytes_per_s(9e11);
      dev->set_memory_bytes(memory);
    }
    node->mutable_intra_node_link()->set_bandwidth_bytes_per_s(1e11);
    node->mutable_nic()->set_bandwidth_bytes_per_s(1.25e9);
  }
  return spec;
}

using Fixture = testing::World;

std::unique_ptr<Fixture> Make(Graph g, const quilt::v1::ClusterSpec& spec) {
  auto f = std::make_unique<Fixture>();
  f->graph = std::move(g);
  testing::TopologyAndCost(spec, f->graph, &f->topo, &f->cost);
  return f;
}

// The most memory a device of Mixed() holds under dp-even-ring with
// DeepMlp at `batch` (0 when that cannot be simulated).
int64_t DataParallelPeak(int64_t batch) {
  auto f = Make(DeepMlp(), Mixed());
  PlanOptions o;
  o.global_batch = batch;
  o.strategy = "dp-even-ring";
  absl::StatusOr<PlanResult> r = Plan(f->graph, f->topo, o);
  EXPECT_THAT(r.status(), IsOk());
  int64_t peak = 0;
  if (!r.ok()) return peak;
  for (const auto& m : r->report.estimates(0).memory()) peak = std::max(peak, m.peak_bytes());
  return peak;
}

TEST(HeteroG, FindsTheOptimumOfASmallActionSpace) {
  auto f = Make(WideMlp(), Mixed());
  const int64_t batch = 48;
  SearchOptions o;
  o.target_groups = 3;
  o.time_budget_s = 60;
  o.max_evaluations = 0;  // no limit: the space is enumerated
  o.restarts = 8;
  const std::vector<NamedStrategy> baselines = Baselines(f->graph, f->topo, *f->cost, batch);
  absl::StatusOr<SearchResult> found =
      SearchHeteroG(f->graph, f->topo, *f->cost, batch, baselines, o);
  ASSERT_THAT(found.status(), IsOk());
  EXPECT_EQ(found->stopped_by, "enumerated");
  // The same action space, enumerated.
  const Grouping grouping = GroupOps(f->graph, *f->cost, 3, batch / 3);
  absl::StatusOr<std::unique_ptr<CoarseModel>> coarse =
      CoarseModel::Build(f->graph, grouping, *f->cost);
  ASSERT_THAT(coarse.status(), IsOk());
  const int groups = (*coarse)->num_groups();
  ASSERT_LE(groups, 3);
  ASSERT_EQ(groups, found->groups);
  SearchSpace space(f->topo, *f->cost, **coarse, batch, o.memory_fraction);
  for (const NamedStrategy& ns : baselines) {
    if (ns.infeasible_reason.empty()) space.FromDataParallel(ns.strategy);
  }
  std::vector<std::pair<int, Method>> choices;
  for (int opt = 0; opt < static_cast<int>(space.options().size()); ++opt) {
    for (Method m : space.MethodsFor(opt)) choices.push_back({opt, m});
  }
  double best = 1e30;
  PlanState s;
  s.place.assign(groups, 0);
  s.method.assign(groups, Method::kRing);
  std::vector<size_t> at(groups, 0);
  int64_t states = 0;
  for (;;) {
    for (int k = 0; k < groups; ++k) {
      s.place[k] = choices[at[k]].first;
      s.method[k] = choices[at[k]].second;
    }
    for (auto order : kExecutionOrders) {
      s.order = order;
      absl::StatusOr<Score> score = space.Evaluate(s);
      ASSERT_THAT(score.status(), IsOk());
      if (score->feasible()) best = std::min(best, score->time_s);
      ++states;
    }
    int k = 0;
    while (k < groups && ++at[k] == choices.size()) at[k++] = 0;
    if (k == groups) break;
  }
  EXPECT_GT(states, 100);
  EXPECT_NEAR(found->result_s, best, best * 1e-9)
      << "searched " << found->evaluated << " of " << states;
  // A real hybrid: not every group placed as the starting baseline has it.
  EXPECT_LT(found->result_s, found->start_s);
}

// Plans simulated together (on two threads where there are two cores)
// score exactly as one by one; a plan twice in one call, or one simulated
// before, is simulated once.
TEST(HeteroG, PlansSimulatedTogetherScoreAsOneByOne) {
  auto f = Make(WideMlp(), Mixed());
  const Grouping grouping = GroupOps(f->graph, *f->cost, 3, 16);
  absl::StatusOr<std::unique_ptr<CoarseModel>> coarse =
      CoarseModel::Build(f->graph, grouping, *f->cost);
  ASSERT_THAT(coarse.status(), IsOk());
  const int groups = (*coarse)->num_groups();
  SearchSpace together(f->topo, *f->cost, **coarse, 48, 0.92);
  SearchSpace alone(f->topo, *f->cost, **coarse, 48, 0.92);
  together.set_parallel_above(0);  // always the second thread
  std::mt19937_64 rng(7);
  std::vector<PlanState> states;
  for (int i = 0; i < 40; ++i) {
    PlanState s;
    for (int k = 0; k < groups; ++k) {
      s.place.push_back(static_cast<int>(rng() % together.options().size()));
      const std::vector<Method> methods = together.MethodsFor(s.place.back());
      s.method.push_back(methods[rng() % methods.size()]);
    }
    s.order = kExecutionOrders[rng() % 2];
    states.push_back(s);
  }
  int64_t distinct = 0;
  for (size_t i = 0; i < states.size(); i += 2) {
    const std::vector<PlanState> pair = {states[i], states[i + 1]};
    std::vector<absl::StatusOr<Score>> got = together.EvaluateAll(pair);
    ASSERT_EQ(got.size(), 2u);
    for (int j = 0; j < 2; ++j) {
      const int64_t before = alone.evaluations();
      absl::StatusOr<Score> want = alone.Evaluate(pair[j]);
      distinct += alone.evaluations() - before;
      ASSERT_THAT(got[j].status(), IsOk());
      ASSERT_THAT(want.status(), IsOk());
      EXPECT_EQ(got[j]->time_s, want->time_s) << i + j;
      EXPECT_EQ(got[j]->overflow_bytes, want->overflow_bytes) << i + j;
      EXPECT_EQ(got[j]->fits_whole, want->fits_whole) << i + j;
    }
  }
  EXPECT_EQ(together.evaluations(), distinct);
  // Twice in one call: once; again later: from the cache.
  PlanState fresh = states[0];
  fresh.order = fresh.order == kExecutionOrders[0] ? kExecutionOrders[1] : kExecutionOrders[0];
  fresh.place[0] = (fresh.place[0] + 1) % static_cast<int>(together.options().size());
  fresh.method[0] = together.MethodsFor(fresh.place[0])[0];
  const int64_t before = together.evaluations();
  std::vector<absl::StatusOr<Score>> twice = together.EvaluateAll({fresh, fresh});
  ASSERT_THAT(twice[0].status(), IsOk());
  ASSERT_THAT(twice[1].status(), IsOk());
  EXPECT_EQ(twice[0]->time_s, twice[1]->time_s);
  const int64_t after = together.evaluations();
  EXPECT_LE(after - before, 1);
  ASSERT_THAT(together.EvaluateAll({fresh, states[1]})[0].status(), IsOk());
  EXPECT_EQ(together.evaluations(), after);
}

// `nodes` nodes of `per_node` equal GPUs; node 0's NIC at `nic0` bytes/s,
// the others' at 12.5 GB/s.
quilt::v1::ClusterSpec Equal(int nodes, int per_node, double nic0) {
  quilt::v1::ClusterSpec spec = Mixed();
  spec.clear_nodes();
  for (int n = 0; n < nodes; ++n) {
    auto* node = spec.add_nodes();
    node->set_node_id("n" + std::to_string(n));
    for (int d = 0; d < per_node; ++d) {
      *node->add_devices() = Mixed().nodes(0).devices(0);
      node->mutable_devices(d)->set_id(node->node_id() + "/gpu:" + std::to_string(d));
      node->mutable_devices(d)->set_index(d);
    }
    node->mutable_intra_node_link()->set_bandwidth_bytes_per_s(1e11);
    node->mutable_nic()->set_bandwidth_bytes_per_s(n == 0 ? nic0 : 1.25e10);
  }
  return spec;
}

// The placements the search may choose from, by label.
std::vector<std::pair<std::string, int>> Options(const quilt::v1::ClusterSpec& spec) {
  auto f = Make(WideMlp(), spec);
  const Grouping grouping = GroupOps(f->graph, *f->cost, 3, 8);
  absl::StatusOr<std::unique_ptr<CoarseModel>> coarse =
      CoarseModel::Build(f->graph, grouping, *f->cost);
  EXPECT_THAT(coarse.status(), IsOk());
  SearchSpace space(f->topo, *f->cost, **coarse, 64, 0.92);
  std::vector<std::pair<std::string, int>> out;
  for (const PlacementOption& o : space.options()) {
    out.push_back({o.label, static_cast<int>(o.replicas.size())});
  }
  return out;
}

TEST(HeteroG, TheSearchMayLeaveOutADeviceBehindASlowLinkOrANodeBehindASlowNic) {
  // Three equal devices, two of them joined by a slow pair link: the
  // typical link is fast, so a set without one end of it is offered.
  quilt::v1::ClusterSpec three = Equal(1, 3, 1.25e10);
  auto* slow = three.add_pair_links();
  slow->set_src_device("n0/gpu:0");
  slow->set_dst_device("n0/gpu:1");
  slow->mutable_link()->set_bandwidth_bytes_per_s(1e3);
  EXPECT_THAT(Options(three),
              ::testing::Contains(::testing::Pair(::testing::HasSubstr("(slow links)"), 2)));
  // Four nodes of two, the first on a slow NIC (the sets by speed keep it:
  // listed first, it ties the others): a set without that node.
  EXPECT_THAT(Options(Equal(4, 2, 1.25e8)),
              ::testing::Contains(::testing::Pair("all but node n0 (slow NICs)", 6)));
  EXPECT_THAT(
      Options(Equal(4, 2, 1.25e10)),
      ::testing::Not(::testing::Contains(::testing::Pair(::testing::HasSubstr("slow NICs"), 6))));
  // One device is one placement (a search where nothing fits then stops
  // at once instead of searching for its whole budget).
  EXPECT_THAT(Options(Equal(1, 1, 1.25e10)), ::testing::SizeIs(1));
}

TEST(HeteroG, SameSeedSamePlan) {
  auto f = Make(WideMlp(), Mixed());
  const std::vector<NamedStrategy> baselines = Baselines(f->graph, f->topo, *f->cost, 48);
  SearchOptions o;
  o.time_budget_s = 120;
  o.max_evaluations = 150;
  o.seed = 7;
  absl::StatusOr<SearchResult> a = SearchHeteroG(f->graph, f->topo, *f->cost, 48, baselines, o);
  absl::StatusOr<SearchResult> b = SearchHeteroG(f->graph, f->topo, *f->cost, 48, baselines, o);
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  EXPECT_NE(a->stopped_by, "time budget");
  EXPECT_EQ(a->result_s, b->result_s);
  ASSERT_EQ(a->variants.size(), b->variants.size());
  EXPECT_EQ(a->variants[0].SerializeAsString(), b->variants[0].SerializeAsString());
}

TEST(HeteroG, FitsAModelNoDataParallelSplitFits) {
  // Memory for about half of what data parallelism keeps on each device.
  const int64_t batch = 24;
  const int64_t dp_peak = DataParallelPeak(batch);
  ASSERT_GT(dp_peak, 0);
  auto f = Make(DeepMlp(), Mixed(dp_peak * 6 / 10));
  PlanOptions o;
  o.global_batch = batch;
  o.search.time_budget_s = 30;
  o.search.max_evaluations = 400;
  absl::StatusOr<PlanResult> r = Plan(f->graph, f->topo, o);
  ASSERT_THAT(r.status(), IsOk());
  for (const auto& e : r->report.estimates()) {
    if (e.name() == "heterog") {
      EXPECT_TRUE(e.feasible()) << e.infeasible_reason() << "; " << e.note() << "; "
                                << e.search().DebugString();
      EXPECT_EQ(r->report.best(), "heterog");
    } else {
      EXPECT_FALSE(e.feasible()) << e.name();
    }
  }
  EXPECT_THAT(ValidateProgram(r->best_program, f->graph, f->topo), IsOk());
}

// The search from its start alone, and then also from each other seed
// (within `evaluations` plans each); no time budget cuts either.
std::pair<absl::StatusOr<SearchResult>, absl::StatusOr<SearchResult>> AloneAndFromOtherSeeds(
    const Fixture& f, int64_t batch, int64_t evaluations) {
  const std::vector<NamedStrategy> baselines = Baselines(f.graph, f.topo, *f.cost, batch);
  SearchOptions alone;
  alone.time_budget_s = 300;
  alone.other_seed_evaluations = 0;
  alone.bound_seed_evaluations = 0;
  SearchOptions both = alone;
  both.other_seed_evaluations = evaluations;
  return {SearchHeteroG(f.graph, f.topo, *f.cost, batch, baselines, alone),
          SearchHeteroG(f.graph, f.topo, *f.cost, batch, baselines, both)};
}

// Where no data-parallel split fits, the search also starts from the
// layer-wise seed it did not take. gpt2_xl at batch 3 on HeteroG's testbed:
// the seed over nodes is the start; the search from the one over devices
// finds a plan that fits and is faster.
TEST(HeteroG, SearchesFromEachLayerwiseSeedWhereNoBaselineFits) {
  auto f = testing::OnShippedCluster("gpt2_xl", "heterog_testbed");
  ASSERT_NE(f, nullptr);
  const int64_t batch = 3;
  const auto [a, b] = AloneAndFromOtherSeeds(*f, batch, 2000);
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  EXPECT_TRUE(absl::StartsWith(a->start, "layer-wise")) << a->start;
  ASSERT_TRUE(a->feasible);
  ASSERT_TRUE(b->feasible);
  EXPECT_NE(b->start, a->start);
  EXPECT_TRUE(absl::StartsWith(b->start, "layer-wise")) << b->start;
  EXPECT_LT(b->result_s, 0.95 * a->result_s);
  EXPECT_GT(b->evaluated, a->evaluated);
  // The first search's plan stays a variant, for the full simulation to
  // weigh against the other (the coarse model may rank them otherwise).
  EXPECT_TRUE(a->other_searches.empty());
  const SearchResult::OtherSearch* first = nullptr;
  for (const SearchResult::OtherSearch& o : b->other_searches) {
    EXPECT_NE(o.start, b->start);
    ASSERT_GT(o.variant, 0u);
    ASSERT_LT(o.variant, b->variants.size());
    EXPECT_EQ(o.choices.size(), a->choices.size());
    if (o.start == a->start && first == nullptr) first = &o;
  }
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->start_s, a->start_s);
  // (A first start over memory is searched within the other seeds' limit
  // of plans while they are left, then on from there: its plan may differ
  // from the one its search alone ends on.)
  if (!a->start_fits) return;
  EXPECT_EQ(first->result_s, a->result_s);
  for (size_t k = 0; k < a->choices.size() && k < first->choices.size(); ++k) {
    EXPECT_EQ(first->choices[k].placement, a->choices[k].placement) << k;
    EXPECT_EQ(first->choices[k].aggregation, a->choices[k].aggregation) << k;
  }
  EXPECT_EQ(b->variants[first->variant].SerializeAsString(), a->variants[0].SerializeAsString());
}

// The searches from the other seeds only add to the first: where no
// baseline fits, the plan is never slower than the start's search alone
// finds, on any memory size.
TEST(HeteroG, OtherSeedsNeverMakeThePlanSlower) {
  const int64_t batch = 24;
  const int64_t dp_peak = DataParallelPeak(batch);
  ASSERT_GT(dp_peak, 0);
  int searched_again = 0;
  for (int tenths : {4, 5, 6, 7, 8}) {
    auto f = Make(DeepMlp(), Mixed(dp_peak * tenths / 10));
    const auto [a, b] = AloneAndFromOtherSeeds(*f, batch, 500);
    ASSERT_THAT(a.status(), IsOk());
    ASSERT_THAT(b.status(), IsOk());
    if (!a->feasible) continue;  // (ran to the time budget)
    EXPECT_TRUE(b->feasible) << tenths;
    EXPECT_LE(b->result_s, a->result_s) << tenths;
    searched_again += b->evaluated > a->evaluated;
  }
  EXPECT_GT(searched_again, 0);
}

// Progress reports while the search runs: the plans simulated and ruled
// out so far only grow, each search's best only improves (in fit, then in time), and the
// searches named are those the result chose among. Through Plan, the
// reports are lines of progress.
TEST(HeteroG, ReportsItsProgress) {
  const int64_t batch = 24;
  const int64_t dp_peak = DataParallelPeak(batch);
  ASSERT_GT(dp_peak, 0);
  auto f = Make(DeepMlp(), Mixed(dp_peak * 6 / 10));
  const std::vector<NamedStrategy> baselines = Baselines(f->graph, f->topo, *f->cost, batch);
  std::vector<SearchProgress> reports;
  SearchOptions o;
  o.time_budget_s = 300;
  o.max_evaluations = 400;
  o.progress_every_s = 0;
  o.progress = [&](const SearchProgress& p) { reports.push_back(p); };
  absl::StatusOr<SearchResult> r = SearchHeteroG(f->graph, f->topo, *f->cost, batch, baselines, o);
  ASSERT_THAT(r.status(), IsOk());
  ASSERT_TRUE(r->feasible);
  ASSERT_GT(reports.size(), 10u);
  std::set<std::string> starts;
  for (size_t i = 0; i < reports.size(); ++i) {
    const SearchProgress& p = reports[i];
    starts.insert(p.start);
    EXPECT_LE(p.evaluated, r->evaluated);
    EXPECT_LE(p.ruled_out, r->ruled_out);
    if (i == 0) continue;
    const SearchProgress& q = reports[i - 1];
    EXPECT_GE(p.evaluated, q.evaluated);
    EXPECT_GE(p.ruled_out, q.ruled_out);
    if (p.start != q.start || p.other_seed != q.other_seed) continue;
    EXPECT_FALSE(q.feasible && !p.feasible) << i;
    if (q.feasible) {
      EXPECT_LE(p.best_s, q.best_s) << i;
    } else if (!p.feasible) {
      EXPECT_LE(p.overflow_bytes, q.overflow_bytes) << i;
    }
  }
  EXPECT_TRUE(starts.count(r->start)) << r->start;
  EXPECT_FALSE(reports.front().other_seed);
  for (const std::string& start : starts) {
    EXPECT_TRUE(absl::StartsWith(start, "layer-wise") ||
                start == "data parallelism over every device by speed")
        << start;
  }

  std::vector<std::string> lines;
  PlanOptions po;
  po.global_batch = batch;
  po.search.time_budget_s = 300;
  po.search.max_evaluations = 400;
  po.search.progress_every_s = 0;
  po.progress = [&](const std::string& line) { lines.push_back(line); };
  absl::StatusOr<PlanResult> plan = Plan(f->graph, f->topo, po);
  ASSERT_THAT(plan.status(), IsOk());
  int searching = 0;
  for (const std::string& line : lines) {
    if (!absl::StartsWith(line, "searching from ")) continue;
    ++searching;
    EXPECT_THAT(line, ::testing::ContainsRegex(" plans simulated, [0-9]+ ruled out, ")) << line;
    EXPECT_THAT(line, ::testing::HasSubstr(" s so far)")) << line;
  }
  EXPECT_GT(searching, 10);
}

// Across zoo models and random clusters: validated, never slower than the
// best baseline, and the reported time is what its program simulates to.
class PlanWithHeteroG : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(PlanWithHeteroG, NeverSlowerAndReportsItsSimulation) {
  const auto& [model, seed] = GetParam();
  absl::StatusOr<Graph> g = zoo::BuildZooModel(model);
  ASSERT_THAT(g.status(), IsOk());
  ASSERT_THAT(Train(&*g, OptimizerSpec::Kind::kAdam), IsOk());
  auto f = Make(std::move(*g), RandomCluster(seed));
  PlanOptions o;
  o.global_batch = 4 * f->topo.num_devices();
  o.search.time_budget_s = 20;
  o.search.max_evaluations = 60;
  absl::StatusOr<PlanResult> r = Plan(f->graph, f->topo, o);
  ASSERT_THAT(r.status(), IsOk());
  const quilt::v1::StrategyEstimate* h = nullptr;
  double best_baseline = 0;
  for (const auto& e : r->report.estimates()) {
    if (e.name() == "heterog") {
      h = &e;
    } else if (e.feasible() && (best_baseline == 0 || e.step_time_s() < best_baseline)) {
      best_baseline = e.step_time_s();
    }
  }
  ASSERT_NE(h, nullptr);
  if (best_baseline > 0) {
    EXPECT_TRUE(h->feasible());
    EXPECT_LE(h->step_time_s(), best_baseline);
  }
  // Asked for alone, the plan is compared with the baselines too (it was
  // compared with its start only, which the coarse model can misjudge).
  PlanOptions alone = o;
  alone.strategy = "heterog";
  absl::StatusOr<PlanResult> ra = Plan(f->graph, f->topo, alone);
  ASSERT_THAT(ra.status(), IsOk());
  ASSERT_EQ(ra->report.estimates_size(), 1);
  const quilt::v1::StrategyEstimate& ha = ra->report.estimates(0);
  if (best_baseline > 0) {
    EXPECT_TRUE(ha.feasible());
    EXPECT_LE(ha.step_time_s(), best_baseline) << ha.note();
    EXPECT_TRUE(ha.search().has_best_baseline());
    EXPECT_DOUBLE_EQ(ha.search().best_baseline().step_time_s(), best_baseline);
  }
  if (!h->feasible()) return;
  absl::StatusOr<quilt::v1::DistributedProgram> p =
      Lower(f->graph, h->strategy(), f->topo, f->cost.get(), o.global_batch);
  ASSERT_THAT(p.status(), IsOk());
  EXPECT_THAT(ValidateProgram(*p, f->graph, f->topo), IsOk());
  absl::StatusOr<SimResult> sim = Simulate(*p, f->graph, f->topo, *f->cost);
  ASSERT_THAT(sim.status(), IsOk());
  EXPECT_DOUBLE_EQ(sim->step_time_s, h->step_time_s());
}

// The plan is the fastest of the search's variants (gradient buckets and
// slices, a collective per group or per gradient) simulated in full, and
// the report names the chosen one's collectives.
TEST(Baselines, TheSingleDeviceIsTheOneTheBatchComputesFastestOn) {
  // fast/gpu:0 has the most FLOP/s (with fast/gpu:1) but a slow launcher:
  // 1 ms per op makes a small model slower there than anywhere else.
  quilt::v1::ClusterSpec spec = testing::TwoNodes();
  spec.mutable_nodes(0)->mutable_devices(0)->set_measured_op_overhead_s(1e-3);
  auto f = testing::Make("mlp", spec);
  const std::vector<NamedStrategy> baselines = Baselines(f->graph, f->topo, *f->cost, 32);
  ASSERT_FALSE(baselines.empty());
  ASSERT_EQ(baselines[0].name, "single-device");
  const auto& groups = baselines[0].strategy.groups();
  ASSERT_FALSE(groups.empty());
  for (const auto& group : groups) {
    ASSERT_EQ(group.replicas_size(), 1);
    EXPECT_EQ(group.replicas(0).device(), "fast/gpu:1");
  }
}

// The planner's estimate in a plan's report (null when it has none).
const quilt::v1::StrategyEstimate* HeteroGEstimate(const PlanResult& r) {
  return testing::FindEstimate(r.report, "heterog");
}

TEST(HeteroG, PlanIsTheFastestVariantAndNamesItsCollectives) {
  absl::StatusOr<Graph> g = zoo::BuildZooModel("cnn");
  ASSERT_THAT(g.status(), IsOk());
  ASSERT_THAT(Train(&*g), IsOk());
  auto f = Make(std::move(*g), RandomCluster(4));
  // Plan simulates the variants in both execution orders on clusters this
  // small, as this test does.
  ASSERT_LE(f->topo.num_devices(), 16);
  PlanOptions o;
  o.global_batch = 8 * f->topo.num_devices();
  o.search.max_evaluations = 40;
  o.search.bucket_bytes = {4096, 65536};
  absl::StatusOr<PlanResult> r = Plan(f->graph, f->topo, o);
  ASSERT_THAT(r.status(), IsOk());
  const quilt::v1::StrategyEstimate* h = HeteroGEstimate(*r);
  ASSERT_NE(h, nullptr);
  ASSERT_TRUE(h->feasible());
  absl::StatusOr<SearchResult> sr =
      SearchHeteroG(f->graph, f->topo, *f->cost, o.global_batch,
                    Baselines(f->graph, f->topo, *f->cost, o.global_batch), o.search);
  ASSERT_THAT(sr.status(), IsOk());
  ASSERT_EQ(sr->variants.size(), sr->variant_collectives.size());
  ASSERT_GE(sr->variants.size(), 4u);
  EXPECT_EQ(h->search().variants_simulated(), static_cast<int>(sr->variants.size()));
  double fastest = 0;
  std::string label;
  int sliced = 0;
  for (size_t v = 0; v < sr->variants.size(); ++v) {
    for (const auto& a : sr->variants[v].aggregations()) sliced += a.partition_bytes() > 0;
    absl::StatusOr<quilt::v1::StrategyEstimate> e =
        Estimate(f->graph, f->topo, *f->cost, NamedStrategy{"v", sr->variants[v], ""},
                 o.global_batch, r->report.lower_bound_s(), nullptr, nullptr, false, true);
    ASSERT_THAT(e.status(), IsOk());
    if (e->feasible() && (fastest == 0 || e->step_time_s() < fastest)) {
      fastest = e->step_time_s();
      label = sr->variant_collectives[v];
    }
  }
  EXPECT_GT(sliced, 0);
  if (h->note().find("is kept") != std::string::npos) {
    EXPECT_LE(h->step_time_s(), fastest);  // a baseline was as fast
  } else {
    EXPECT_DOUBLE_EQ(h->step_time_s(), fastest);
    EXPECT_EQ(h->search().gradient_collectives(), label);
  }
}

// The plan's variant with the starting placement and the search's
// aggregation explains its own choices: a group whose aggregation differs
// from the start's has its worth measured (or says why not), the others
// none.
TEST(HeteroG, TheStartingPlacementsVariantMeasuresItsOwnChoices) {
  int cases = 0;
  for (uint64_t seed = 1; seed <= 8 && cases < 2; ++seed) {
    absl::StatusOr<Graph> g = zoo::BuildZooModel("vgg19");
    ASSERT_THAT(g.status(), IsOk());
    ASSERT_THAT(Train(&*g), IsOk());
    auto f = Make(std::move(*g), RandomCluster(seed));
    SearchOptions o;
    o.max_evaluations = 60;
    const int64_t batch = 8 * f->topo.num_devices();
    absl::StatusOr<SearchResult> sr = SearchHeteroG(
        f->graph, f->topo, *f->cost, batch, Baselines(f->graph, f->topo, *f->cost, batch), o);
    ASSERT_THAT(sr.status(), IsOk());
    if (sr->mixed_variant == 0) continue;
    ++cases;
    SCOPED_TRACE(::testing::Message() << "random cluster " << seed);
    ASSERT_EQ(sr->mixed_choices.size(), sr->start_choices.size());
    int measured = 0;
    for (size_t k = 0; k < sr->mixed_choices.size(); ++k) {
      const GroupChoice& m = sr->mixed_choices[k];
      const GroupChoice& start = sr->start_choices[k];
      EXPECT_EQ(m.placement, start.placement);
      EXPECT_EQ(m.as_start, m.aggregation == start.aggregation) << k;
      if (m.aggregation == start.aggregation) {
        EXPECT_EQ(m.saved_s, 0) << k;
        EXPECT_FALSE(m.needed_to_fit || m.saved_not_measured) << k;
      } else {
        EXPECT_TRUE(m.saved_s != 0 || m.needed_to_fit || m.saved_not_measured) << k;
        measured += m.saved_s != 0;
      }
    }
    EXPECT_GT(measured, 0);
  }
  ASSERT_GT(cases, 0) << "no random cluster gave the variant";
}

// A group's parameter servers may sit on another node than its devices:
// the nodes with the fastest NICs are offered, the plan names their
// devices as servers, the explanation names the node, and the state is
// its own (scored apart from the one with servers on the group's devices).
TEST(HeteroG, ParameterServersOnAServerNode) {
  quilt::v1::ClusterSpec spec = testing::TwoNodes();
  spec.mutable_nodes(1)->mutable_nic()->set_bandwidth_bytes_per_s(1.25e10);
  auto f = Make(WideMlp(), spec);
  const int64_t batch = 32;
  const Grouping grouping = GroupOps(f->graph, *f->cost, 3, batch / 4);
  absl::StatusOr<std::unique_ptr<CoarseModel>> coarse =
      CoarseModel::Build(f->graph, grouping, *f->cost);
  ASSERT_THAT(coarse.status(), IsOk());
  SearchSpace space(f->topo, *f->cost, **coarse, batch, 0.92);
  // The faster NIC first, then the other node.
  ASSERT_EQ(space.ServerNodes(), (std::vector<int>{1, 0}));
  const NamedStrategy* even_ps = nullptr;
  const std::vector<NamedStrategy> baselines = Baselines(f->graph, f->topo, *f->cost, batch);
  for (const NamedStrategy& ns : baselines) {
    if (ns.name == "dp-even-ps") even_ps = &ns;
  }
  ASSERT_NE(even_ps, nullptr);
  const PlanState own = space.FromDataParallel(even_ps->strategy);
  const int groups = (*coarse)->num_groups();
  ASSERT_GE(groups, 2);
  PlanState on_node = own;
  on_node.server_node.assign(groups, -1);
  on_node.server_node[0] = 1;
  EXPECT_FALSE(on_node == own);
  // -1 entries are the same as none.
  PlanState none_set = own;
  none_set.server_node.assign(groups, -1);
  EXPECT_TRUE(none_set == own);
  EXPECT_EQ(space.AggregationLabel(on_node, 0), "parameter servers on node slow");
  EXPECT_EQ(space.AggregationLabel(on_node, 1), "parameter servers on its devices");
  const quilt::v1::Strategy fine = space.FineStrategy(f->graph, on_node, "p", 0);
  std::set<std::string> group0_params(grouping.params[0].begin(), grouping.params[0].end());
  int on_slow = 0, elsewhere = 0;
  for (const auto& a : fine.aggregations()) {
    ASSERT_EQ(a.method(), quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER);
    ASSERT_GT(a.servers_size(), 0);
    for (const std::string& server : a.servers()) {
      if (group0_params.count(a.parameter())) {
        EXPECT_EQ(server.rfind("slow/", 0), 0u) << a.parameter() << " on " << server;
        ++on_slow;
      } else {
        elsewhere += server.rfind("slow/", 0) != 0;
      }
    }
  }
  EXPECT_GT(on_slow, 0);
  EXPECT_GT(elsewhere, 0);  // the other groups' servers rotate over both nodes
  // Lowered and validated, and scored apart.
  LowerChecked(*f, fine, batch);
  absl::StatusOr<Score> a = space.Evaluate(own), b = space.Evaluate(on_node);
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  EXPECT_EQ(space.evaluations(), 2);
  EXPECT_NE(a->time_s, b->time_s);
}

// A tied embedding over slow links: the plan gathers its lookups'
// gradients, says so, and the same plan with the table summed dense
// simulates slower.
TEST(HeteroG, GathersEmbeddingGradientsWhereThatIsFaster) {
  absl::StatusOr<Graph> g = zoo::BuildZooModel("transformer");
  ASSERT_THAT(g.status(), IsOk());
  ASSERT_THAT(Train(&*g), IsOk());
  auto f = Make(std::move(*g), testing::TwoNodes());
  PlanOptions o;
  o.global_batch = 16;
  o.search.max_evaluations = 30;
  absl::StatusOr<PlanResult> r = Plan(f->graph, f->topo, o);
  ASSERT_THAT(r.status(), IsOk());
  const quilt::v1::StrategyEstimate* h = HeteroGEstimate(*r);
  ASSERT_NE(h, nullptr);
  ASSERT_TRUE(h->feasible());
  ASSERT_EQ(h->search().gathered_tables_size(), 1) << h->search().DebugString();
  const std::string table = h->search().gathered_tables(0);
  EXPECT_GT(h->search().gathered_saved_s(), 0);
  // The explanation's group that updates the table says so (one group).
  int saying = 0;
  for (const auto& d : h->search().decisions()) {
    const bool gathered = absl::StrContains(d.aggregation(), table + " gathered (sparse lookup)");
    saying += gathered;
    // (And that the plan changed it after the search, so that it does
    // not read as the start's.)
    EXPECT_EQ(absl::StrContains(d.changed_after_search(), "embedding gradients gathered"), gathered)
        << d.group();
  }
  EXPECT_EQ(saying, 1) << h->search().DebugString();
  quilt::v1::Strategy dense = h->strategy();
  int sparse = 0;
  for (auto& a : *dense.mutable_aggregations()) {
    if (a.method() != quilt::v1::AGGREGATION_METHOD_SPARSE_LOOKUP) continue;
    ++sparse;
    EXPECT_EQ(a.parameter(), table);
    a.set_method(quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE);
  }
  EXPECT_EQ(sparse, 1);
  // Its program is what the report timed; the dense one is slower.
  absl::StatusOr<quilt::v1::StrategyEstimate> same =
      Estimate(f->graph, f->topo, *f->cost, NamedStrategy{"same", h->strategy(), ""},
               o.global_batch, r->report.lower_bound_s(), nullptr, nullptr, false, false);
  ASSERT_THAT(same.status(), IsOk());
  EXPECT_DOUBLE_EQ(same->step_time_s(), h->step_time_s());
  absl::StatusOr<quilt::v1::StrategyEstimate> summed =
      Estimate(f->graph, f->topo, *f->cost, NamedStrategy{"dense", dense, ""}, o.global_batch,
               r->report.lower_bound_s(), nullptr, nullptr, false, true);
  ASSERT_THAT(summed.status(), IsOk());
  EXPECT_GT(summed->step_time_s(), h->step_time_s());
}

INSTANTIATE_TEST_SUITE_P(ModelsAndClusters, PlanWithHeteroG,
                         ::testing::Combine(::testing::Values("mlp", "cnn", "transformer"),
                                            ::testing::Values(3, 11)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_random" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace quilt
