#include "src/cluster/topology.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "src/cluster/cluster_spec.h"
#include "src/common/status.h"

namespace quilt {
namespace {

double Or(double v, double def) { return v > 0 ? v : def; }

bool AnyGpu(const quilt::v1::NodeInfo& node) {
  for (const auto& d : node.devices()) {
    if (d.kind() == quilt::v1::DEVICE_KIND_GPU) return true;
  }
  return false;
}

// The intra-node link of a node that does not give one.
double DefaultFabricBytesPerS(const quilt::v1::NodeInfo& node) {
  return AnyGpu(node) ? kDefaultGpuFabricBytesPerS : kDefaultCpuFabricBytesPerS;
}

}  // namespace

std::vector<std::string> DefaultedFigures(const quilt::v1::ClusterSpec& spec) {
  std::vector<std::string> out;
  for (const quilt::v1::NodeInfo& node : spec.nodes()) {
    // Devices by the default they take, so that a node of eight alike is
    // one line.
    std::map<std::string, std::vector<std::string>> devices_by_default;
    for (const quilt::v1::Device& d : node.devices()) {
      const bool gpu = d.kind() == quilt::v1::DEVICE_KIND_GPU;
      const std::string name = d.id().substr(std::min(d.id().size(), node.node_id().size() + 1));
      if (d.memory_bandwidth_bytes_per_s() == 0) {
        devices_by_default
            [absl::StrFormat("no memory_bandwidth_bytes_per_s; taking %.3g GB/s",
                             (gpu ? kDefaultGpuMemoryBytesPerS : kDefaultCpuMemoryBytesPerS) / 1e9)]
                .push_back(name);
      }
      if (d.measured_gemm_flops_per_s() == 0 && d.efficiency() == 0) {
        devices_by_default[absl::StrFormat(
                               "neither measured_gemm_flops_per_s nor efficiency; taking %.2g "
                               "of peak_fp32_flops_per_s",
                               kDefaultEfficiency)]
            .push_back(name);
      }
    }
    for (const auto& [what, names] : devices_by_default) {
      out.push_back(
          absl::StrFormat("node '%s': %s: %s", node.node_id(), absl::StrJoin(names, ", "), what));
    }
    if (node.devices_size() > 1 && node.intra_node_link().bandwidth_bytes_per_s() == 0) {
      out.push_back(
          absl::StrFormat("node '%s': no intra_node_link bandwidth; taking %.3g GB/s (%s)",
                          node.node_id(), DefaultFabricBytesPerS(node) / 1e9,
                          AnyGpu(node) ? "PCIe 3.0 x16" : "shared-memory copies"));
    }
    if (spec.nodes_size() > 1 && node.nic().bandwidth_bytes_per_s() == 0) {
      out.push_back(absl::StrFormat("node '%s': no nic bandwidth; taking %.3g GB/s (10 Gbit/s)",
                                    node.node_id(), kDefaultNicBytesPerS / 1e9));
    }
  }
  return out;
}

absl::StatusOr<Topology> Topology::Build(const quilt::v1::ClusterSpec& spec) {
  RETURN_IF_ERROR(ValidateClusterSpec(spec));
  Topology t;
  t.spec_ = spec;
  struct NodeRes {
    int nic_out, nic_in;
  };
  std::vector<NodeRes> node_res;
  std::vector<int> egress, ingress;
  for (int n = 0; n < spec.nodes_size(); ++n) {
    const quilt::v1::NodeInfo& node = spec.nodes(n);
    t.node_ids_.push_back(node.node_id());
    t.node_devices_.emplace_back();
    const double fabric_bw =
        Or(node.intra_node_link().bandwidth_bytes_per_s(), DefaultFabricBytesPerS(node));
    const double fabric_lat = Or(node.intra_node_link().latency_s(), kDefaultFabricLatencyS);
    for (const auto& d : node.devices()) {
      const int idx = static_cast<int>(t.devices_.size());
      t.devices_.push_back({d.id(), n, d});
      t.index_[d.id()] = idx;
      t.node_devices_[n].push_back(idx);
      egress.push_back(static_cast<int>(t.resources_.size()));
      t.resources_.push_back({d.id() + " egress", fabric_bw, fabric_lat / 2});
      ingress.push_back(static_cast<int>(t.resources_.size()));
      t.resources_.push_back({d.id() + " ingress", fabric_bw, fabric_lat / 2});
    }
    const double nic_bw = Or(node.nic().bandwidth_bytes_per_s(), kDefaultNicBytesPerS);
    const double nic_lat = Or(node.nic().latency_s(), kDefaultNicLatencyS);
    t.nic_bytes_per_s_.push_back(nic_bw);
    t.fabric_bytes_per_s_.push_back(fabric_bw);
    NodeRes r;
    r.nic_out = static_cast<int>(t.resources_.size());
    t.resources_.push_back({node.node_id() + " nic out", nic_bw, nic_lat / 2});
    r.nic_in = static_cast<int>(t.resources_.size());
    t.resources_.push_back({node.node_id() + " nic in", nic_bw, nic_lat / 2});
    node_res.push_back(r);
  }
  std::map<std::pair<int, int>, int> pair_res;
  for (const quilt::v1::PairLink& p : spec.pair_links()) {
    const int a = t.index_.at(p.src_device()), b = t.index_.at(p.dst_device());
    const int r = static_cast<int>(t.resources_.size());
    t.resources_.push_back({absl::StrCat(p.src_device(), " -> ", p.dst_device()),
                            p.link().bandwidth_bytes_per_s(),
                            Or(p.link().latency_s(), kDefaultFabricLatencyS)});
    pair_res[{a, b}] = r;
  }
  const int n = t.num_devices();
  t.paths_.resize(static_cast<size_t>(n) * n);
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      Path& p = t.paths_[a * n + b];
      auto pr = pair_res.find({a, b});
      if (pr == pair_res.end()) pr = pair_res.find({b, a});  // symmetric unless given
      if (pr != pair_res.end()) {
        p.resources = {pr->second};
      } else if (t.devices_[a].node == t.devices_[b].node) {
        p.resources = {egress[a], ingress[b]};
      } else {
        p.resources = {egress[a], node_res[t.devices_[a].node].nic_out,
                       node_res[t.devices_[b].node].nic_in, ingress[b]};
      }
      p.bandwidth_bytes_per_s = 1e300;
      for (int r : p.resources) {
        p.bandwidth_bytes_per_s =
            std::min(p.bandwidth_bytes_per_s, t.resources_[r].bandwidth_bytes_per_s);
        p.latency_s += t.resources_[r].latency_s;
      }
    }
  }
  return t;
}

int Topology::DeviceIndex(const std::string& id) const {
  auto it = index_.find(id);
  return it == index_.end() ? -1 : it->second;
}

}  // namespace quilt
