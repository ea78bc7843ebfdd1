// Cluster spec files (the shipped testbeds, text format and JSON), their
// validation errors, and the topology built from them: paths, bottlenecks
// and latencies.
#include "src/cluster/cluster_spec.h"

#include <cmath>
#include <fstream>
#include <limits>

#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "src/cluster/topology.h"
#include "src/common/status_matchers.h"
#include "src/testing/temp_dir.h"

namespace quilt {
namespace {

using ::testing::HasSubstr;

std::string Write(const testing::TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.File(name);
  std::ofstream(path) << text;
  return path;
}

struct Shipped {
  std::string file;
  int nodes;
  int devices;
  std::set<std::string> models;
};

TEST(ClusterSpec, ShippedTestbedsLoadWithTheirDevices) {
  const std::vector<Shipped> shipped = {
      {"heterog_testbed", 4, 8, {"Tesla V100 16GB", "GeForce GTX 1080 Ti", "Tesla P100 12GB"}},
      {"hap_cluster", 8, 64, {"Tesla V100 16GB", "Tesla P100 12GB"}},
      {"nvlink_2x4_v100", 2, 8, {"Tesla V100 16GB"}},
  };
  for (const Shipped& s : shipped) {
    SCOPED_TRACE(s.file);
    absl::StatusOr<quilt::v1::ClusterSpec> spec =
        LoadClusterSpec("config/clusters/" + s.file + ".textproto");
    ASSERT_THAT(spec.status(), IsOk());
    EXPECT_EQ(spec->nodes_size(), s.nodes);
    std::set<std::string> models;
    int devices = 0;
    for (const auto& n : spec->nodes()) {
      for (const auto& d : n.devices()) {
        ++devices;
        models.insert(d.model());
        EXPECT_GT(d.memory_bytes(), int64_t{8} << 30) << d.id();
      }
      EXPECT_GT(n.nic().bandwidth_bytes_per_s(), 0);
    }
    EXPECT_EQ(devices, s.devices);
    EXPECT_EQ(models, s.models);
  }
}

TEST(ClusterSpec, JsonAndTextFormatAreTheSameMessage) {
  absl::StatusOr<quilt::v1::ClusterSpec> text =
      LoadClusterSpec("config/clusters/heterog_testbed.textproto");
  ASSERT_THAT(text.status(), IsOk());
  std::string json;
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(*text, &json, opts).ok());
  testing::TempDir dir;
  absl::StatusOr<quilt::v1::ClusterSpec> from_json = LoadClusterSpec(Write(dir, "c.json", json));
  ASSERT_THAT(from_json.status(), IsOk());
  EXPECT_EQ(from_json->SerializeAsString(), text->SerializeAsString());
}

TEST(ClusterSpec, BadFilesNameTheFileAndTheProblem) {
  testing::TempDir dir;
  EXPECT_THAT(LoadClusterSpec(dir.File("absent.textproto")).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("absent.textproto")));
  EXPECT_THAT(
      LoadClusterSpec(Write(dir, "bad.textproto", "nodes { node_id: \"a\" devices {")).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad.textproto")));
  EXPECT_THAT(LoadClusterSpec(Write(dir, "bad.json", "{\"nodes\": [{\"node_id\": 3,}]")).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad.json")));
  EXPECT_THAT(LoadClusterSpec(Write(dir, "empty.textproto", "name: \"x\"")).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no nodes")));
}

quilt::v1::ClusterSpec Valid() {
  quilt::v1::ClusterSpec spec;
  for (int n = 0; n < 2; ++n) {
    auto* node = spec.add_nodes();
    node->set_node_id("n" + std::to_string(n));
    for (int d = 0; d < 2; ++d) {
      auto* dev = node->add_devices();
      dev->set_id(node->node_id() + "/gpu:" + std::to_string(d));
      dev->set_kind(quilt::v1::DEVICE_KIND_GPU);
      dev->set_index(d);
      dev->set_peak_fp32_flops_per_s(1e13);
      dev->set_efficiency(0.3);
      dev->set_memory_bandwidth_bytes_per_s(9e11);
      dev->set_memory_bytes(int64_t{16} << 30);
    }
    node->mutable_intra_node_link()->set_bandwidth_bytes_per_s(1e11);
    node->mutable_intra_node_link()->set_latency_s(2e-6);
    node->mutable_nic()->set_bandwidth_bytes_per_s(n == 0 ? 1.25e9 : 1.25e10);
    node->mutable_nic()->set_latency_s(1e-5);
  }
  return spec;
}

TEST(ClusterSpec, ValidationErrorsNameTheCulprit) {
  ASSERT_THAT(ValidateClusterSpec(Valid()), IsOk());
  {
    auto s = Valid();
    s.mutable_nodes(1)->mutable_devices(0)->set_id("n0/gpu:0");
    EXPECT_THAT(ValidateClusterSpec(s),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("n0/gpu:0")));
  }
  {
    // The id, the kind and the index agree.
    auto s = Valid();
    s.mutable_nodes(0)->mutable_devices(1)->set_index(0);
    EXPECT_THAT(ValidateClusterSpec(s),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("'n0/gpu:1' disagrees with its kind and index (GPU, index 0): "
                                   "its id should be 'n0/gpu:0'")));
    s = Valid();
    s.mutable_nodes(1)->mutable_devices(0)->set_kind(quilt::v1::DEVICE_KIND_CPU);
    EXPECT_THAT(ValidateClusterSpec(s), StatusIs(absl::StatusCode::kInvalidArgument,
                                                 HasSubstr("its id should be 'n1/cpu:0'")));
    s = Valid();
    s.mutable_nodes(1)->mutable_devices(1)->set_index(-1);
    s.mutable_nodes(1)->mutable_devices(1)->set_id("n1/gpu:-1");
    EXPECT_THAT(ValidateClusterSpec(s), StatusIs(absl::StatusCode::kInvalidArgument,
                                                 HasSubstr("'n1/gpu:-1' has a negative index")));
  }
  {
    auto s = Valid();
    s.mutable_nodes(0)->mutable_devices(1)->clear_memory_bytes();
    EXPECT_THAT(ValidateClusterSpec(s), StatusIs(absl::StatusCode::kInvalidArgument,
                                                 HasSubstr("'n0/gpu:1' has no memory_bytes")));
  }
  {
    auto s = Valid();
    s.mutable_nodes(0)->mutable_devices(0)->clear_peak_fp32_flops_per_s();
    EXPECT_THAT(ValidateClusterSpec(s),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'n0/gpu:0' has no speed")));
  }
  {
    auto s = Valid();
    auto* p = s.add_pair_links();
    p->set_src_device("n0/gpu:0");
    p->set_dst_device("n9/gpu:0");
    p->mutable_link()->set_bandwidth_bytes_per_s(1e9);
    EXPECT_THAT(ValidateClusterSpec(s),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown device")));
  }
  {
    auto s = Valid();
    *s.add_nodes() = s.nodes(0);
    EXPECT_THAT(ValidateClusterSpec(s),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("listed twice")));
  }
  {
    auto s = Valid();
    s.mutable_nodes(1)->mutable_nic()->set_bandwidth_bytes_per_s(-1);
    // Every node has a NIC: the error names the node whose is wrong.
    EXPECT_THAT(ValidateClusterSpec(s),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("node 'n1' nic's bandwidth_bytes_per_s must be a finite "
                                   "number >= 0, got -1")));
    s = Valid();
    s.mutable_nodes(0)->mutable_intra_node_link()->set_latency_s(120);
    EXPECT_THAT(ValidateClusterSpec(s),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("node 'n0' intra_node_link's latency_s is 120, outside")));
    s = Valid();
    auto* p = s.add_pair_links();
    p->set_src_device("n0/gpu:0");
    p->set_dst_device("n1/gpu:0");
    p->mutable_link()->set_bandwidth_bytes_per_s(1);
    EXPECT_THAT(ValidateClusterSpec(s),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("pair link n0/gpu:0 -> n1/gpu:0's bandwidth_bytes_per_s is 1, "
                                   "outside 1 KB/s to 10 TB/s")));
  }
  for (double bad : {std::nan(""), -1.0, std::numeric_limits<double>::infinity()}) {
    auto s = Valid();
    auto* t = s.mutable_nodes(0)->mutable_devices(0)->add_op_times();
    t->set_op("Gemm");
    t->set_batch(1);
    t->set_time_s(bad);
    EXPECT_THAT(ValidateClusterSpec(s),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("'n0/gpu:0' op_times[Gemm].time_s must be a finite number")));
  }
  {
    auto s = Valid();
    auto* t = s.mutable_nodes(0)->mutable_devices(0)->add_op_times();
    t->set_op("Gemm");
    t->set_time_s(1e-3);
    EXPECT_THAT(ValidateClusterSpec(s), StatusIs(absl::StatusCode::kInvalidArgument,
                                                 HasSubstr("op_times[Gemm].batch must be")));
  }
  {
    auto s = Valid();
    s.mutable_nodes(0)->mutable_devices(0)->set_measured_op_overhead_s(std::nan(""));
    EXPECT_THAT(ValidateClusterSpec(s),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("measured_op_overhead_s")));
  }
  // Pair links: not to a device itself, and with sane figures.
  auto pair = [](quilt::v1::ClusterSpec* s, const std::string& to, double bandwidth,
                 double latency) {
    auto* p = s->add_pair_links();
    p->set_src_device("n0/gpu:0");
    p->set_dst_device(to);
    p->mutable_link()->set_bandwidth_bytes_per_s(bandwidth);
    p->mutable_link()->set_latency_s(latency);
  };
  {
    auto s = Valid();
    pair(&s, "n0/gpu:0", 1e9, 1e-6);
    EXPECT_THAT(ValidateClusterSpec(s),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("to itself")));
  }
  {
    // Given twice (the one direction): which would count is not said.
    auto s = Valid();
    pair(&s, "n1/gpu:0", 1e4, 1e-6);
    pair(&s, "n1/gpu:0", 1e10, 1e-6);
    EXPECT_THAT(ValidateClusterSpec(s),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("pair link n0/gpu:0 -> n1/gpu:0 is given twice")));
  }
  for (auto [bandwidth, latency] :
       std::vector<std::pair<double, double>>{{std::nan(""), 1e-6},
                                              {std::numeric_limits<double>::infinity(), 1e-6},
                                              {1e9, -1},
                                              {1e9, std::nan("")},
                                              {1, 1e-6},
                                              {1e9, 1e6}}) {
    auto s = Valid();
    pair(&s, "n1/gpu:0", bandwidth, latency);
    EXPECT_THAT(ValidateClusterSpec(s),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("n0/gpu:0 -> n1/gpu:0")))
        << bandwidth << " " << latency;
  }
  // Absurd device figures (a unit mistake) are refused.
  for (double flops : {1e-30, 1e300}) {
    auto s = Valid();
    s.mutable_nodes(0)->mutable_devices(0)->set_peak_fp32_flops_per_s(flops);
    EXPECT_THAT(ValidateClusterSpec(s),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("peak_fp32_flops_per_s")));
  }
  {
    auto s = Valid();
    s.mutable_nodes(0)->mutable_devices(0)->set_efficiency(1e-300);
    EXPECT_THAT(ValidateClusterSpec(s),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("efficiency")));
  }
}

TEST(Topology, PathsTakeTheNarrowestLinkAndSumLatencies) {
  absl::StatusOr<Topology> t = Topology::Build(Valid());
  ASSERT_THAT(t.status(), IsOk());
  const int a0 = t->DeviceIndex("n0/gpu:0"), a1 = t->DeviceIndex("n0/gpu:1");
  const int b0 = t->DeviceIndex("n1/gpu:0");
  ASSERT_GE(std::min({a0, a1, b0}), 0);
  EXPECT_EQ(t->DeviceIndex("n7/gpu:0"), -1);
  const Path& intra = t->PathBetween(a0, a1);
  EXPECT_EQ(intra.resources.size(), 2u);  // a0's egress, a1's ingress
  EXPECT_DOUBLE_EQ(intra.bandwidth_bytes_per_s, 1e11);
  EXPECT_NEAR(intra.latency_s, 2e-6, 1e-15);
  const Path& inter = t->PathBetween(a0, b0);
  EXPECT_EQ(inter.resources.size(), 4u);                  // egress, NIC out, NIC in, ingress
  EXPECT_DOUBLE_EQ(inter.bandwidth_bytes_per_s, 1.25e9);  // n0's NIC
  EXPECT_NEAR(inter.latency_s, 2e-6 + 1e-5, 1e-15);
  EXPECT_NEAR(inter.Time(1.25e9), 1.0 + 2e-6 + 1e-5, 1e-12);
  EXPECT_TRUE(t->PathBetween(a0, a0).resources.empty());
  // Paths a0→b0 and a1→b0 share n0's NIC out.
  const Path& other = t->PathBetween(a1, b0);
  int shared = 0;
  for (int r : inter.resources)
    shared += std::count(other.resources.begin(), other.resources.end(), r);
  EXPECT_EQ(shared, 3);  // NIC out, NIC in, b0's ingress
}

TEST(Topology, PairLinksReplaceTheDefaultPath) {
  auto s = Valid();
  auto* p = s.add_pair_links();
  p->set_src_device("n0/gpu:0");
  p->set_dst_device("n1/gpu:1");
  p->mutable_link()->set_bandwidth_bytes_per_s(5e10);
  p->mutable_link()->set_latency_s(1e-6);
  absl::StatusOr<Topology> t = Topology::Build(s);
  ASSERT_THAT(t.status(), IsOk());
  const int a = t->DeviceIndex("n0/gpu:0"), b = t->DeviceIndex("n1/gpu:1");
  for (const Path* path : {&t->PathBetween(a, b), &t->PathBetween(b, a)}) {
    EXPECT_EQ(path->resources.size(), 1u);
    EXPECT_DOUBLE_EQ(path->bandwidth_bytes_per_s, 5e10);
    EXPECT_DOUBLE_EQ(path->latency_s, 1e-6);
  }
}

TEST(Topology, MissingLinksGetDocumentedDefaults) {
  auto s = Valid();
  s.mutable_nodes(0)->clear_nic();
  s.mutable_nodes(0)->clear_intra_node_link();
  absl::StatusOr<Topology> t = Topology::Build(s);
  ASSERT_THAT(t.status(), IsOk());
  EXPECT_DOUBLE_EQ(t->PathBetween(0, 1).bandwidth_bytes_per_s, kDefaultGpuFabricBytesPerS);
  EXPECT_DOUBLE_EQ(t->PathBetween(0, 2).bandwidth_bytes_per_s, kDefaultNicBytesPerS);
  // Each default taken is said (and nothing else).
  EXPECT_THAT(DefaultedFigures(Valid()), ::testing::IsEmpty());
  EXPECT_THAT(DefaultedFigures(s),
              ::testing::ElementsAre(HasSubstr("node 'n0': no intra_node_link bandwidth"),
                                     HasSubstr("node 'n0': no nic bandwidth; taking 1.25 GB/s")));
}

TEST(Topology, DevicesWithoutFiguresAreSaidPerNode) {
  auto s = Valid();
  for (int d = 0; d < 2; ++d)
    s.mutable_nodes(1)->mutable_devices(d)->clear_memory_bandwidth_bytes_per_s();
  s.mutable_nodes(0)->mutable_devices(1)->clear_efficiency();
  EXPECT_THAT(
      DefaultedFigures(s),
      ::testing::UnorderedElementsAre(
          "node 'n0': gpu:1: neither measured_gemm_flops_per_s nor efficiency; taking 0.5 of "
          "peak_fp32_flops_per_s",
          "node 'n1': gpu:0, gpu:1: no memory_bandwidth_bytes_per_s; taking 500 GB/s"));
  // A measured GEMM rate needs no efficiency.
  s.mutable_nodes(0)->mutable_devices(1)->set_measured_gemm_flops_per_s(5e12);
  EXPECT_THAT(DefaultedFigures(s), ::testing::ElementsAre(HasSubstr("node 'n1'")));
}

}  // namespace
}  // namespace quilt
