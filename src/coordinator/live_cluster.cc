#include "src/coordinator/live_cluster.h"

#include "absl/strings/str_cat.h"

namespace quilt {

absl::StatusOr<quilt::v1::ClusterSpec> LiveClusterSpec(const NodeRegistry& registry,
                                                       const LinkProbes* links) {
  quilt::v1::ClusterSpec spec;
  spec.set_name("live");
  int registered = 0, not_ready = 0, down = 0, draining = 0;
  for (quilt::v1::NodeStatus& n : registry.ListNodes()) {
    ++registered;
    if (n.state() == quilt::v1::NODE_STATE_NOT_READY) ++not_ready;
    if (n.state() == quilt::v1::NODE_STATE_DOWN) ++down;
    if (n.state() != quilt::v1::NODE_STATE_READY) continue;
    if (n.draining()) {
      ++draining;
      continue;
    }
    *spec.add_nodes() = std::move(*n.mutable_info());
  }
  if (spec.nodes_size() == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no Ready nodes to plan for (", registered, " registered: ", not_ready, " not ready, ",
        down, " down, ", draining, " draining)",
        not_ready > 0 ? "; NotReady nodes are back when they heartbeat (seconds after a "
                        "coordinator restart)"
                      : ""));
  }
  if (links != nullptr) links->AddTo(&spec);
  return spec;
}

absl::Status WithNotReadyNodes(const absl::Status& status, const NodeRegistry& registry) {
  std::string waiting;
  for (const quilt::v1::NodeStatus& n : registry.ListNodes()) {
    if (n.state() != quilt::v1::NODE_STATE_NOT_READY) continue;
    absl::StrAppend(&waiting, waiting.empty() ? "" : ", ", n.info().node_id());
  }
  if (status.ok() || waiting.empty()) return status;
  return absl::Status(
      status.code(),
      absl::StrCat(status.message(), " (planned on the Ready nodes; not Ready: ", waiting,
                   ", e.g. after a coordinator restart until they "
                   "heartbeat)"));
}

}  // namespace quilt
