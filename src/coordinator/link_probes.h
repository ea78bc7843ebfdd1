// Measured links between nodes. For every pair of Ready nodes that serve a
// probe endpoint (NodeInfo.address), the coordinator asks one of them (the
// smaller node id) to probe the other, with its heartbeat; at most one
// probe runs per node, a failed or lost one is retried after a minute, and
// a node that restarts (new incarnation) is measured again. The planner
// gets the results as pair links between the nodes' devices, in both
// directions.
//
// Thread-safe.
#ifndef QUILT_SRC_COORDINATOR_LINK_PROBES_H_
#define QUILT_SRC_COORDINATOR_LINK_PROBES_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "proto/quilt/v1/cluster.pb.h"
#include "proto/quilt/v1/services.pb.h"
#include "src/common/clock.h"
#include "src/coordinator/node_registry.h"

namespace quilt {

class LinkProbes {
 public:
  LinkProbes(NodeRegistry* registry, Clock* clock, int64_t probe_bytes = 32 << 20);

  // Takes the node's results and adds a probe for it to run, if one is due.
  void OnHeartbeat(const quilt::v1::HeartbeatRequest& request,
                   quilt::v1::HeartbeatResponse* response);

  // Measured links among the given nodes (src < dst by node id).
  std::vector<quilt::v1::MeasuredLink> Links() const;

  // Adds the measured links between the spec's nodes as pair links of
  // their devices (both directions).
  void AddTo(quilt::v1::ClusterSpec* spec) const;

 private:
  struct Pair {
    uint64_t src_incarnation = 0, dst_incarnation = 0;
    bool measured = false;
    quilt::v1::Link link;
    absl::Time asked = absl::InfinitePast();  // last time a probe was handed out
    std::string probe_id;
  };

  NodeRegistry* registry_;
  Clock* clock_;
  const int64_t probe_bytes_;
  mutable absl::Mutex mu_;
  std::map<std::pair<std::string, std::string>, Pair> pairs_ ABSL_GUARDED_BY(mu_);
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace quilt

#endif  // QUILT_SRC_COORDINATOR_LINK_PROBES_H_
