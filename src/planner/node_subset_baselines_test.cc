// Data parallelism over the fastest nodes alone: each prefix of the nodes
// by their devices' mean speed gets the speed-proportional split over its
// devices only (every row of the batch, none elsewhere), with all-reduce
// and parameter servers; and Plan's heterog plan is never slower than any
// of them simulated in full (a 26-device cluster where one is faster than
// the search's plan and than every baseline over all the devices).
#include "src/planner/node_subset_baselines.h"

#include <set>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "src/cluster/cluster_spec.h"
#include "src/common/status_matchers.h"
#include "src/planner/plan.h"
#include "src/planner/planner_test_util.h"

namespace quilt {
namespace {

std::unique_ptr<testing::World> SubsetWins(const std::string& model) {
  absl::StatusOr<quilt::v1::ClusterSpec> spec =
      LoadClusterSpec("test/fixtures/clusters/subset_wins.textproto");
  EXPECT_THAT(spec.status(), IsOk());
  if (!spec.ok()) return nullptr;
  return testing::Make(model, *spec);
}

// The node subsets of `w` at `batch`, by the baselines' load model.
std::vector<NamedStrategy> SubsetsOf(const testing::World& w, int64_t batch) {
  absl::StatusOr<RowLoadModel> load = RowLoadModel::Fit(w.graph, *w.cost, w.topo, batch);
  EXPECT_THAT(load.status(), IsOk());
  if (!load.ok()) return {};
  return NodeSubsetBaselines(w.graph, w.topo, *w.cost, *load, batch);
}

TEST(NodeSubsetBaselines, EachSplitsTheBatchOverTheFastestNodesAlone) {
  auto w = SubsetWins("gpt2");
  ASSERT_NE(w, nullptr);
  const int64_t batch = 52;
  const std::vector<NamedStrategy> subsets = SubsetsOf(*w, batch);
  ASSERT_FALSE(subsets.empty());
  // Each node's devices' mean speed.
  std::map<std::string, double> mean;
  for (int node = 0; node < w->topo.num_nodes(); ++node) {
    double s = 0;
    for (int d : w->topo.NodeDevices(node)) s += w->cost->speed(d).flops_per_s;
    mean[w->topo.node_id(node)] = s / w->topo.NodeDevices(node).size();
  }
  std::set<std::string> names;
  for (const NamedStrategy& ns : subsets) {
    EXPECT_TRUE(names.insert(ns.name).second) << ns.name;
    EXPECT_TRUE(absl::StartsWith(ns.name, "dp-proportional-ring over ") ||
                absl::StartsWith(ns.name, "dp-proportional-ps over "))
        << ns.name;
    ASSERT_EQ(ns.strategy.groups_size(), 1);
    int64_t rows = 0;
    std::set<std::string> used_nodes;
    for (const auto& r : ns.strategy.groups(0).replicas()) {
      rows += r.replicas();
      used_nodes.insert(w->topo.node_id(w->topo.device(w->topo.DeviceIndex(r.device())).node));
    }
    EXPECT_EQ(rows, batch) << ns.name;
    // Not every node; every node used at least as fast (by its mean) as
    // every node left out.
    EXPECT_LT(used_nodes.size(), static_cast<size_t>(w->topo.num_nodes())) << ns.name;
    for (const auto& [node, speed] : mean) {
      if (used_nodes.count(node)) continue;
      for (const std::string& used : used_nodes) EXPECT_GE(mean[used], speed) << ns.name;
    }
  }
}

TEST(NodeSubsetBaselines, NoneOnOneNodeOrOnLargeClusters) {
  auto big = testing::OnShippedCluster("resnet50", "hap_cluster");
  ASSERT_NE(big, nullptr);
  ASSERT_GT(big->topo.num_devices(), kNodeSubsetDevices);
  EXPECT_TRUE(SubsetsOf(*big, 512).empty());
  quilt::v1::ClusterSpec spec = testing::TwoNodes();
  spec.mutable_nodes()->RemoveLast();
  auto single = testing::Make("resnet50", spec);
  ASSERT_EQ(single->topo.num_nodes(), 1);
  EXPECT_TRUE(SubsetsOf(*single, 32).empty());
}

TEST(NodeSubsetBaselines, ThePlanIsNeverSlowerThanAnyOfThem) {
  auto w = SubsetWins("gpt2");
  ASSERT_NE(w, nullptr);
  const int64_t batch = 52;
  PlanOptions o;
  o.global_batch = batch;
  o.strategy = "all";
  o.search.time_budget_s = 30;
  // Each simulated in full beside the plan, as a strategy of the caller's.
  for (NamedStrategy ns : SubsetsOf(*w, batch)) {
    ns.name = "given " + ns.name;
    ns.strategy.set_name(ns.name);
    o.given.push_back(ns);
  }
  absl::StatusOr<PlanResult> plan = Plan(w->graph, w->topo, o);
  ASSERT_THAT(plan.status(), IsOk());
  const quilt::v1::StrategyEstimate* h = testing::FindEstimate(plan->report, "heterog");
  ASSERT_NE(h, nullptr);
  ASSERT_TRUE(h->feasible());
  bool a_subset_beats_the_baselines = false;
  double fastest_baseline = 0;
  for (const auto& e : plan->report.estimates()) {
    if (!e.feasible() || e.name() == "heterog") continue;
    EXPECT_LE(h->step_time_s(), e.step_time_s()) << e.name();
    if (!absl::StartsWith(e.name(), "given ")) {
      if (fastest_baseline == 0 || e.step_time_s() < fastest_baseline) {
        fastest_baseline = e.step_time_s();
      }
    }
  }
  for (const auto& e : plan->report.estimates()) {
    if (absl::StartsWith(e.name(), "given ") && e.feasible()) {
      a_subset_beats_the_baselines |= e.step_time_s() < fastest_baseline;
    }
  }
  // (The case this cluster is here for.)
  EXPECT_TRUE(a_subset_beats_the_baselines);
}

}  // namespace
}  // namespace quilt
