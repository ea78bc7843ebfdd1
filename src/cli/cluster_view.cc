#include "src/cli/cluster_view.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "src/cli/format.h"
#include "src/common/proto_time.h"

namespace quilt::cli {
namespace {

using quilt::v1::ClusterEvent;
using quilt::v1::NodeStatus;

std::string KindName(quilt::v1::DeviceKind kind) {
  return kind == quilt::v1::DEVICE_KIND_GPU ? "gpu" : "cpu";
}

std::string DevicesColumn(const quilt::v1::NodeInfo& info) {
  std::map<std::string, int> by_kind;
  for (const auto& d : info.devices()) by_kind[KindName(d.kind())]++;
  std::vector<std::string> parts;
  for (const auto& [kind, n] : by_kind) parts.push_back(absl::StrCat(n, " ", kind));
  return parts.empty() ? "0" : absl::StrJoin(parts, ",");
}

std::string ModelColumn(const quilt::v1::NodeInfo& info) {
  std::map<std::string, int> models;
  for (const auto& d : info.devices()) models[d.model()]++;
  if (models.empty()) return "-";
  std::string m = models.begin()->first;
  if (m.size() > 32) m = m.substr(0, 31) + "~";
  if (models.size() > 1) absl::StrAppend(&m, " (+", models.size() - 1, ")");
  return m.empty() ? "-" : m;
}

int64_t DeviceMemory(const quilt::v1::NodeInfo& info) {
  int64_t total = 0;
  for (const auto& d : info.devices()) total += d.memory_bytes();
  return total;
}

bool IsFailure(ClusterEvent::Kind k) {
  return k == ClusterEvent::KIND_NODE_NOT_READY || k == ClusterEvent::KIND_NODE_DOWN ||
         k == ClusterEvent::KIND_NODE_RESTARTED || k == ClusterEvent::KIND_JOB_FAILED;
}

std::string EventLabel(ClusterEvent::Kind k) {
  switch (k) {
    case ClusterEvent::KIND_NODE_NOT_READY:
      return "NotReady";
    case ClusterEvent::KIND_NODE_DOWN:
      return "Down";
    case ClusterEvent::KIND_NODE_RESTARTED:
      return "Restarted";
    case ClusterEvent::KIND_JOB_FAILED:
      return "JobFailed";
    case ClusterEvent::KIND_NODE_REGISTERED:
      return "Registered";
    case ClusterEvent::KIND_NODE_RECOVERED:
      return "Recovered";
    case ClusterEvent::KIND_NODE_FORGOTTEN:
      return "Forgotten";
    case ClusterEvent::KIND_NODE_DRAINING:
      return "Draining";
    case ClusterEvent::KIND_NODE_UNDRAINED:
      return "Undrained";
    default:
      return "Event";
  }
}

}  // namespace

const NodeStatus* FindNode(const quilt::v1::ClusterStatus& status, const std::string& node_id) {
  for (const NodeStatus& n : status.nodes()) {
    if (n.info().node_id() == node_id) return &n;
  }
  return nullptr;
}

std::string NodeStateLabel(const NodeStatus& node) {
  std::string s;
  switch (node.state()) {
    case quilt::v1::NODE_STATE_READY:
      s = "Ready";
      break;
    case quilt::v1::NODE_STATE_NOT_READY:
      s = "NotReady";
      break;
    case quilt::v1::NODE_STATE_DOWN:
      s = "Down";
      break;
    default:
      s = "Unknown";
  }
  if (node.draining()) s += ",Draining";
  return s;
}

double NodeFlops(const quilt::v1::NodeInfo& info) {
  double total = 0;
  for (const auto& d : info.devices()) {
    total += d.measured_gemm_flops_per_s() > 0 ? d.measured_gemm_flops_per_s()
                                               : d.peak_fp32_flops_per_s();
  }
  return total;
}

std::string RenderStatus(const quilt::v1::ClusterStatus& status, const std::string& address,
                         absl::Time now) {
  std::string out =
      absl::StrFormat("Coordinator: %s (version %s, up %s)\n", address,
                      status.coordinator_version(), HumanDuration(status.coordinator_uptime_s()));
  int ready = 0, not_ready = 0, down = 0, draining = 0;
  std::map<std::pair<std::string, std::string>, std::pair<int, int>> devices;  // (kind, model)
  double flops = 0;
  for (const NodeStatus& n : status.nodes()) {
    const bool is_ready = n.state() == quilt::v1::NODE_STATE_READY;
    ready += is_ready;
    not_ready += n.state() == quilt::v1::NODE_STATE_NOT_READY;
    down += n.state() == quilt::v1::NODE_STATE_DOWN;
    draining += is_ready && n.draining();
    if (is_ready) flops += NodeFlops(n.info());
    for (const auto& d : n.info().devices()) {
      auto& [used, total] = devices[{KindName(d.kind()), d.model()}];
      total += is_ready;
      used += is_ready && !n.running_jobs().empty();
    }
  }
  absl::StrAppendFormat(&out, "Nodes: %d/%d Ready", ready, status.nodes_size());
  if (not_ready + down > 0) absl::StrAppendFormat(&out, " (%d NotReady, %d Down)", not_ready, down);
  if (draining > 0) {
    absl::StrAppendFormat(&out, ", %d draining (no new jobs)", draining);
  }
  if (ready == 0) {
    out += "\nCompute (Ready nodes): none\n";
  } else {
    absl::StrAppendFormat(&out, "\nCompute (Ready nodes): %sFLOP/s measured fp32 GEMM\n",
                          HumanSi(flops));
  }
  out += "Devices (used/total on Ready nodes):\n";
  if (ready == 0) out += "  (none)\n";
  for (const auto& [key, counts] : devices) {
    if (counts.second == 0) continue;  // only on nodes that are not Ready
    absl::StrAppendFormat(&out, "  %d/%d %s  %s\n", counts.first, counts.second, key.first,
                          key.second.empty() ? "-" : key.second);
  }
  out += "Jobs:";
  if (status.jobs_by_state().empty()) out += " none";
  std::map<std::string, int> jobs(status.jobs_by_state().begin(), status.jobs_by_state().end());
  for (const auto& [state, n] : jobs) {
    absl::StrAppendFormat(&out, " %s=%d",
                          state.rfind("JOB_STATE_", 0) == 0 ? state.substr(10) : state, n);
  }
  out += "\nLinks (measured, between Ready nodes):";
  if (status.links().empty()) out += ready < 2 ? " none (fewer than two Ready nodes)" : " none yet";
  out += "\n";
  for (const auto& l : status.links()) {
    absl::StrAppendFormat(&out, "  %s <-> %s  %s/s  %s\n", l.src_node(), l.dst_node(),
                          HumanSi(l.link().bandwidth_bytes_per_s()) + "B",
                          HumanSeconds(l.link().latency_s()));
  }
  out += "Recent failures:\n";
  int shown = 0;
  for (const ClusterEvent& e : status.recent_events()) {
    if (!IsFailure(e.kind()) || shown >= 10) continue;
    const double ago = absl::ToDoubleSeconds(now - FromProtoTime(e.time()));
    absl::StrAppendFormat(&out, "  %s ago  %s  %s: %s\n", HumanDuration(ago), e.node_id(),
                          EventLabel(e.kind()), e.message());
    ++shown;
  }
  if (shown == 0) out += "  (none)\n";
  return out;
}

std::string RenderNodes(const quilt::v1::ClusterStatus& status, const std::string& format) {
  if (format == "json") {
    std::vector<std::string> items;
    for (const NodeStatus& n : status.nodes()) items.push_back(ToJson(n));
    return absl::StrCat("{\"nodes\": [", absl::StrJoin(items, ",\n"), "]}\n");
  }
  const bool wide = format == "wide";
  std::vector<std::string> headers = {"NODE",  "STATE",           "DEVICES",
                                      "MODEL", "MEM(used/total)", "FLOPS",
                                      "JOBS",  "HEARTBEAT_AGE",   "VERSION"};
  if (wide) {
    headers.insert(headers.end(), {"HOSTNAME", "INCARNATION", "REASON"});
  }
  Table table(headers);
  for (const NodeStatus& n : status.nodes()) {
    std::vector<std::string> row = {
        n.info().node_id(),
        NodeStateLabel(n),
        DevicesColumn(n.info()),
        ModelColumn(n.info()),
        absl::StrCat(HumanBytes(n.memory_used_bytes()), "/", HumanBytes(DeviceMemory(n.info()))),
        HumanSi(NodeFlops(n.info())),
        absl::StrCat(n.running_jobs_size()),
        HumanDuration(n.heartbeat_age_s()),
        n.info().version().empty() ? "-" : n.info().version()};
    if (wide) {
      row.push_back(n.info().hostname().empty() ? "-" : n.info().hostname());
      row.push_back(absl::StrFormat("%016x", n.incarnation()));
      row.push_back(n.reason().empty() ? "-" : n.reason());
    }
    table.AddRow(std::move(row));
  }
  return table.Render();
}

absl::StatusOr<std::string> RenderNodeDetails(const quilt::v1::ClusterStatus& status,
                                              const std::string& node_id, const std::string& format,
                                              absl::Time now) {
  const NodeStatus* node = FindNode(status, node_id);
  if (node == nullptr) return absl::NotFoundError("no node '" + node_id + "'");
  if (format == "json") return ToJson(*node) + "\n";
  const quilt::v1::NodeInfo& info = node->info();
  std::string out;
  absl::StrAppend(&out, "Node:        ", node_id, "  ", NodeStateLabel(*node),
                  node->draining() ? " (draining: no new jobs)" : "", "\n");
  if (!node->reason().empty()) absl::StrAppend(&out, "Reason:      ", node->reason(), "\n");
  absl::StrAppend(&out, "Host:        ", info.hostname().empty() ? "-" : info.hostname(),
                  info.address().empty() ? "" : "  " + info.address(), "\n");
  absl::StrAppend(&out, "Version:     ", info.version().empty() ? "-" : info.version(),
                  absl::StrFormat("  (worker incarnation %016x)", node->incarnation()), "\n");
  if (node->has_registered_at()) {
    absl::StrAppend(
        &out, "Registered:  ",
        HumanDuration(absl::ToDoubleSeconds(now - FromProtoTime(node->registered_at()))), " ago\n");
  }
  absl::StrAppend(&out, "Heartbeat:   ", HumanDuration(node->heartbeat_age_s()), " ago\n");
  absl::StrAppend(&out, "Memory:      plans hold ", HumanBytes(node->memory_used_bytes()), " of ",
                  HumanBytes(DeviceMemory(info)), " device memory\n");
  out += "Devices:\n";
  if (info.devices().empty()) out += "  (none)\n";
  for (const auto& d : info.devices()) {
    absl::StrAppend(&out, "  ", d.id(), "  ", KindName(d.kind()), "  ",
                    d.model().empty() ? "-" : d.model(), "  ", HumanBytes(d.memory_bytes()), "  ",
                    d.measured_gemm_flops_per_s() > 0
                        ? HumanSi(d.measured_gemm_flops_per_s()) + "FLOP/s measured"
                        : HumanSi(d.peak_fp32_flops_per_s()) + "FLOP/s peak (not measured)",
                    "\n");
  }
  out += "Links (measured):\n";
  int links = 0;
  for (const auto& l : status.links()) {
    if (l.src_node() != node_id && l.dst_node() != node_id) continue;
    absl::StrAppendFormat(&out, "  %s <-> %s  %s/s  %s\n", l.src_node(), l.dst_node(),
                          HumanSi(l.link().bandwidth_bytes_per_s()) + "B",
                          HumanSeconds(l.link().latency_s()));
    ++links;
  }
  if (links == 0) out += "  (none)\n";
  absl::StrAppend(&out, "Jobs:        ",
                  node->running_jobs().empty() ? "none" : absl::StrJoin(node->running_jobs(), ", "),
                  "\n");
  out += "Recent events:\n";
  int events = 0;
  for (const ClusterEvent& e : status.recent_events()) {
    if (e.node_id() != node_id) continue;
    const double ago = absl::ToDoubleSeconds(now - FromProtoTime(e.time()));
    absl::StrAppendFormat(&out, "  %s ago  %s: %s\n", HumanDuration(ago), EventLabel(e.kind()),
                          e.message());
    ++events;
  }
  if (events == 0) out += "  (none)\n";
  return out;
}

}  // namespace quilt::cli
