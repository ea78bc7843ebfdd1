// ClusterSpec files (protobuf text format or JSON) and their validation: the
// same message the coordinator builds from registered workers, written by
// hand for offline planning.
#ifndef QUILT_SRC_CLUSTER_CLUSTER_SPEC_H_
#define QUILT_SRC_CLUSTER_CLUSTER_SPEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/quilt/v1/cluster.pb.h"

namespace quilt {

// *.json → JSON (proto field names); anything else → text format. Errors:
// NOT_FOUND, INVALID_ARGUMENT naming the file and the problem.
absl::StatusOr<quilt::v1::ClusterSpec> LoadClusterSpec(const std::string& path);

// Every node valid (ids, devices, figures), unique ids across the cluster,
// every device with a speed and memory, pair links between known devices.
absl::Status ValidateClusterSpec(const quilt::v1::ClusterSpec& spec);

}  // namespace quilt

#endif  // QUILT_SRC_CLUSTER_CLUSTER_SPEC_H_
