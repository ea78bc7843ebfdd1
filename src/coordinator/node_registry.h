// The coordinator's view of cluster membership: registered worker nodes,
// their incarnations and liveness.
//
// Liveness: a node is READY while heartbeats arrive; NOT_READY once none has
// arrived for `not_ready_after`; DOWN after `down_after`. A heartbeat brings a
// NOT_READY or DOWN node back to READY. A heartbeat whose incarnation is not
// the registered one is rejected with ABORTED (the sender is a stale
// process). Registrations and state changes are written to the store, so
// after a coordinator restart every node is listed again, as NOT_READY until
// it heartbeats (and DOWN if it stays silent for `down_after`).
//
// Thread-safe; CheckLiveness() is called periodically by the owner.
#ifndef QUILT_SRC_COORDINATOR_NODE_REGISTRY_H_
#define QUILT_SRC_COORDINATOR_NODE_REGISTRY_H_

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/quilt/v1/cluster.pb.h"
#include "src/common/clock.h"
#include "src/coordinator/store/store.h"

namespace quilt {

struct LivenessOptions {
  // Period workers are told to heartbeat at.
  absl::Duration heartbeat_period = absl::Seconds(1);
  absl::Duration not_ready_after = absl::Seconds(5);
  absl::Duration down_after = absl::Seconds(30);
  // A READY node's last-heartbeat time is written to the store at most this
  // often (state changes are always written at once).
  absl::Duration heartbeat_persist_interval = absl::Seconds(30);
};

class NodeRegistry {
 public:
  // `clock` and `store` must outlive the registry.
  NodeRegistry(Clock* clock, CoordinatorStore* store, LivenessOptions options);

  // Loads the nodes a previous coordinator stored. Every node that was not
  // DOWN becomes NOT_READY ("coordinator restarted"). Errors: the store's.
  absl::Status Load();

  // Registers a worker process. Errors: INVALID_ARGUMENT (bad NodeInfo or
  // zero incarnation), UNAVAILABLE (the store could not write).
  absl::Status Register(const quilt::v1::NodeInfo& info, uint64_t incarnation);

  // Errors: NOT_FOUND (unknown node), ABORTED (stale incarnation),
  // INVALID_ARGUMENT (bad node id).
  absl::Status Heartbeat(const std::string& node_id, uint64_t incarnation);

  // The node's worker process is stopping (a last heartbeat said so): the
  // node is DOWN at once. Errors as Heartbeat's.
  absl::Status Leave(const std::string& node_id, uint64_t incarnation);
  // Whether the node and incarnation are known, changing nothing. Errors as
  // Heartbeat's.
  absl::Status Check(const std::string& node_id, uint64_t incarnation);

  // Moves late nodes to NOT_READY / DOWN and records events.
  void CheckLiveness();

  // The coordinator itself did not run for `paused` (a stopped process, a
  // paused virtual machine, a stalled disk): the nodes' heartbeats of that
  // time wait unread, so it does not count as their silence.
  void ExcuseSilence(absl::Duration paused);

  // All nodes, ordered by id, with heartbeat ages as of now.
  std::vector<quilt::v1::NodeStatus> ListNodes() const;
  // Whether `node_id` is known and Ready.
  bool IsReady(const std::string& node_id) const;

  // Newest first, at most `max`.
  std::vector<quilt::v1::ClusterEvent> RecentEvents(int max) const;

  const LivenessOptions& options() const { return options_; }

  // Removes a Down node (a machine taken out of the cluster). Errors:
  // NOT_FOUND, FAILED_PRECONDITION (not Down), UNAVAILABLE (the store).
  absl::Status Forget(const std::string& node_id);

  // Drains a node (no new job is planned on it; LiveClusterSpec leaves it
  // out) or takes it back; kept in the store, so across restarts of the
  // coordinator and of the node's worker. Returns whether it changed.
  // Errors: NOT_FOUND, UNAVAILABLE (the store: unchanged).
  absl::StatusOr<bool> SetDraining(const std::string& node_id, bool draining);

  // A job failed (kept with the nodes' events for `quiltctl status`).
  void RecordJobFailure(const std::string& node_id, const std::string& message);

 private:
  struct Entry {
    quilt::v1::NodeStatus status;
    // Time of the last heartbeat, or of Load() for nodes not heard from since.
    absl::Time last_seen;
    absl::Time last_persisted;
  };

  // The node's entry when `incarnation` is its registered one.
  absl::StatusOr<Entry*> Find(const std::string& node_id, uint64_t incarnation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Transition(Entry& e, quilt::v1::NodeState state, const std::string& reason,
                  quilt::v1::ClusterEvent::Kind event, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordEvent(const std::string& node_id, quilt::v1::ClusterEvent::Kind kind,
                   const std::string& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Persist(Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock* const clock_;
  CoordinatorStore* const store_;
  const LivenessOptions options_;

  mutable absl::Mutex mu_;
  std::map<std::string, Entry> nodes_ ABSL_GUARDED_BY(mu_);
  std::deque<quilt::v1::ClusterEvent> events_ ABSL_GUARDED_BY(mu_);
};

}  // namespace quilt

#endif  // QUILT_SRC_COORDINATOR_NODE_REGISTRY_H_
