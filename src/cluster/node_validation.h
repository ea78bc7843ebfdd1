// Checks of what workers send at registration: node ids, device lists and
// measured figures. Requests that fail get INVALID_ARGUMENT with the field
// named, before they touch the registry.
#ifndef QUILT_SRC_CLUSTER_NODE_VALIDATION_H_
#define QUILT_SRC_CLUSTER_NODE_VALIDATION_H_

#include <string>

#include "absl/status/status.h"
#include "proto/quilt/v1/cluster.pb.h"

namespace quilt {

inline constexpr size_t kMaxNodeIdLength = 128;
inline constexpr int kMaxDevicesPerNode = 1024;

// Node ids: 1-128 characters of [A-Za-z0-9._-], starting with a letter or
// digit.
// A link's bandwidth and latency: finite, not negative, and when given (not
// 0) within 1 KB/s–10 TB/s and 0–60 s; errors name `what`.
absl::Status CheckLink(const quilt::v1::Link& link, const std::string& what);

absl::Status ValidateNodeId(const std::string& node_id);

// The whole NodeInfo: id, unique device ids "<node_id>/gpu:<index>" or
// "<node_id>/cpu:<index>" that agree with each device's kind and index,
// known device kinds, finite non-negative figures.
absl::Status ValidateNodeInfo(const quilt::v1::NodeInfo& info);

}  // namespace quilt

#endif  // QUILT_SRC_CLUSTER_NODE_VALIDATION_H_
