// The search may place groups on the nodes of the faster NICs alone (each
// NIC speed but the slowest gives a set, on clusters of three nodes or
// more), and so finds the plan that leaves the slow NICs out where that is
// faster.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/planner/baselines.h"
#include "src/planner/heterog.h"
#include "src/planner/plan.h"
#include "src/planner/planner_test_util.h"
#include "src/planner/search_space.h"

namespace quilt {
namespace {

// `nodes` nodes of 8 equal GPUs; node n's NIC is nics[n % nics.size()]
// bytes/s.
quilt::v1::ClusterSpec Tiered(int nodes, const std::vector<double>& nics) {
  quilt::v1::ClusterSpec spec;
  spec.set_name("tiered");
  for (int n = 0; n < nodes; ++n) {
    auto* node = spec.add_nodes();
    node->set_node_id("n" + std::to_string(n));
    for (int d = 0; d < 8; ++d) {
      auto* dev = node->add_devices();
      dev->set_id(node->node_id() + "/gpu:" + std::to_string(d));
      dev->set_kind(quilt::v1::DEVICE_KIND_GPU);
      dev->set_index(d);
      dev->set_peak_fp32_flops_per_s(1.4e13);
      dev->set_efficiency(0.4);
      dev->set_memory_bandwidth_bytes_per_s(9e11);
      dev->set_memory_bytes(int64_t{16} << 30);
    }
    node->mutable_intra_node_link()->set_bandwidth_bytes_per_s(1.2e10);
    node->mutable_nic()->set_bandwidth_bytes_per_s(nics[n % nics.size()]);
  }
  return spec;
}

// The space's placements: label → devices.
std::map<std::string, std::vector<std::string>> Placements(const testing::World& w, int64_t batch) {
  absl::StatusOr<std::unique_ptr<CoarseModel>> coarse =
      CoarsenForSearch(w.graph, w.topo, *w.cost, batch, 0);
  EXPECT_THAT(coarse.status(), IsOk());
  std::map<std::string, std::vector<std::string>> out;
  if (!coarse.ok()) return out;
  SearchSpace space(w.topo, *w.cost, **coarse, batch, 0.92);
  for (const PlacementOption& o : space.options()) {
    for (const auto& [d, r] : o.replicas) out[o.label].push_back(w.topo.device(d).id);
  }
  return out;
}

constexpr double k10Gbit = 1.25e9, k25Gbit = 3.125e9, k100Gbit = 1.25e10;

TEST(NicTiers, EachNicSpeedButTheSlowestIsAPlacement) {
  // 72 devices: nodes 0, 3, 6 on 10 Gbit/s, 1, 4, 7 on 25, 2, 5, 8 on 100.
  auto w = testing::Make("mlp", Tiered(9, {k10Gbit, k25Gbit, k100Gbit}));
  const auto placements = Placements(*w, 576);
  auto devices_of = [](std::vector<int> nodes) {
    std::vector<std::string> ids;
    for (int n : nodes) {
      for (int d = 0; d < 8; ++d)
        ids.push_back("n" + std::to_string(n) + "/gpu:" + std::to_string(d));
    }
    std::sort(ids.begin(), ids.end());
    return ids;
  };
  auto sorted = [](std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  ASSERT_EQ(placements.count("nodes on NICs of 25 Gbit/s or more"), 1u);
  EXPECT_EQ(sorted(placements.at("nodes on NICs of 25 Gbit/s or more")),
            devices_of({1, 2, 4, 5, 7, 8}));
  ASSERT_EQ(placements.count("nodes on NICs of 100 Gbit/s or more"), 1u);
  EXPECT_EQ(sorted(placements.at("nodes on NICs of 100 Gbit/s or more")), devices_of({2, 5, 8}));
  // Not the slowest speed (that is every node); none where the NICs are
  // equal.
  for (const auto& [label, ids] : placements) {
    EXPECT_THAT(label, ::testing::Not(::testing::HasSubstr("10 Gbit/s"))) << label;
  }
  auto equal = testing::Make("mlp", Tiered(4, {k25Gbit}));
  for (const auto& [label, ids] : Placements(*equal, 256)) {
    EXPECT_THAT(label, ::testing::Not(::testing::HasSubstr("NICs of"))) << label;
  }
  // Three nodes of 8: the 24 devices' sets too.
  auto three = testing::Make("mlp", Tiered(3, {k10Gbit, k25Gbit, k100Gbit}));
  const auto small = Placements(*three, 192);
  ASSERT_EQ(small.count("nodes on NICs of 25 Gbit/s or more"), 1u);
  EXPECT_EQ(sorted(small.at("nodes on NICs of 25 Gbit/s or more")), devices_of({1, 2}));
}

// The step of `strategy` ("heterog", or a given one) in full.
double Step(const testing::World& w, int64_t batch, const std::string& strategy,
            const std::vector<NamedStrategy>& given = {}) {
  PlanOptions o;
  o.global_batch = batch;
  o.strategy = strategy;
  o.given = given;
  absl::StatusOr<PlanResult> r = Plan(w.graph, w.topo, o);
  EXPECT_THAT(r.status(), IsOk());
  if (!r.ok()) return 0;
  for (const auto& e : r->report.estimates()) {
    if (e.feasible()) return e.step_time_s();
  }
  return 0;
}

TEST(NicTiers, ThePlanIsAtLeastAsFastAsDataParallelismOnTheFasterNicsAlone) {
  // 72 devices on 10, 25 and 100 Gbit/s NICs (none far below the typical
  // 25: no set leaves out slow NICs): vgg19's 548 MiB of gradients over
  // every node go at 10 Gbit/s.
  auto w = testing::Make("vgg19", Tiered(9, {k10Gbit, k25Gbit, k100Gbit}));
  const int64_t batch = 576;
  quilt::v1::Strategy even;
  for (const NamedStrategy& ns : Baselines(w->graph, w->topo, *w->cost, batch)) {
    if (ns.name == "dp-even-ring") even = ns.strategy;
  }
  ASSERT_EQ(even.groups_size(), 1);
  // dp-even-ring's strategy over the nodes of NICs at least `tier` (0:
  // 10 Gbit/s, 1: 25, 2: 100), with the two-level all-reduce.
  auto on_tiers = [&](int tier) {
    quilt::v1::Strategy s = even;
    s.set_name("tier-" + std::to_string(tier));
    auto* group = s.mutable_groups(0);
    group->clear_replicas();
    for (int n = 0; n < 9; ++n) {
      if (n % 3 < tier) continue;
      for (int d = 0; d < 8; ++d) {
        auto* r = group->add_replicas();
        r->set_device("n" + std::to_string(n) + "/gpu:" + std::to_string(d));
        r->set_replicas(1);
      }
    }
    for (auto& a : *s.mutable_aggregations()) {
      a.set_method(quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE);
    }
    return Step(*w, batch, "given", {NamedStrategy{s.name(), s, ""}});
  };
  const double faster_nics = std::min(on_tiers(1), on_tiers(2));
  const double every_node = std::min(on_tiers(0), Step(*w, batch, "dp-even-ring"));
  const double heterog = Step(*w, batch, "heterog");
  ASSERT_GT(faster_nics, 0);
  // The slow NICs are what data parallelism over every node waits for.
  EXPECT_LT(faster_nics, 0.8 * every_node);
  EXPECT_GT(heterog, 0);
  EXPECT_LE(heterog, faster_nics * (1 + 1e-9));
}

}  // namespace
}  // namespace quilt
