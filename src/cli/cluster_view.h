// Renders the coordinator's ClusterStatus for `quiltctl status`,
// `quiltctl nodes` (table, wide table, JSON) and `quiltctl describe node`. Pure functions: the
// output depends only on the arguments.
#ifndef QUILT_SRC_CLI_CLUSTER_VIEW_H_
#define QUILT_SRC_CLI_CLUSTER_VIEW_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/quilt/v1/services.pb.h"

namespace quilt::cli {

// The node `node_id` of `status`, or null.
const quilt::v1::NodeStatus* FindNode(const quilt::v1::ClusterStatus& status,
                                      const std::string& node_id);

// "Ready", "NotReady", "Down", with ",Draining" appended when draining.
std::string NodeStateLabel(const quilt::v1::NodeStatus& node);

// Sum over the node's devices of the measured GEMM FLOP/s (peak when a
// device was not measured).
double NodeFlops(const quilt::v1::NodeInfo& info);

// `now` dates the recent events ("5.0s ago").
std::string RenderStatus(const quilt::v1::ClusterStatus& status, const std::string& address,
                         absl::Time now);

// format: "table" | "wide" | "json".
std::string RenderNodes(const quilt::v1::ClusterStatus& status, const std::string& format);

// `quiltctl describe node`: the node's state (draining too), host, devices
// with their measured speed, its measured links, the jobs on it and its
// recent events. format: "table" | "json" (its NodeStatus). Errors:
// NOT_FOUND naming the node.
absl::StatusOr<std::string> RenderNodeDetails(const quilt::v1::ClusterStatus& status,
                                              const std::string& node_id, const std::string& format,
                                              absl::Time now);

}  // namespace quilt::cli

#endif  // QUILT_SRC_CLI_CLUSTER_VIEW_H_
