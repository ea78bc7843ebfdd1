// JobManager's side of the liveness ticker: ended jobs closed once their
// nodes have nothing more to send, failures whose cause did not report
// attributed to the node that caused them, jobs of Down nodes failed.
#include <algorithm>
#include <cstring>
#include <map>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/common/logging.h"
#include "src/common/proto_time.h"
#include "src/coordinator/job_manager.h"

namespace quilt {
namespace {

// The node of the "rank N" an executor's message names (its peer, in a
// failure caused by one), or "" when none is named.
std::string PeerNamed(const std::string& message,
                      const google::protobuf::RepeatedPtrField<std::string>& world) {
  // The transfer's own words first (a node or tensor name may hold "rank").
  size_t at = std::string::npos;
  for (const char* words : {"from rank ", "to rank ", "rank "}) {
    at = message.find(words);
    if (at != std::string::npos) {
      at += strlen(words) - strlen("rank ");
      break;
    }
  }
  if (at == std::string::npos) return "";
  size_t end = at + 5;
  while (end < message.size() && absl::ascii_isdigit(message[end])) ++end;
  int rank = -1;
  if (!absl::SimpleAtoi(message.substr(at + 5, end - at - 5), &rank) || rank < 0 ||
      rank >= world.size()) {
    return "";
  }
  return world[rank];
}

}  // namespace

void JobManager::CloseEnded(const std::map<std::string, std::string>& down) {
  for (auto& [id, job] : jobs_) {
    const quilt::v1::JobStatus& st = job.record.status();
    if (!Ended(st.state()) || job.loaded_ended || job.closed) continue;
    const absl::Time from = std::max(FromProtoTime(st.finished_at()), job.grace_from);
    bool done = clock_->Now() - from >= kLateStepsGrace;
    if (!done) {
      done = true;
      for (const std::string& node : job.record.world()) {
        auto task = job.record.tasks().find(node);
        const bool sent = task != job.record.tasks().end() && TaskEnded(task->second.state()) &&
                          job.heard.count(node) > 0 && NextStep(job, node) > task->second.step();
        done = done && (sent || down.count(node) > 0);
      }
    }
    if (!done) continue;
    const int64_t missing = job.end_step - Settled(job);
    job.closed = true;
    job.record.set_late_steps_open(false);
    job.record.mutable_status()->set_step(std::max(st.step(), job.end_step));
    if (missing > 0) {
      QLOG_INFO("job {}: the losses of {} lack parts of nodes that stopped (NaN)", id,
                missing == 1
                    ? absl::StrCat("step ", job.end_step)
                    : absl::StrCat("steps ", job.end_step - missing + 1, "–", job.end_step));
    }
    Changed(&job);
  }
}

void JobManager::CheckNodes() {
  std::map<std::string, std::string> down, silent;  // node → reason
  std::map<std::string, absl::Time> registered;     // its worker's start
  std::map<std::string, absl::Time> last_beat;
  for (const quilt::v1::NodeStatus& n : registry_->ListNodes()) {
    if (n.state() == quilt::v1::NODE_STATE_DOWN) down[n.info().node_id()] = n.reason();
    if (n.state() != quilt::v1::NODE_STATE_READY) silent[n.info().node_id()] = n.reason();
    registered[n.info().node_id()] = FromProtoTime(n.registered_at());
    if (n.has_last_heartbeat()) last_beat[n.info().node_id()] = FromProtoTime(n.last_heartbeat());
  }
  // Long enough for two heartbeats of every live node: one that sent none
  // since the failure stopped with it (before the registry, which waits
  // for not_ready_after, says so; never longer than that).
  const LivenessOptions& liveness = registry_->options();
  const absl::Duration root_cause_wait = std::max(
      kRootCauseWait,
      std::min(2 * liveness.heartbeat_period + absl::Milliseconds(500), liveness.not_ready_after));
  {
    absl::MutexLock lock(&mu_);
    CloseEnded(down);
  }
  {
    // Failures caused by a peer whose own report did not come: a node of
    // the job that stopped heartbeating, or whose worker restarted since
    // the job started, is the likely cause, and named.
    absl::MutexLock lock(&mu_);
    for (auto& [id, job] : jobs_) {
      if (job.knock_on.message.empty() || Ended(job.record.status().state())) continue;
      if (clock_->Now() - job.knock_on.since < root_cause_wait) continue;
      std::string node = job.knock_on.node, message = job.knock_on.message;
      const absl::Time started = FromProtoTime(job.record.status().started_at());
      // A node silent since the failure counts only if another node of the
      // job was heard since (a coordinator that stalled heard none).
      bool heard_since = false;
      for (const std::string& n : job.record.world()) {
        auto b = last_beat.find(n);
        heard_since = heard_since || (b != last_beat.end() && b->second > job.knock_on.since);
      }
      for (const std::string& n : job.record.world()) {
        auto s = silent.find(n);
        auto r = registered.find(n);
        auto b = last_beat.find(n);
        if (s != silent.end()) {
          node = n;
          message = absl::StrCat("node ", n, " stopped heartbeating",
                                 s->second.empty() ? "" : " (" + s->second + ")", "; ", message);
          break;
        }
        if (heard_since && b != last_beat.end() && b->second < job.knock_on.since) {
          node = n;
          message = absl::StrCat(
              "node ", n, " stopped heartbeating (none since the failure, ",
              absl::StrFormat("%.1f", absl::ToDoubleSeconds(clock_->Now() - job.knock_on.since)),
              " s ago); ", message);
          break;
        }
        if (job.record.status().has_started_at() && r != registered.end() && r->second > started) {
          node = n;
          message = absl::StrCat("the worker on ", n, " restarted; ", message);
          break;
        }
      }
      if (node == job.knock_on.node) {
        // None of them is known to have stopped: the peer the executor
        // names ("… rank 1 (b) …: the peer failed"), which sent nothing of
        // its own, is the likely cause.
        const std::string peer = PeerNamed(job.knock_on.message, job.record.world());
        if (!peer.empty() && peer != node) {
          message = absl::StrCat("node ", peer,
                                 " sent no report of its own (its executor "
                                 "stopped without one); ",
                                 message);
          node = peer;
        }
      }
      Finish(&job, quilt::v1::JOB_STATE_FAILED, message, node);
    }
    for (auto& [id, job] : jobs_) {
      if (job.stopped.message.empty() || Ended(job.record.status().state())) continue;
      if (clock_->Now() - job.stopped.since < kRootCauseWait) continue;
      Finish(&job, quilt::v1::JOB_STATE_CANCELLED, job.stopped.message, job.stopped.node);
    }
  }
  if (down.empty()) return;
  absl::MutexLock lock(&mu_);
  for (auto& [id, job] : jobs_) {
    if (Ended(job.record.status().state())) continue;
    for (const std::string& node : job.record.world()) {
      auto d = down.find(node);
      if (d == down.end()) continue;
      Finish(&job, quilt::v1::JOB_STATE_FAILED,
             absl::StrCat("node ", node, " is down", d->second.empty() ? "" : " (", d->second,
                          d->second.empty() ? "" : ")"),
             node);
      break;
    }
  }
}

}  // namespace quilt
