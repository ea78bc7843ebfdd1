#include "src/cluster/node_validation.h"

#include <cctype>
#include <cmath>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/common/status.h"

namespace quilt {
namespace {

absl::Status CheckFigure(double v, const std::string& what) {
  if (!std::isfinite(v) || v < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be a finite number >= 0, got ", v));
  }
  return absl::OkStatus();
}

// A figure that, when given (not 0), lies in [lo, hi]: beyond, it is a
// typo or a unit mistake, and plans built on it would be nonsense.
absl::Status CheckRange(double v, double lo, double hi, const std::string& what,
                        const std::string& range) {
  RETURN_IF_ERROR(CheckFigure(v, what));
  if (v != 0 && (v < lo || v > hi)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is ", v, ", outside ", range, " (or 0: not given)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckLink(const quilt::v1::Link& link, const std::string& what) {
  RETURN_IF_ERROR(CheckRange(link.bandwidth_bytes_per_s(), 1e3, 1e13,
                             what + "'s bandwidth_bytes_per_s", "1 KB/s to 10 TB/s"));
  return CheckRange(link.latency_s(), 0, 60, what + "'s latency_s", "0 to 60 s");
}

absl::Status ValidateNodeId(const std::string& node_id) {
  if (node_id.empty()) return absl::InvalidArgumentError("node_id is empty");
  if (node_id.size() > kMaxNodeIdLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("node_id is ", node_id.size(), " characters; at most ", kMaxNodeIdLength));
  }
  if (!std::isalnum(static_cast<unsigned char>(node_id[0]))) {
    return absl::InvalidArgumentError(
        absl::StrCat("node_id '", node_id, "' must start with a letter or digit"));
  }
  for (char c : node_id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("node_id '", node_id, "' has a character outside [A-Za-z0-9._-]"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateNodeInfo(const quilt::v1::NodeInfo& info) {
  RETURN_IF_ERROR(ValidateNodeId(info.node_id()));
  if (info.devices_size() > kMaxDevicesPerNode) {
    return absl::InvalidArgumentError(absl::StrCat("node ", info.node_id(), " reports ",
                                                   info.devices_size(), " devices; at most ",
                                                   kMaxDevicesPerNode));
  }
  std::set<std::string> ids;
  const std::string prefix = info.node_id() + "/";
  for (const quilt::v1::Device& d : info.devices()) {
    const std::string where = absl::StrCat("device '", d.id(), "'");
    if (!absl::StartsWith(d.id(), prefix) || d.id().size() == prefix.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " of node ", info.node_id(), ": ids must look like '", prefix, "<kind>:<index>'"));
    }
    if (!ids.insert(d.id()).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, " is listed twice"));
    }
    if (d.kind() != quilt::v1::DEVICE_KIND_CPU && d.kind() != quilt::v1::DEVICE_KIND_GPU) {
      return absl::InvalidArgumentError(absl::StrCat(where, " has no valid kind"));
    }
    if (d.index() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, " has a negative index"));
    }
    // The id names the device's kind and index; one that disagrees with
    // them is a copy-and-paste slip that would put work on another device.
    const std::string expected =
        absl::StrCat(prefix, d.kind() == quilt::v1::DEVICE_KIND_GPU ? "gpu:" : "cpu:", d.index());
    if (d.id() != expected) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " disagrees with its kind and index (",
                       d.kind() == quilt::v1::DEVICE_KIND_GPU ? "GPU" : "CPU", ", index ",
                       d.index(), "): its id should be '", expected, "'"));
    }
    constexpr double kMinFlops = 1e6, kMaxFlops = 1e17;
    const std::string flops_range = "1 MFLOP/s to 100 PFLOP/s";
    RETURN_IF_ERROR(CheckRange(d.peak_fp32_flops_per_s(), kMinFlops, kMaxFlops,
                               where + " peak_fp32_flops_per_s", flops_range));
    RETURN_IF_ERROR(CheckRange(d.peak_fp16_flops_per_s(), kMinFlops, kMaxFlops,
                               where + " peak_fp16_flops_per_s", flops_range));
    RETURN_IF_ERROR(CheckRange(d.measured_gemm_flops_per_s(), kMinFlops, kMaxFlops,
                               where + " measured_gemm_flops_per_s", flops_range));
    RETURN_IF_ERROR(CheckRange(d.memory_bandwidth_bytes_per_s(), 1e6, 1e16,
                               where + " memory_bandwidth_bytes_per_s", "1 MB/s to 10 PB/s"));
    RETURN_IF_ERROR(
        CheckRange(d.compute_slowdown(), 0.01, 1000, where + " compute_slowdown", "0.01 to 1000"));
    for (const quilt::v1::OpTypeRate& r : d.measured_op_type_rates()) {
      if (r.op_type().empty()) {
        return absl::InvalidArgumentError(where + " has a measured op-type rate without a type");
      }
      RETURN_IF_ERROR(CheckRange(r.flops_per_s(), 1e3, kMaxFlops,
                                 where + " measured_op_type_rates[" + r.op_type() + "]",
                                 "1 kFLOP/s to 100 PFLOP/s"));
    }
    for (const quilt::v1::OpTiming& t : d.op_times()) {
      if (t.op().empty()) {
        return absl::InvalidArgumentError(where + " has an op time without an op");
      }
      RETURN_IF_ERROR(CheckFigure(t.time_s(), where + " op_times[" + t.op() + "].time_s"));
      if (t.time_s() <= 0 || t.time_s() > 1e4) {
        return absl::InvalidArgumentError(absl::StrCat(where, " op_times[", t.op(), "].time_s is ",
                                                       t.time_s(), ", outside (0, 10000] s"));
      }
      if (t.batch() < 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, " op_times[", t.op(), "].batch must be at least 1, got ", t.batch()));
      }
    }
    for (const auto& [value, name] :
         {std::pair<double, const char*>{d.measured_op_overhead_s(), "measured_op_overhead_s"},
          {d.measured_step_overhead_s(), "measured_step_overhead_s"},
          {d.measured_transport_wakeup_s(), "measured_transport_wakeup_s"},
          {d.measured_transport_spin_s(), "measured_transport_spin_s"}}) {
      RETURN_IF_ERROR(CheckRange(value, 0, 60, where + " " + name, "0 to 60 s"));
    }
    if (d.efficiency() < 0 || d.efficiency() > 1 || !std::isfinite(d.efficiency()) ||
        (d.efficiency() > 0 && d.efficiency() < 0.01)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " efficiency must be in [0.01, 1] (or 0: the default), got ", d.efficiency()));
    }
    if (d.memory_bytes() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, " memory_bytes is negative"));
    }
  }
  RETURN_IF_ERROR(CheckLink(info.intra_node_link(),
                            absl::StrCat("node '", info.node_id(), "' intra_node_link")));
  RETURN_IF_ERROR(CheckLink(info.nic(), absl::StrCat("node '", info.node_id(), "' nic")));
  if (info.host_memory_bytes() < 0) {
    return absl::InvalidArgumentError("host_memory_bytes is negative");
  }
  return absl::OkStatus();
}

}  // namespace quilt
