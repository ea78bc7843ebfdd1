#include "src/cluster/cluster_spec.h"

#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/cluster/node_validation.h"
#include "src/common/proto_file.h"
#include "src/common/status.h"

namespace quilt {

absl::StatusOr<quilt::v1::ClusterSpec> LoadClusterSpec(const std::string& path) {
  quilt::v1::ClusterSpec spec;
  RETURN_IF_ERROR(ReadProtoFile(path, &spec));
  if (absl::Status s = ValidateClusterSpec(spec); !s.ok()) return Annotate(s, path);
  return spec;
}

absl::Status ValidateClusterSpec(const quilt::v1::ClusterSpec& spec) {
  if (spec.nodes_size() == 0) return absl::InvalidArgumentError("the cluster has no nodes");
  std::set<std::string> nodes, devices;
  for (const quilt::v1::NodeInfo& n : spec.nodes()) {
    RETURN_IF_ERROR(ValidateNodeInfo(n));
    if (!nodes.insert(n.node_id()).second) {
      return absl::InvalidArgumentError("node '" + n.node_id() + "' is listed twice");
    }
    if (n.devices_size() == 0) {
      return absl::InvalidArgumentError("node '" + n.node_id() + "' has no devices");
    }
    for (const quilt::v1::Device& d : n.devices()) {
      if (!devices.insert(d.id()).second) {
        return absl::InvalidArgumentError("device '" + d.id() + "' is listed twice");
      }
      if (d.measured_gemm_flops_per_s() <= 0 && d.peak_fp32_flops_per_s() <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("device '", d.id(),
                         "' has no speed (measured_gemm_flops_per_s or peak_fp32_flops_per_s)"));
      }
      if (d.memory_bytes() <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("device '", d.id(), "' has no memory_bytes"));
      }
    }
  }
  std::set<std::pair<std::string, std::string>> pairs;
  for (const quilt::v1::PairLink& p : spec.pair_links()) {
    if (!pairs.insert({p.src_device(), p.dst_device()}).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("pair link ", p.src_device(), " -> ", p.dst_device(), " is given twice"));
    }
    if (!devices.count(p.src_device()) || !devices.count(p.dst_device())) {
      return absl::InvalidArgumentError(absl::StrCat("pair link ", p.src_device(), " -> ",
                                                     p.dst_device(), " names an unknown device"));
    }
    const std::string what = absl::StrCat("pair link ", p.src_device(), " -> ", p.dst_device());
    if (p.src_device() == p.dst_device()) {
      return absl::InvalidArgumentError(what + " links a device to itself");
    }
    if (p.link().bandwidth_bytes_per_s() <= 0) {
      return absl::InvalidArgumentError(what + " has no bandwidth");
    }
    RETURN_IF_ERROR(CheckLink(p.link(), what));
  }
  return absl::OkStatus();
}

}  // namespace quilt
