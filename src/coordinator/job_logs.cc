#include "src/coordinator/job_logs.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace quilt {

void JobLogs::OnHeartbeat(const quilt::v1::HeartbeatRequest& request,
                          quilt::v1::HeartbeatResponse* response) {
  absl::MutexLock lock(&mu_);
  for (const quilt::v1::LogReply& reply : request.log_replies()) {
    auto it = pending_.find(reply.request_id());
    // Gone (its wait ended) or another node's: dropped.
    if (it == pending_.end() || it->second.node != request.node_id()) continue;
    it->second.reply = reply;
    it->second.answered = true;
  }
  if (request.stopping()) return;
  const absl::Time now = absl::Now();
  for (auto& [id, p] : pending_) {
    if (p.node != request.node_id() || p.answered || now - p.handed < rehand_after_) continue;
    *response->add_log_requests() = p.request;
    p.handed = now;
  }
}

std::vector<quilt::v1::LogReply> JobLogs::Fetch(const std::string& job_id,
                                                const std::vector<std::string>& nodes, int lines,
                                                absl::Duration timeout,
                                                const std::map<std::string, int64_t>& offsets,
                                                int run) {
  std::vector<quilt::v1::LogReply> out(nodes.size());
  std::vector<std::string> ids(nodes.size());
  // (Asked before the lock, which every heartbeat takes.)
  std::vector<bool> ready(nodes.size(), true);
  for (size_t i = 0; i < nodes.size(); ++i) ready[i] = !ready_ || ready_(nodes[i]);
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!ready[i]) {
      out[i].set_error(
          absl::StrCat("node ", nodes[i], " is not Ready: its worker cannot be asked now"));
      continue;
    }
    ids[i] = absl::StrCat("log-", ++next_id_);
    Pending& p = pending_[ids[i]];
    p.node = nodes[i];
    p.request.set_request_id(ids[i]);
    p.request.set_job_id(job_id);
    p.request.set_lines(lines);
    if (auto at = offsets.find(nodes[i]); at != offsets.end()) {
      p.request.set_follow(true);
      p.request.set_offset(at->second);
    } else {
      p.request.set_run(run);
    }
  }
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (shutdown_) return true;
    for (const std::string& id : ids) {
      if (!id.empty() && !pending_.at(id).answered) return false;
    }
    return true;
  };
  mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (ids[i].empty()) continue;
    Pending& p = pending_.at(ids[i]);
    if (p.answered) {
      out[i] = std::move(p.reply);
    } else {
      out[i].set_error(shutdown_ ? std::string("the coordinator is stopping")
                                 : absl::StrFormat("the worker on %s did not answer in %.3g s",
                                                   nodes[i], absl::ToDoubleSeconds(timeout)));
    }
    pending_.erase(ids[i]);
  }
  return out;
}

void JobLogs::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
}

}  // namespace quilt
