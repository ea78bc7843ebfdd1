// The cluster as a network of resources for the cost model and simulator:
// every device has an egress and an ingress port on its node's fabric
// (NVLink / PCIe / shared memory), every node a NIC with an outgoing and an
// incoming side, and explicit pair links are resources of their own. A
// transfer between two devices holds every resource on its path; its
// bandwidth is the path's narrowest, its latency the sum of the hops'.
// Unknown bandwidths get documented defaults (kDefault*).
#ifndef QUILT_SRC_CLUSTER_TOPOLOGY_H_
#define QUILT_SRC_CLUSTER_TOPOLOGY_H_

#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "proto/quilt/v1/cluster.pb.h"

namespace quilt {

// Defaults for links a spec leaves at 0.
inline constexpr double kDefaultGpuFabricBytesPerS = 12e9;  // PCIe 3.0 x16, achievable
inline constexpr double kDefaultCpuFabricBytesPerS = 10e9;  // shared memory copies
inline constexpr double kDefaultFabricLatencyS = 5e-6;
inline constexpr double kDefaultNicBytesPerS = 1.25e9;  // 10 Gbit/s
inline constexpr double kDefaultNicLatencyS = 12e-6;    // HeteroG's per-transfer overhead
// Defaults for device figures a spec leaves at 0: memory bandwidth, and the
// fraction of peak_fp32_flops_per_s training reaches when no measured GEMM
// rate is given either.
inline constexpr double kDefaultGpuMemoryBytesPerS = 500e9;
inline constexpr double kDefaultCpuMemoryBytesPerS = 20e9;
inline constexpr double kDefaultEfficiency = 0.5;

struct DeviceEntry {
  std::string id;
  int node = 0;
  quilt::v1::Device proto;
};

struct Resource {
  std::string name;  // e.g. "node-a/gpu:0 egress", "node-a nic out"
  double bandwidth_bytes_per_s = 0;
  double latency_s = 0;
};

struct Path {
  std::vector<int> resources;
  double bandwidth_bytes_per_s = 0;
  double latency_s = 0;
  // Seconds to move `bytes` alone on this path.
  double Time(double bytes) const {
    return resources.empty() ? 0 : latency_s + bytes / bandwidth_bytes_per_s;
  }
};

// What the spec leaves out that a plan depends on, and the default taken
// for it, one line each ("node 'n0': no nic bandwidth; taking 1.25 GB/s
// (10 Gbit/s)"): a NIC of a multi-node cluster, the intra-node link of a
// node of several devices, and per node the devices without a memory
// bandwidth, or with a peak rate but neither a measured GEMM rate nor an
// efficiency. Empty when nothing is defaulted.
std::vector<std::string> DefaultedFigures(const quilt::v1::ClusterSpec& spec);

class Topology {
 public:
  // Errors: INVALID_ARGUMENT for an invalid spec.
  static absl::StatusOr<Topology> Build(const quilt::v1::ClusterSpec& spec);

  int num_devices() const { return static_cast<int>(devices_.size()); }
  int num_nodes() const { return static_cast<int>(node_ids_.size()); }
  const DeviceEntry& device(int i) const { return devices_[i]; }
  const std::vector<DeviceEntry>& devices() const { return devices_; }
  const std::string& node_id(int n) const { return node_ids_[n]; }
  // -1 if unknown.
  int DeviceIndex(const std::string& id) const;
  // Devices of node n, in spec order.
  const std::vector<int>& NodeDevices(int n) const { return node_devices_[n]; }

  int num_resources() const { return static_cast<int>(resources_.size()); }
  const Resource& resource(int r) const { return resources_[r]; }
  // The path from device a to device b (empty when a == b).
  const Path& PathBetween(int a, int b) const { return paths_[a * num_devices() + b]; }
  // Bytes/s node n moves to other nodes (and takes from them) when
  // `streams` of its devices send at once: its NIC's bandwidth, or the
  // devices' links to it together where they are narrower (defaults
  // where the spec has none).
  double NodeBytesPerS(int n, int streams) const {
    return std::min(nic_bytes_per_s_[n], streams * fabric_bytes_per_s_[n]);
  }
  const quilt::v1::ClusterSpec& spec() const { return spec_; }

 private:
  quilt::v1::ClusterSpec spec_;
  std::vector<DeviceEntry> devices_;
  std::vector<std::string> node_ids_;
  std::vector<std::vector<int>> node_devices_;
  std::vector<double> nic_bytes_per_s_, fabric_bytes_per_s_;  // per node
  absl::flat_hash_map<std::string, int> index_;
  std::vector<Resource> resources_;
  std::vector<Path> paths_;
};

}  // namespace quilt

#endif  // QUILT_SRC_CLUSTER_TOPOLOGY_H_
