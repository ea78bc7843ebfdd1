// The fastest-nodes baselines: prefixes ordered by the devices' modeled
// speed, pair links kept only between kept devices, and the fastest
// data-parallel baseline over them, which beats the whole cluster's where
// a slow node sits behind a slow link.
#include "bench/node_subsets.h"

#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "src/cluster/topology.h"
#include "src/graph/zoo_training.h"
#include "src/planner/plan.h"

namespace quilt {
namespace {

// A T4 node listed first and a V100 node, 1 Gbit/s between them, and a
// pair link between their devices.
quilt::v1::ClusterSpec SlowPair() {
  quilt::v1::ClusterSpec spec;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(
        name: "slow-pair"
        nodes {
          node_id: "t"
          hostname: "t"
          devices {
            id: "t/gpu:0"
            kind: DEVICE_KIND_GPU
            index: 0
            peak_fp32_flops_per_s: 8.1e12
            efficiency: 0.25
            memory_bandwidth_bytes_per_s: 3.2e11
            memory_bytes: 17179869184
          }
          intra_node_link { bandwidth_bytes_per_s: 1.2e10 latency_s: 5e-6 kind: "pcie" }
          nic { bandwidth_bytes_per_s: 1.25e8 latency_s: 5e-5 kind: "ethernet" }
        }
        nodes {
          node_id: "v"
          hostname: "v"
          devices {
            id: "v/gpu:0"
            kind: DEVICE_KIND_GPU
            index: 0
            peak_fp32_flops_per_s: 1.57e13
            efficiency: 0.2458
            memory_bandwidth_bytes_per_s: 9e11
            memory_bytes: 17179869184
          }
          intra_node_link { bandwidth_bytes_per_s: 1.2e10 latency_s: 5e-6 kind: "pcie" }
          nic { bandwidth_bytes_per_s: 1.25e8 latency_s: 5e-5 kind: "ethernet" }
        }
        pair_links {
          src_device: "t/gpu:0"
          dst_device: "v/gpu:0"
          link { bandwidth_bytes_per_s: 1.25e8 latency_s: 5e-5 kind: "ethernet" }
        }
      )pb",
      &spec));
  return spec;
}

TEST(NodeSubsets, PrefixesStartFromTheFastestNode) {
  const std::vector<quilt::v1::ClusterSpec> prefixes = FastestNodePrefixes(SlowPair());
  ASSERT_EQ(prefixes.size(), 1u);
  ASSERT_EQ(prefixes[0].nodes_size(), 1);
  EXPECT_EQ(prefixes[0].nodes(0).node_id(), "v");
  // The pair link names a device left out: dropped, so the topology builds.
  EXPECT_EQ(prefixes[0].pair_links_size(), 0);
  EXPECT_TRUE(Topology::Build(prefixes[0]).ok());
}

TEST(NodeSubsets, TheFastNodeAloneBeatsTheWholeClusterBehindASlowLink) {
  auto g = zoo::ZooTrainingGraph("resnet50");
  ASSERT_TRUE(g.ok());
  const nlohmann::json best = BestNodeSubsetBaseline(*g, SlowPair(), 16);
  ASSERT_FALSE(best.is_null());
  EXPECT_EQ(best["nodes"], 1);
  EXPECT_EQ(best["devices"], 1);
  // Data parallelism over both nodes all-reduces resnet50's gradients
  // (about 100 MB) over 1 Gbit/s: slower than the V100 alone.
  absl::StatusOr<Topology> whole = Topology::Build(SlowPair());
  ASSERT_TRUE(whole.ok());
  PlanOptions po;
  po.global_batch = 16;
  po.strategy = "dp-proportional-ring";
  absl::StatusOr<PlanResult> plan = Plan(*g, *whole, po);
  ASSERT_TRUE(plan.ok());
  for (const auto& e : plan->report.estimates()) {
    if (e.feasible()) EXPECT_LT(best["step_s"].get<double>(), e.step_time_s()) << e.name();
  }
}

TEST(NodeSubsets, OneNodeHasNoSubset) {
  quilt::v1::ClusterSpec one = SlowPair();
  one.mutable_nodes()->DeleteSubrange(0, 1);
  one.clear_pair_links();
  EXPECT_TRUE(FastestNodePrefixes(one).empty());
  auto g = zoo::ZooTrainingGraph("resnet50");
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(BestNodeSubsetBaseline(*g, one, 16).is_null());
}

}  // namespace
}  // namespace quilt
