// Invariants of the baselines on every zoo model × shipped cluster: every
// program lowers and validates, no prediction beats the compute lower
// bound, feasibility is exactly "every device's peak fits its memory", and
// on heterogeneous clusters the proportional split is never slower than
// the even one.
#include <map>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/cluster/cluster_spec.h"
#include "src/common/status_matchers.h"
#include "src/graph/autodiff.h"
#include "src/graph/zoo/zoo.h"
#include "src/graph/zoo_training.h"
#include "src/planner/baselines.h"
#include "src/planner/bucketed_baselines.h"
#include "src/planner/plan.h"
#include "src/planner/priorities.h"
#include "src/planner/program_validator.h"

namespace quilt {
namespace {

struct Case {
  std::string model;
  std::string cluster;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.model << "@" << c.cluster; }

std::vector<Case> AllCases() {
  std::vector<Case> out;
  for (const zoo::ZooModel& m : zoo::ZooModels()) {
    for (const char* c : {"heterog_testbed", "hap_cluster", "nvlink_2x4_v100"})
      out.push_back({m.name, c});
  }
  return out;
}

bool Heterogeneous(const Topology& topo) {
  for (int d = 1; d < topo.num_devices(); ++d) {
    if (topo.device(d).proto.model() != topo.device(0).proto.model()) return true;
  }
  return false;
}

const quilt::v1::StrategyEstimate* Find(const quilt::v1::PlanReport& r, const std::string& name) {
  for (const auto& e : r.estimates()) {
    if (e.name() == name) return &e;
  }
  return nullptr;
}

// A zoo model's training graph (softmax cross-entropy, SGD with momentum)
// on a shipped cluster.
struct World {
  Topology topo;
  Graph graph;
};

void MakeWorld(const std::string& cluster, const std::string& model, World* s) {
  absl::StatusOr<quilt::v1::ClusterSpec> spec =
      LoadClusterSpec("config/clusters/" + cluster + ".textproto");
  ASSERT_THAT(spec.status(), IsOk());
  absl::StatusOr<Topology> topo = Topology::Build(*spec);
  ASSERT_THAT(topo.status(), IsOk());
  s->topo = std::move(*topo);
  absl::StatusOr<Graph> g = zoo::ZooTrainingGraph(model);
  ASSERT_THAT(g.status(), IsOk());
  s->graph = std::move(*g);
}

class Invariants : public ::testing::TestWithParam<Case> {};

TEST_P(Invariants, HoldForEveryBaseline) {
  const Case& c = GetParam();
  World w;
  ASSERT_NO_FATAL_FAILURE(MakeWorld(c.cluster, c.model, &w));
  const Topology* topo = &w.topo;
  const Graph* g = &w.graph;
  PlanOptions o;
  o.global_batch = 8 * topo->num_devices();
  o.search.max_evaluations = 40;
  // Plan lowers, validates and simulates every baseline; an invalid program
  // is an error.
  absl::StatusOr<PlanResult> plan = Plan(*g, *topo, o);
  ASSERT_THAT(plan.status(), IsOk());
  const quilt::v1::PlanReport& r = plan->report;
  // The baselines and the planner's plan.
  ASSERT_EQ(r.estimates_size(), topo->num_devices() > 1 ? 6 : 2);
  ASSERT_GT(r.lower_bound_s(), 0);
  for (const auto& e : r.estimates()) {
    SCOPED_TRACE(e.name());
    if (e.step_time_s() == 0) {
      // Not built at all: only when no split fits memory.
      EXPECT_FALSE(e.feasible());
      EXPECT_THAT(e.infeasible_reason(), ::testing::HasSubstr("memory"));
      continue;
    }
    EXPECT_GE(e.step_time_s(), r.lower_bound_s() * (1 - 1e-9));
    EXPECT_GE(e.ratio_to_lower_bound(), 1 - 1e-9);
    bool fits = true;
    ASSERT_GT(e.memory_size(), 0);
    for (const auto& m : e.memory()) fits &= m.peak_bytes() <= m.capacity_bytes();
    EXPECT_EQ(e.feasible(), fits);
    if (!fits) {
      EXPECT_THAT(e.infeasible_reason(), ::testing::HasSubstr("out of memory"));
    }
  }
  if (!r.best().empty()) {
    EXPECT_THAT(ValidateProgram(plan->best_program, *g, *topo), IsOk());
    EXPECT_TRUE(Find(r, r.best())->feasible());
  }
  // The planner is never slower than the best baseline, and fits whenever
  // one does.
  const auto* heterog = Find(r, "heterog");
  ASSERT_NE(heterog, nullptr);
  for (const auto& e : r.estimates()) {
    if (e.feasible() && e.name() != "heterog") {
      EXPECT_TRUE(heterog->feasible());
      EXPECT_LE(heterog->step_time_s(), e.step_time_s()) << e.name();
    }
  }
  if (Heterogeneous(*topo)) {
    for (const std::string method : {"ring", "ps"}) {
      const auto* even = Find(r, "dp-even-" + method);
      const auto* prop = Find(r, "dp-proportional-" + method);
      ASSERT_NE(even, nullptr);
      ASSERT_NE(prop, nullptr);
      if (even->feasible()) {
        EXPECT_TRUE(prop->feasible()) << method;
        EXPECT_LE(prop->step_time_s(), even->step_time_s()) << method;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ZooTimesClusters, Invariants, ::testing::ValuesIn(AllCases()),
                         [](const auto& info) {
                           return info.param.model + "_" + info.param.cluster;
                         });

// The proportional split is a real split, not the even one in disguise:
// on a heterogeneous cluster with a compute-bound model it gives the faster
// devices more rows and is strictly faster.
TEST(Proportional, GivesFasterDevicesMoreRows) {
  World w;
  ASSERT_NO_FATAL_FAILURE(MakeWorld("heterog_testbed", "resnet50", &w));
  const Topology* topo = &w.topo;
  const Graph* g = &w.graph;
  PlanOptions o;
  o.global_batch = 256;
  o.strategy = "dp-proportional-ring";
  absl::StatusOr<PlanResult> plan = Plan(*g, *topo, o);
  ASSERT_THAT(plan.status(), IsOk());
  const auto* prop = Find(plan->report, "dp-proportional-ring");
  o.strategy = "dp-even-ring";
  absl::StatusOr<PlanResult> even_plan = Plan(*g, *topo, o);
  ASSERT_THAT(even_plan.status(), IsOk());
  const auto* even = Find(even_plan->report, "dp-even-ring");
  ASSERT_TRUE(even->feasible() && prop->feasible());
  EXPECT_TRUE(prop->note().empty()) << prop->note();
  EXPECT_LT(prop->step_time_s(), 0.95 * even->step_time_s());
  std::map<std::string, int> rows;
  for (const auto& r : prop->strategy().groups(0).replicas()) rows[r.device()] = r.replicas();
  std::map<std::string, double> speed;
  absl::StatusOr<CostModel> cost = CostModel::Create(&*g, &*topo);
  ASSERT_THAT(cost.status(), IsOk());
  for (int d = 0; d < topo->num_devices(); ++d)
    speed[topo->device(d).id] = cost->speed(d).flops_per_s;
  for (const auto& [a, ra] : rows) {
    for (const auto& [b, rb] : rows) {
      if (speed[a] > 1.2 * speed[b]) {
        EXPECT_GT(ra, rb) << a << " vs " << b;
      }
    }
  }
  int total = 0;
  for (const auto& [d, n] : rows) total += n;
  EXPECT_EQ(total, 256);
}

// Parameter servers shard the optimizer state over the devices: where no
// split fits all-reduce's memory, the parameter-server baseline is split
// by its own (bert_large at batch 320 on HeteroG's testbed: 282 rows fit
// with all-reduce), faster devices given more rows, and so it is where
// all-reduce's split fills a device; where none fits either, it says so.
TEST(Proportional, ParameterServersAreSplitByTheirOwnMemory) {
  World w;
  ASSERT_NO_FATAL_FAILURE(MakeWorld("heterog_testbed", "bert_large", &w));
  auto plan = [&](const std::string& strategy, int64_t batch) {
    PlanOptions o;
    o.global_batch = batch;
    o.strategy = strategy;
    absl::StatusOr<PlanResult> r = Plan(w.graph, w.topo, o);
    EXPECT_THAT(r.status(), IsOk());
    const auto* e = r.ok() ? Find(r->report, strategy) : nullptr;
    EXPECT_NE(e, nullptr);
    return e != nullptr ? *e : quilt::v1::StrategyEstimate();
  };
  const quilt::v1::StrategyEstimate ring = plan("dp-proportional-ring", 320);
  EXPECT_FALSE(ring.feasible());
  EXPECT_THAT(ring.infeasible_reason(), ::testing::HasSubstr("no split of the batch of 320"));
  const quilt::v1::StrategyEstimate ps = plan("dp-proportional-ps", 320);
  ASSERT_TRUE(ps.feasible()) << ps.infeasible_reason();
  std::map<std::string, int> rows;
  int total = 0;
  for (const auto& r : ps.strategy().groups(0).replicas()) {
    rows[r.device()] = r.replicas();
    total += r.replicas();
  }
  EXPECT_EQ(total, 320);
  EXPECT_GT(rows["v100-0/gpu:0"], rows["gtx1080ti-0/gpu:0"]);
  for (const auto& m : ps.memory()) EXPECT_LE(m.peak_bytes(), m.capacity_bytes()) << m.device();
  // Where all-reduce's split fits but holds a device at its memory, the
  // parameter servers' own split still gives the V100s more rows.
  auto rows_on = [](const quilt::v1::StrategyEstimate& e, const std::string& device) {
    for (const auto& r : e.strategy().groups(0).replicas()) {
      if (r.device() == device) return static_cast<int64_t>(r.replicas());
    }
    return int64_t{0};
  };
  const quilt::v1::StrategyEstimate ring288 = plan("dp-proportional-ring", 288);
  const quilt::v1::StrategyEstimate ps288 = plan("dp-proportional-ps", 288);
  ASSERT_TRUE(ring288.feasible()) << ring288.infeasible_reason();
  ASSERT_TRUE(ps288.feasible()) << ps288.infeasible_reason();
  EXPECT_GT(rows_on(ps288, "v100-0/gpu:0"), rows_on(ring288, "v100-0/gpu:0"));
  for (const auto& m : ps288.memory()) EXPECT_LE(m.peak_bytes(), m.capacity_bytes()) << m.device();
  const quilt::v1::StrategyEstimate none = plan("dp-proportional-ps", 400);
  EXPECT_FALSE(none.feasible());
  EXPECT_THAT(none.infeasible_reason(),
              ::testing::HasSubstr("fits the devices' memory with parameter servers either"));
}

// Without their own split (ps_split false: planning only all-reduce's
// baselines), parameter servers take all-reduce's; with it, where
// all-reduce's split holds a device at its memory, their own.
TEST(Proportional, ParameterServersOwnSplitOnlyWhenAsked) {
  World w;
  ASSERT_NO_FATAL_FAILURE(MakeWorld("heterog_testbed", "bert_large", &w));
  absl::StatusOr<CostModel> cost = CostModel::Create(&w.graph, &w.topo);
  ASSERT_THAT(cost.status(), IsOk());
  auto splits = [&](bool ps_split) {
    std::map<std::string, std::vector<int>> out;
    for (const NamedStrategy& ns : Baselines(w.graph, w.topo, *cost, 288, nullptr, ps_split)) {
      if (ns.strategy.groups_size() == 0) continue;
      for (const auto& r : ns.strategy.groups(0).replicas()) out[ns.name].push_back(r.replicas());
    }
    return out;
  };
  auto with = splits(true);
  auto without = splits(false);
  ASSERT_FALSE(with["dp-proportional-ring"].empty());
  EXPECT_EQ(without["dp-proportional-ring"], with["dp-proportional-ring"]);
  EXPECT_EQ(without["dp-proportional-ps"], with["dp-proportional-ring"]);
  EXPECT_NE(with["dp-proportional-ps"], with["dp-proportional-ring"]);
}

// The execution order is chosen per plan: each estimate is the faster of
// the two orders, and on a communication-heavy step lifting the gradients'
// producers hides communication behind the backward pass.
TEST(ExecutionOrder, PlanKeepsTheFasterOrder) {
  World w;
  ASSERT_NO_FATAL_FAILURE(MakeWorld("heterog_testbed", "transformer", &w));
  const Topology* topo = &w.topo;
  const Graph* g = &w.graph;
  absl::StatusOr<CostModel> cost = CostModel::Create(&*g, &*topo);
  ASSERT_THAT(cost.status(), IsOk());
  constexpr int64_t kBatch = 64;
  for (const std::string name : {"dp-even-ring", "dp-proportional-ring", "dp-even-ps"}) {
    SCOPED_TRACE(name);
    PlanOptions o;
    o.global_batch = kBatch;
    o.strategy = name;
    absl::StatusOr<PlanResult> plan = Plan(*g, *topo, o);
    ASSERT_THAT(plan.status(), IsOk());
    const auto* reported = Find(plan->report, name);
    ASSERT_NE(reported, nullptr);
    ASSERT_TRUE(reported->feasible());
    // `ns` simulated alone in `order`.
    auto alone = [&](NamedStrategy ns, quilt::v1::ExecutionOrder order) {
      ns.strategy.set_order(order);
      return Estimate(*g, *topo, *cost, ns, kBatch, 0, nullptr, nullptr, false, false);
    };
    std::map<quilt::v1::ExecutionOrder, quilt::v1::StrategyEstimate> by_order;
    for (const NamedStrategy& ns : Baselines(*g, *topo, *cost, kBatch)) {
      if (ns.name != name) continue;
      for (auto order : kExecutionOrders) {
        absl::StatusOr<quilt::v1::StrategyEstimate> e = alone(ns, order);
        ASSERT_THAT(e.status(), IsOk());
        by_order[order] = *e;
      }
    }
    ASSERT_EQ(by_order.size(), 2u);
    const auto& cp = by_order[quilt::v1::EXECUTION_ORDER_CRITICAL_PATH];
    const auto& tf = by_order[quilt::v1::EXECUTION_ORDER_TRANSFERS_FIRST];
    quilt::v1::StrategyEstimate faster = tf.step_time_s() < cp.step_time_s() ? tf : cp;
    // All-reduce baselines are also simulated in buckets, the faster kept
    // (bucketed_baselines.h).
    for (const NamedStrategy& v : BucketedVariants(*g, Baselines(*g, *topo, *cost, kBatch), {})) {
      if (v.name != BucketedName(name)) continue;
      for (auto order : kExecutionOrders) {
        absl::StatusOr<quilt::v1::StrategyEstimate> e = alone(v, order);
        ASSERT_THAT(e.status(), IsOk());
        if (e->step_time_s() < faster.step_time_s()) faster = *e;
      }
    }
    EXPECT_DOUBLE_EQ(reported->step_time_s(), faster.step_time_s());
    EXPECT_EQ(reported->strategy().order(), faster.strategy().order());
    EXPECT_EQ(reported->strategy().aggregations(0).bucket() != 0,
              faster.strategy().aggregations(0).bucket() != 0);
    // The transformer's gradients take about as long to all-reduce as its
    // backward pass takes to compute: produced as the links can take them,
    // they hide. (With parameter servers the pushes compete with the pulls
    // and either order can win.)
    if (name.find("ring") != std::string::npos) {
      EXPECT_LT(tf.step_time_s(), 0.95 * cp.step_time_s());
      EXPECT_LT(tf.exposed_communication_s(), cp.exposed_communication_s());
    }
  }
}

// Bytes over capacity, summed over the devices.
int64_t Overflow(const quilt::v1::StrategyEstimate& e) {
  int64_t over = 0;
  for (const auto& m : e.memory()) {
    if (m.capacity_bytes() > 0) over += std::max<int64_t>(0, m.peak_bytes() - m.capacity_bytes());
  }
  return over;
}

// A plan whose step differs from the best baseline's by rounding alone is
// not "faster": the baseline is kept and the note says so. (resnet50 at
// batch 800 on HeteroG's testbed: the search's plan summed the baseline's
// times in another order, 2e-16 of the step less, and was called
// "2.2e-14 % faster (0 µs less per step)".)
TEST(Plan, AStepEqualButForRoundingKeepsTheBaseline) {
  World w;
  ASSERT_NO_FATAL_FAILURE(MakeWorld("heterog_testbed", "resnet50", &w));
  PlanOptions o;
  o.global_batch = 800;
  absl::StatusOr<PlanResult> plan = Plan(w.graph, w.topo, o);
  ASSERT_THAT(plan.status(), IsOk());
  const auto* h = Find(plan->report, "heterog");
  ASSERT_NE(h, nullptr);
  double best_baseline = 0;
  for (const auto& e : plan->report.estimates()) {
    if (e.name() == "heterog" || !e.feasible()) continue;
    if (best_baseline == 0 || e.step_time_s() < best_baseline) best_baseline = e.step_time_s();
  }
  ASSERT_GT(best_baseline, 0);
  if (h->step_time_s() < best_baseline) {
    // Faster: by a saving, not by rounding.
    EXPECT_GT(best_baseline - h->step_time_s(), 1e-9 * best_baseline) << h->note();
    EXPECT_EQ(plan->report.best(), "heterog");
  } else {
    EXPECT_TRUE(absl::StrContains(h->note(), "is as fast or faster and is kept")) << h->note();
  }
  EXPECT_FALSE(absl::StrContains(h->note(), "(0 µs less per step)")) << h->note();
}

// Where nothing fits, the planner's row is the plan nearest to fitting: the
// search ranks plans over memory on its coarse model, and its best there
// (gpt2 at batch 100 on HeteroG's testbed) is further over in full than
// the baseline it started from.
TEST(Plan, NothingFits_ThePlannersPlanIsTheNearestToFitting) {
  World w;
  ASSERT_NO_FATAL_FAILURE(MakeWorld("heterog_testbed", "gpt2", &w));
  PlanOptions o;
  o.global_batch = 100;
  o.search.time_budget_s = 1;
  o.accumulate = false;  // (micro-batches fit: accumulation_test.cc)
  absl::StatusOr<PlanResult> plan = Plan(w.graph, w.topo, o);
  ASSERT_THAT(plan.status(), IsOk());
  EXPECT_EQ(plan->report.best(), "");
  const auto* h = Find(plan->report, "heterog");
  ASSERT_NE(h, nullptr);
  EXPECT_FALSE(h->feasible());
  for (const auto& e : plan->report.estimates()) {
    if (e.name() == "heterog" || e.step_time_s() <= 0) continue;
    EXPECT_LE(Overflow(*h), Overflow(e)) << e.name();
  }
  // The report suggests the largest batch data parallelism fits, and the
  // proportional split fits it.
  const int64_t limit = plan->report.data_parallel_batch_limit();
  EXPECT_GT(limit, 0);
  EXPECT_LT(limit, o.global_batch);
  // (A hybrid plan's batch is named only above it.)
  const int64_t hybrid = plan->report.hybrid_batch_limit();
  EXPECT_TRUE(hybrid == 0 || (hybrid > limit && hybrid < o.global_batch)) << hybrid;
  o.global_batch = limit;
  o.strategy = "dp-proportional-ring";
  absl::StatusOr<PlanResult> fits = Plan(w.graph, w.topo, o);
  ASSERT_THAT(fits.status(), IsOk());
  EXPECT_EQ(fits->report.best(), "dp-proportional-ring") << "at batch " << limit;
  EXPECT_EQ(fits->report.data_parallel_batch_limit(), 0);
}

TEST(Plan, RejectsBadRequests) {
  absl::StatusOr<quilt::v1::ClusterSpec> spec =
      LoadClusterSpec("config/clusters/nvlink_2x4_v100.textproto");
  ASSERT_THAT(spec.status(), IsOk());
  absl::StatusOr<Topology> topo = Topology::Build(*spec);
  ASSERT_THAT(topo.status(), IsOk());
  absl::StatusOr<Graph> g = zoo::BuildZooModel("mlp");
  ASSERT_THAT(g.status(), IsOk());
  PlanOptions o;
  o.global_batch = 16;
  EXPECT_THAT(Plan(*g, *topo, o).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("training graph")));
  TrainingOptions to;
  to.loss = LossType::kSoftmaxCrossEntropy;
  to.optimizer.kind = OptimizerSpec::Kind::kSgd;
  ASSERT_THAT(BuildTrainingGraph(&*g, to), IsOk());
  o.strategy = "dp-magic";
  EXPECT_THAT(Plan(*g, *topo, o).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("dp-even-ring")));
  o.strategy = "all";
  o.global_batch = 0;
  EXPECT_THAT(Plan(*g, *topo, o).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

// A model whose parameters and optimizer state outweigh every device's
// memory together fits no plan at any batch: an error naming both sizes,
// not a search of the whole time budget.
TEST(Plan, StateLargerThanTheClusterIsRefusedAtOnce) {
  absl::StatusOr<quilt::v1::ClusterSpec> spec =
      LoadClusterSpec("config/clusters/nvlink_2x4_v100.textproto");
  ASSERT_THAT(spec.status(), IsOk());
  for (auto& node : *spec->mutable_nodes()) {
    for (auto& d : *node.mutable_devices()) d.set_memory_bytes(64 << 10);
  }
  absl::StatusOr<Topology> topo = Topology::Build(*spec);
  ASSERT_THAT(topo.status(), IsOk());
  absl::StatusOr<Graph> g = zoo::BuildZooModel("mlp");
  ASSERT_THAT(g.status(), IsOk());
  TrainingOptions to;
  to.loss = LossType::kSoftmaxCrossEntropy;
  to.optimizer.kind = OptimizerSpec::Kind::kSgd;
  ASSERT_THAT(BuildTrainingGraph(&*g, to), IsOk());
  PlanOptions o;
  o.global_batch = 16;
  EXPECT_THAT(Plan(*g, *topo, o).status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       ::testing::AllOf(::testing::HasSubstr("parameters and optimizer state"),
                                        ::testing::HasSubstr("512.0KiB"))));
  // Enough memory for the state (if not for a step): planned, not refused.
  for (auto& node : *spec->mutable_nodes()) {
    for (auto& d : *node.mutable_devices()) d.set_memory_bytes(int64_t{4} << 20);
  }
  topo = Topology::Build(*spec);
  ASSERT_THAT(topo.status(), IsOk());
  o.search.time_budget_s = 1;
  EXPECT_THAT(Plan(*g, *topo, o).status(), IsOk());
}

// gpt2 at 16 rows on HeteroG's testbed: whole samples leave the GTX 1080
// Tis two rows each where a split by speed gives 1.7; the plan moves rows
// of weight gradients off them. What it reports holds: the moves are in
// the strategy, and the same strategy without them simulates slower by
// exactly the saving reported.
TEST(Plan, WeightGradientMovesAreKeptOnlyForWhatTheySave) {
  World w;
  ASSERT_NO_FATAL_FAILURE(MakeWorld("heterog_testbed", "gpt2", &w));
  absl::StatusOr<CostModel> cost = CostModel::Create(&w.graph, &w.topo);
  ASSERT_THAT(cost.status(), IsOk());
  PlanOptions o;
  o.global_batch = 16;
  o.strategy = "heterog";
  absl::StatusOr<PlanResult> plan = Plan(w.graph, w.topo, o);
  ASSERT_THAT(plan.status(), IsOk());
  const auto* h = Find(plan->report, "heterog");
  ASSERT_NE(h, nullptr);
  ASSERT_TRUE(h->feasible());
  const quilt::v1::SearchSummary& s = h->search();
  ASSERT_FALSE(s.weight_gradient_moves().empty());
  EXPECT_GT(s.weight_gradient_saved_s(), 0);
  int moved_groups = 0;
  quilt::v1::Strategy without = h->strategy();
  // The explanation says which groups the moves changed after the search.
  std::set<int> said;
  for (const auto& d : s.decisions()) {
    if (absl::StrContains(d.changed_after_search(), "weight gradients' rows moved")) {
      said.insert(d.group());
    }
  }
  for (auto& grp : *without.mutable_groups()) {
    EXPECT_EQ(said.count(grp.group()) > 0, !grp.weight_gradient_replicas().empty()) << grp.group();
    if (grp.weight_gradient_replicas().empty()) continue;
    ++moved_groups;
    // Same devices, the same rows in all, some elsewhere.
    ASSERT_EQ(grp.weight_gradient_replicas_size(), grp.replicas_size());
    int64_t rows = 0;
    for (const auto& r : grp.weight_gradient_replicas()) rows += r.replicas();
    EXPECT_EQ(rows, o.global_batch);
    grp.clear_weight_gradient_replicas();
  }
  EXPECT_GT(moved_groups, 0);
  EXPECT_THAT(s.weight_gradient_moves(),
              ::testing::HasSubstr(absl::StrCat(" of ", moved_groups, " group")));
  absl::StatusOr<quilt::v1::StrategyEstimate> plain =
      Estimate(w.graph, w.topo, *cost, NamedStrategy{"plain", without, ""}, o.global_batch, 0,
               nullptr, nullptr, false, /*both_orders=*/true);
  ASSERT_THAT(plain.status(), IsOk());
  EXPECT_NEAR(plain->step_time_s(), h->step_time_s() + s.weight_gradient_saved_s(),
              1e-9 * plain->step_time_s());
}

}  // namespace
}  // namespace quilt
