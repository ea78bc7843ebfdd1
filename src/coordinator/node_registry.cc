#include "src/coordinator/node_registry.h"

#include "absl/strings/str_format.h"
#include "src/cluster/node_validation.h"
#include "src/common/logging.h"
#include "src/common/proto_time.h"
#include "src/common/status.h"

namespace quilt {
namespace {

using quilt::v1::ClusterEvent;
using quilt::v1::NodeState;
using quilt::v1::NodeStatus;

constexpr size_t kMaxEventsInMemory = 200;

std::string Seconds(absl::Duration d) {
  return absl::StrFormat("%.1f s", absl::ToDoubleSeconds(d));
}

}  // namespace

NodeRegistry::NodeRegistry(Clock* clock, CoordinatorStore* store, LivenessOptions options)
    : clock_(clock), store_(store), options_(options) {}

absl::Status NodeRegistry::Load() {
  ASSIGN_OR_RETURN(std::vector<NodeStatus> stored, store_->ListNodes());
  ASSIGN_OR_RETURN(std::vector<ClusterEvent> events, store_->RecentEvents(kMaxEventsInMemory));
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  for (NodeStatus& n : stored) {
    Entry e;
    e.status = std::move(n);
    e.last_seen = now;
    e.last_persisted = now;
    if (e.status.state() != quilt::v1::NODE_STATE_DOWN) {
      e.status.set_state(quilt::v1::NODE_STATE_NOT_READY);
      e.status.set_reason("coordinator restarted; waiting for a heartbeat");
    }
    nodes_[e.status.info().node_id()] = std::move(e);
  }
  events_.assign(events.begin(), events.end());
  QLOG_INFO("loaded node registry nodes={} events={}", nodes_.size(), events_.size());
  return absl::OkStatus();
}

absl::Status NodeRegistry::Persist(Entry& e) {
  absl::Status s = store_->PutNode(e.status);
  if (s.ok()) e.last_persisted = clock_->Now();
  return s;
}

absl::Status NodeRegistry::Forget(const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return absl::NotFoundError("no node '" + node_id + "'");
  const NodeState state = it->second.status.state();
  if (state != quilt::v1::NODE_STATE_DOWN) {
    return absl::FailedPreconditionError(absl::StrCat(
        "node ", node_id, " is ", state == quilt::v1::NODE_STATE_READY ? "Ready" : "NotReady",
        "; only a Down node is forgotten (stop its worker: a stopped worker's node is Down at "
        "once)"));
  }
  if (absl::Status s = store_->DeleteNode(node_id); !s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("cannot remove node ", node_id, " from the store: ", s.message()));
  }
  nodes_.erase(it);
  RecordEvent(node_id, ClusterEvent::KIND_NODE_FORGOTTEN, "removed from the cluster");
  return absl::OkStatus();
}

absl::StatusOr<bool> NodeRegistry::SetDraining(const std::string& node_id, bool draining) {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return absl::NotFoundError("no node '" + node_id + "'");
  Entry& e = it->second;
  if (e.status.draining() == draining) return false;
  e.status.set_draining(draining);
  if (absl::Status s = Persist(e); !s.ok()) {
    e.status.set_draining(!draining);
    return absl::Status(s.code(), absl::StrCat("cannot store node ", node_id, "'s draining (",
                                               s.message(), "); it is unchanged"));
  }
  RecordEvent(node_id,
              draining ? ClusterEvent::KIND_NODE_DRAINING : ClusterEvent::KIND_NODE_UNDRAINED,
              draining ? "drained: no new jobs" : "taken back: new jobs may run on it");
  return true;
}

void NodeRegistry::RecordJobFailure(const std::string& node_id, const std::string& message) {
  absl::MutexLock lock(&mu_);
  RecordEvent(node_id, ClusterEvent::KIND_JOB_FAILED, message);
}

void NodeRegistry::RecordEvent(const std::string& node_id, ClusterEvent::Kind kind,
                               const std::string& message) {
  ClusterEvent ev;
  *ev.mutable_time() = ToProtoTime(clock_->Now());
  ev.set_node_id(node_id);
  ev.set_kind(kind);
  ev.set_message(message);
  events_.push_front(ev);
  if (events_.size() > kMaxEventsInMemory) events_.pop_back();
  if (absl::Status s = store_->AppendEvent(ev); !s.ok()) {
    QLOG_ERROR("cannot store cluster event node={} error=\"{}\"", node_id, s.ToString());
  }
}

void NodeRegistry::Transition(Entry& e, NodeState state, const std::string& reason,
                              ClusterEvent::Kind event, const std::string& message) {
  e.status.set_state(state);
  e.status.set_reason(reason);
  RecordEvent(e.status.info().node_id(), event, message);
  if (absl::Status s = Persist(e); !s.ok()) {
    QLOG_ERROR("cannot store node state node={} error=\"{}\"", e.status.info().node_id(),
               s.ToString());
  }
}

absl::Status NodeRegistry::Register(const quilt::v1::NodeInfo& info, uint64_t incarnation) {
  RETURN_IF_ERROR(ValidateNodeInfo(info));
  if (incarnation == 0) return absl::InvalidArgumentError("incarnation must be non-zero");
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  auto it = nodes_.find(info.node_id());
  const bool known = it != nodes_.end();
  Entry updated = known ? it->second : Entry{};
  const uint64_t previous = updated.status.incarnation();
  // Another worker process under the same id while this one is alive: two
  // workers given one id (they would take it from each other for ever).
  // A restarted worker's old process is silent: accepted once it is not
  // Ready.
  if (known && previous != incarnation && updated.status.state() == quilt::v1::NODE_STATE_READY &&
      now - updated.last_seen < options_.not_ready_after) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "node id %s is in use by another running worker (incarnation %016x, heard from %s "
        "ago): give each worker its own node id; a restarted worker is accepted once its old "
        "process has been silent for %s",
        info.node_id(), previous, Seconds(now - updated.last_seen),
        Seconds(options_.not_ready_after)));
  }
  *updated.status.mutable_info() = info;
  updated.status.set_incarnation(incarnation);
  updated.status.set_state(quilt::v1::NODE_STATE_READY);
  updated.status.set_reason("");
  *updated.status.mutable_last_heartbeat() = ToProtoTime(now);
  if (!known || previous != incarnation) *updated.status.mutable_registered_at() = ToProtoTime(now);
  updated.last_seen = now;
  // Durable before acknowledged: the worker retries if this fails.
  RETURN_IF_ERROR(Annotate(Persist(updated), "registering node " + info.node_id()));
  if (!known) {
    RecordEvent(info.node_id(), ClusterEvent::KIND_NODE_REGISTERED,
                absl::StrFormat("registered with %d device(s)", info.devices_size()));
    QLOG_INFO("node registered node={} incarnation={:016x} devices={}", info.node_id(), incarnation,
              info.devices_size());
  } else if (previous != incarnation) {
    RecordEvent(
        info.node_id(), ClusterEvent::KIND_NODE_RESTARTED,
        absl::StrFormat("worker restarted (incarnation %016x -> %016x)", previous, incarnation));
    QLOG_WARN("node restarted node={} old_incarnation={:016x} incarnation={:016x}", info.node_id(),
              previous, incarnation);
  } else {
    QLOG_INFO("node re-registered node={} incarnation={:016x}", info.node_id(), incarnation);
  }
  nodes_[info.node_id()] = std::move(updated);
  return absl::OkStatus();
}

absl::StatusOr<NodeRegistry::Entry*> NodeRegistry::Find(const std::string& node_id,
                                                        uint64_t incarnation) {
  RETURN_IF_ERROR(ValidateNodeId(node_id));
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) {
    return absl::NotFoundError(
        absl::StrFormat("node %s is not registered; register before heartbeating", node_id));
  }
  Entry& e = it->second;
  if (e.status.incarnation() != incarnation) {
    return absl::AbortedError(absl::StrFormat(
        "node %s: incarnation %016x is stale (registered incarnation is %016x); register again",
        node_id, incarnation, e.status.incarnation()));
  }
  return &e;
}

absl::Status NodeRegistry::Leave(const std::string& node_id, uint64_t incarnation) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Entry * e, Find(node_id, incarnation));
  e->last_seen = clock_->Now();
  if (e->status.state() == quilt::v1::NODE_STATE_DOWN) return absl::OkStatus();
  QLOG_INFO("node down node={}: its worker stopped", node_id);
  Transition(*e, quilt::v1::NODE_STATE_DOWN, "its worker stopped", ClusterEvent::KIND_NODE_DOWN,
             "its worker stopped");
  return absl::OkStatus();
}

absl::Status NodeRegistry::Check(const std::string& node_id, uint64_t incarnation) {
  absl::MutexLock lock(&mu_);
  return Find(node_id, incarnation).status();
}

absl::Status NodeRegistry::Heartbeat(const std::string& node_id, uint64_t incarnation) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Entry * found, Find(node_id, incarnation));
  Entry& e = *found;
  const absl::Time now = clock_->Now();
  e.last_seen = now;
  *e.status.mutable_last_heartbeat() = ToProtoTime(now);
  if (e.status.state() != quilt::v1::NODE_STATE_READY) {
    QLOG_INFO("node ready again node={} was={}", node_id,
              quilt::v1::NodeState_Name(e.status.state()));
    Transition(e, quilt::v1::NODE_STATE_READY, "", ClusterEvent::KIND_NODE_RECOVERED,
               "heartbeats resumed");
  } else if (now - e.last_persisted >= options_.heartbeat_persist_interval) {
    if (absl::Status s = Persist(e); !s.ok()) {
      // Tried again after the interval, not at every heartbeat.
      e.last_persisted = now;
      QLOG_WARN("cannot store heartbeat time node={} error=\"{}\"", node_id, s.ToString());
    }
  }
  return absl::OkStatus();
}

void NodeRegistry::CheckLiveness() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  for (auto& [id, e] : nodes_) {
    const absl::Duration silent = now - e.last_seen;
    const NodeState state = e.status.state();
    if (silent > options_.down_after && state != quilt::v1::NODE_STATE_DOWN) {
      const std::string reason = "no heartbeat for " + Seconds(silent);
      QLOG_WARN("node down node={} silent_s={:.1f}", id, absl::ToDoubleSeconds(silent));
      Transition(e, quilt::v1::NODE_STATE_DOWN, reason, ClusterEvent::KIND_NODE_DOWN, reason);
    } else if (silent > options_.not_ready_after && state == quilt::v1::NODE_STATE_READY) {
      const std::string reason = "no heartbeat for " + Seconds(silent);
      QLOG_WARN("node not ready node={} silent_s={:.1f}", id, absl::ToDoubleSeconds(silent));
      Transition(e, quilt::v1::NODE_STATE_NOT_READY, reason, ClusterEvent::KIND_NODE_NOT_READY,
                 reason);
    }
  }
}

void NodeRegistry::ExcuseSilence(absl::Duration paused) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  for (auto& [id, e] : nodes_) e.last_seen = std::min(now, e.last_seen + paused);
}

bool NodeRegistry::IsReady(const std::string& node_id) const {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node_id);
  return it != nodes_.end() && it->second.status.state() == quilt::v1::NODE_STATE_READY;
}

std::vector<NodeStatus> NodeRegistry::ListNodes() const {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  std::vector<NodeStatus> out;
  out.reserve(nodes_.size());
  for (const auto& [id, e] : nodes_) {
    NodeStatus n = e.status;
    n.set_heartbeat_age_s(absl::ToDoubleSeconds(now - FromProtoTime(n.last_heartbeat())));
    out.push_back(std::move(n));
  }
  return out;
}

std::vector<ClusterEvent> NodeRegistry::RecentEvents(int max) const {
  absl::MutexLock lock(&mu_);
  std::vector<ClusterEvent> out;
  for (const ClusterEvent& e : events_) {
    if (static_cast<int>(out.size()) >= max) break;
    out.push_back(e);
  }
  return out;
}

}  // namespace quilt
