// The all-reduce baselines are also simulated with their gradients in
// frameworks' buckets, and keep the faster: compared with each way
// simulated on its own, on models where either wins.
#include "src/planner/bucketed_baselines.h"

#include <limits>
#include <set>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/planner/plan.h"
#include "src/planner/planner_test_util.h"

namespace quilt {
namespace {

using testing::FindEstimate;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::OnShippedCluster;
using testing::World;

// The fastest of `ns` over both execution orders, simulated alone.
double Fastest(const World& w, const NamedStrategy& ns, int64_t batch) {
  double best = std::numeric_limits<double>::infinity();
  for (auto order :
       {quilt::v1::EXECUTION_ORDER_CRITICAL_PATH, quilt::v1::EXECUTION_ORDER_TRANSFERS_FIRST}) {
    NamedStrategy copy = ns;
    copy.strategy.set_order(order);
    absl::StatusOr<quilt::v1::StrategyEstimate> e =
        Estimate(w.graph, w.topo, *w.cost, copy, batch, 0, nullptr, nullptr, false, false);
    EXPECT_THAT(e.status(), IsOk());
    if (e.ok() && e->feasible()) best = std::min(best, e->step_time_s());
  }
  return best;
}

struct BothWays {
  double one_by_one = 0;
  double bucketed = 0;
  quilt::v1::StrategyEstimate reported;
};

// `name` planned, and simulated alone both ways.
BothWays PlanBothWays(const World& w, const std::string& name, int64_t batch) {
  BothWays out;
  PlanOptions o;
  o.global_batch = batch;
  o.strategy = name;
  absl::StatusOr<PlanResult> plan = Plan(w.graph, w.topo, o);
  EXPECT_THAT(plan.status(), IsOk());
  if (!plan.ok()) return out;
  const quilt::v1::StrategyEstimate* e = FindEstimate(plan->report, name);
  EXPECT_NE(e, nullptr);
  if (e == nullptr) return out;
  out.reported = *e;
  const std::vector<NamedStrategy> baselines = Baselines(w.graph, w.topo, *w.cost, batch);
  for (const NamedStrategy& ns : baselines) {
    if (ns.name == name) out.one_by_one = Fastest(w, ns, batch);
  }
  for (const NamedStrategy& v : BucketedVariants(w.graph, baselines, {})) {
    if (v.name == BucketedName(name)) out.bucketed = Fastest(w, v, batch);
  }
  return out;
}

// The transformer's many small gradients on HeteroG's testbed: buckets
// save more latency than they delay, and are kept, the note giving the
// time one collective per gradient takes.
TEST(BucketedBaselines, KeptWhereFaster) {
  auto w = OnShippedCluster("transformer", "heterog_testbed");
  ASSERT_NE(w, nullptr);
  const BothWays b = PlanBothWays(*w, "dp-proportional-ring", 64);
  ASSERT_GT(b.one_by_one, 0);
  ASSERT_GT(b.bucketed, 0);
  ASSERT_LT(b.bucketed, b.one_by_one);  // (the case this test is about)
  EXPECT_DOUBLE_EQ(b.reported.step_time_s(), b.bucketed);
  EXPECT_EQ(b.reported.strategy().name(), "dp-proportional-ring");
  std::set<int> buckets;
  for (const auto& a : b.reported.strategy().aggregations()) buckets.insert(a.bucket());
  EXPECT_EQ(buckets.count(0), 0u);
  EXPECT_GT(buckets.size(), 1u);
  EXPECT_THAT(b.reported.note(), HasSubstr("25 MiB buckets"));
  EXPECT_THAT(b.reported.note(), HasSubstr(absl::StrFormat("%.4g s", b.one_by_one)));
}

// resnet50 on the same cluster: its gradients summed one by one start
// sooner than a bucket fills, and stay so.
TEST(BucketedBaselines, OneByOneKeptWhereFaster) {
  auto w = OnShippedCluster("resnet50", "heterog_testbed");
  ASSERT_NE(w, nullptr);
  const BothWays b = PlanBothWays(*w, "dp-proportional-ring", 64);
  ASSERT_GT(b.one_by_one, 0);
  ASSERT_GT(b.bucketed, b.one_by_one);  // (the case this test is about)
  EXPECT_DOUBLE_EQ(b.reported.step_time_s(), b.one_by_one);
  for (const auto& a : b.reported.strategy().aggregations()) EXPECT_EQ(a.bucket(), 0);
  EXPECT_THAT(b.reported.note(), Not(HasSubstr("buckets")));
}

// Buckets follow the order gradients are made (the last layer's first),
// none over 25 MiB but for a gradient larger on its own; parameter-server
// baselines, those already bucketed and those that cannot be built get
// none, nor those already simulated.
TEST(BucketedBaselines, VariantsAsFrameworksFormThem) {
  auto w = OnShippedCluster("vgg19", "heterog_testbed");
  ASSERT_NE(w, nullptr);
  std::vector<NamedStrategy> list = Baselines(w->graph, w->topo, *w->cost, 64);
  list.push_back({"dp-proportional-ring over nothing", {}, "cannot be built"});
  const std::vector<NamedStrategy> variants = BucketedVariants(w->graph, list, {});
  std::set<std::string> names;
  for (const NamedStrategy& v : variants) names.insert(v.name);
  EXPECT_EQ(names, (std::set<std::string>{BucketedName("dp-even-ring"),
                                          BucketedName("dp-proportional-ring")}));
  std::map<int, int64_t> bytes;
  std::map<int, int> members;
  for (const auto& a : variants[0].strategy.aggregations()) {
    ASSERT_GT(a.bucket(), 0) << a.parameter();
    const TensorInfo* t = w->graph.FindTensor(a.parameter());
    ASSERT_NE(t, nullptr);
    bytes[a.bucket()] += t->shape.NumElements(1) * DTypeSize(t->dtype);
    ++members[a.bucket()];
  }
  EXPECT_GT(bytes.size(), 2u);
  for (const auto& [bucket, b] : bytes) {
    if (members[bucket] > 1) EXPECT_LE(b, kFrameworkBucketBytes) << bucket;
  }
  // The classifier's last weight (its gradient made first in the backward
  // pass) is in the first bucket, the first convolution's in the last.
  std::map<std::string, int> of;
  for (const auto& a : variants[0].strategy.aggregations()) of[a.parameter()] = a.bucket();
  EXPECT_EQ(of["classifier.6.weight"], 1);
  EXPECT_EQ(of["features.0.weight"], bytes.rbegin()->first);
  EXPECT_EQ(bytes.rbegin()->first, static_cast<int>(bytes.size()));
  // Already bucketed, or already simulated: none.
  EXPECT_TRUE(BucketedVariants(w->graph, variants, {}).empty());
  std::map<std::string, Evaluated> done;
  done["dp-even-ring"] = Evaluated{};
  done["dp-proportional-ring"] = Evaluated{};
  EXPECT_TRUE(BucketedVariants(w->graph, list, done).empty());
}

Evaluated Estimated(const std::string& name, bool feasible, double step_s) {
  Evaluated e;
  e.estimate.set_name(name);
  e.estimate.set_feasible(feasible);
  e.estimate.set_step_time_s(step_s);
  if (!feasible) e.estimate.set_infeasible_reason("out of memory: d0 needs more");
  e.estimate.mutable_strategy()->set_name(name);
  return e;
}

// A counterpart replaces its baseline where it fits and is faster, or
// where the baseline does not fit; it is dropped either way.
TEST(BucketedBaselines, KeepFasterMergesUnderTheBaselinesName) {
  std::map<std::string, Evaluated> done;
  done["a"] = Estimated("a", true, 2.0);
  done[BucketedName("a")] = Estimated(BucketedName("a"), true, 1.5);
  done["b"] = Estimated("b", true, 1.0);
  done[BucketedName("b")] = Estimated(BucketedName("b"), true, 1.2);
  done["c"] = Estimated("c", false, 0.5);
  done[BucketedName("c")] = Estimated(BucketedName("c"), true, 3.0);
  done["d"] = Estimated("d", true, 1.0);
  done[BucketedName("d")] = Estimated(BucketedName("d"), false, 0.1);
  KeepFasterBucketed(&done);
  ASSERT_EQ(done.size(), 4u);
  EXPECT_DOUBLE_EQ(done["a"].estimate.step_time_s(), 1.5);
  EXPECT_EQ(done["a"].estimate.name(), "a");
  EXPECT_EQ(done["a"].estimate.strategy().name(), "a");
  EXPECT_THAT(done["a"].estimate.note(), HasSubstr("one collective per gradient: 2 s"));
  EXPECT_DOUBLE_EQ(done["b"].estimate.step_time_s(), 1.0);
  EXPECT_TRUE(done["b"].estimate.note().empty());
  EXPECT_DOUBLE_EQ(done["c"].estimate.step_time_s(), 3.0);
  EXPECT_TRUE(done["c"].estimate.feasible());
  EXPECT_THAT(done["c"].estimate.note(),
              HasSubstr("one collective per gradient does not fit: out of memory"));
  EXPECT_DOUBLE_EQ(done["d"].estimate.step_time_s(), 1.0);
  EXPECT_TRUE(done["d"].estimate.feasible());
}

}  // namespace
}  // namespace quilt
