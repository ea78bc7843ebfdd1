#include "src/cluster/random_cluster.h"

#include <random>
#include <string>

#include "absl/strings/str_cat.h"

namespace quilt {
namespace {

struct GpuModel {
  const char* name;
  double peak_fp32;
  double efficiency;
  double memory_bandwidth;
  int64_t memory_gib;
  bool nvlink;  // sold in NVLink servers
};

// Published peaks; efficiencies as in config/clusters (HAP's measured V100
// and P100 rates; same-generation parts share them) or 0.3 for Ampere.
constexpr GpuModel kModels[] = {
    {"Tesla V100 16GB", 15.7e12, 0.2458, 900e9, 16, true},
    {"Tesla V100 32GB", 15.7e12, 0.2458, 900e9, 32, true},
    {"Tesla P100 12GB", 9.3e12, 0.2028, 549e9, 12, false},
    {"GeForce GTX 1080 Ti", 11.3e12, 0.2028, 484e9, 11, false},
    {"Tesla T4", 8.1e12, 0.2458, 320e9, 16, false},
    {"A100 40GB", 19.5e12, 0.3, 1555e9, 40, true},
    {"GeForce RTX 3090", 35.6e12, 0.15, 936e9, 24, false},
};
constexpr double kNicGbit[] = {10, 25, 50, 100, 200};

}  // namespace

quilt::v1::ClusterSpec RandomCluster(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  quilt::v1::ClusterSpec spec;
  spec.set_name(absl::StrCat("random-", seed));
  const int nodes = 2 + pick(7);
  for (int n = 0; n < nodes; ++n) {
    const GpuModel& m = kModels[pick(sizeof(kModels) / sizeof(kModels[0]))];
    auto* node = spec.add_nodes();
    node->set_node_id(absl::StrCat("node-", n));
    node->set_hostname(node->node_id());
    const int gpus = 1 + pick(8);
    for (int d = 0; d < gpus; ++d) {
      auto* dev = node->add_devices();
      dev->set_id(absl::StrCat(node->node_id(), "/gpu:", d));
      dev->set_kind(quilt::v1::DEVICE_KIND_GPU);
      dev->set_model(m.name);
      dev->set_index(d);
      dev->set_peak_fp32_flops_per_s(m.peak_fp32);
      dev->set_efficiency(m.efficiency);
      dev->set_memory_bandwidth_bytes_per_s(m.memory_bandwidth);
      dev->set_memory_bytes(m.memory_gib << 30);
    }
    const bool nvlink = m.nvlink && pick(2) == 0;
    node->mutable_intra_node_link()->set_bandwidth_bytes_per_s(nvlink ? 1e11 : 12e9);
    node->mutable_intra_node_link()->set_latency_s(nvlink ? 3e-6 : 5e-6);
    node->mutable_intra_node_link()->set_kind(nvlink ? "nvlink" : "pcie");
    node->mutable_nic()->set_bandwidth_bytes_per_s(kNicGbit[pick(5)] * 1e9 / 8);
    node->mutable_nic()->set_latency_s(12e-6);
    node->mutable_nic()->set_kind("ethernet");
  }
  return spec;
}

}  // namespace quilt
