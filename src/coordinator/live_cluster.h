// The cluster as the planner sees it now: a ClusterSpec of the registered
// nodes that are Ready and not draining, as their workers reported them.
#ifndef QUILT_SRC_COORDINATOR_LIVE_CLUSTER_H_
#define QUILT_SRC_COORDINATOR_LIVE_CLUSTER_H_

#include "absl/status/statusor.h"
#include "proto/quilt/v1/cluster.pb.h"
#include "src/coordinator/link_probes.h"
#include "src/coordinator/node_registry.h"

namespace quilt {

// Errors: FAILED_PRECONDITION when no node is Ready (with how many are
// registered and in which states).
// With `links`, the measured links between the nodes become pair links.
absl::StatusOr<quilt::v1::ClusterSpec> LiveClusterSpec(const NodeRegistry& registry,
                                                       const LinkProbes* links = nullptr);

// `status` with the registered nodes left out of the plan because they are
// NotReady named (a restarted coordinator waits for their heartbeats), when
// there are any: a plan that failed may not have failed on them.
absl::Status WithNotReadyNodes(const absl::Status& status, const NodeRegistry& registry);

}  // namespace quilt

#endif  // QUILT_SRC_COORDINATOR_LIVE_CLUSTER_H_
