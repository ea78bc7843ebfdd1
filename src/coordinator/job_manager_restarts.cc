// JobManager: what resuming a job records (JobStatus.resumed_as and
// restart_error), and the failed jobs due a restart.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/common/proto_time.h"
#include "src/common/status.h"
#include "src/coordinator/job_manager.h"

namespace quilt {

absl::Status JobManager::NotResumed(const Job& job, const std::string& job_id) {
  const std::string& next = job.record.status().resumed_as();
  if (next.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("job ", job_id, " was resumed already, as ", next));
}

void JobManager::SetResumed(Job* job, const std::string& next) {
  job->record.mutable_status()->set_resumed_as(next);
  job->record.mutable_status()->clear_restart_error();
  Changed(job, /*durable=*/true);
}

absl::Status JobManager::CheckNotResumed(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError("no job '" + job_id + "'");
  return NotResumed(it->second, job_id);
}

absl::Status JobManager::MarkResumed(const std::string& job_id, const std::string& next) {
  absl::MutexLock lock(&mu_);
  Job* job = Find(job_id);
  if (job == nullptr) return absl::NotFoundError("no job '" + job_id + "'");
  RETURN_IF_ERROR(NotResumed(*job, job_id));
  SetResumed(job, next);
  return absl::OkStatus();
}

std::vector<std::string> JobManager::RestartsDue(absl::Duration after) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  std::vector<std::string> out;
  for (const std::string& id : order_) {
    const Job& job = jobs_.at(id);
    const quilt::v1::JobStatus& st = job.record.status();
    if (st.state() != quilt::v1::JOB_STATE_FAILED || job.record.spec().max_restarts() <= 0 ||
        !st.resumed_as().empty() || !st.restart_error().empty() ||
        std::max(FromProtoTime(st.finished_at()), loaded_at_) > now - after) {
      continue;
    }
    auto [tried, fresh] = restarts_tried_.try_emplace(id, now);
    if (!fresh && tried->second > now - after) continue;
    tried->second = now;
    out.push_back(id);
  }
  return out;
}

void JobManager::MarkRestartFailed(const std::string& job_id, const std::string& error) {
  absl::MutexLock lock(&mu_);
  Job* job = Find(job_id);
  if (job == nullptr || !job->record.status().resumed_as().empty()) return;
  job->record.mutable_status()->set_restart_error(error);
  Changed(job, /*durable=*/true);
}

void JobManager::RelinkResumed() {
  for (const std::string& id : order_) {
    const std::string& from = jobs_.at(id).record.status().resumed_from();
    Job* old = from.empty() ? nullptr : Find(from);
    if (old == nullptr || !old->record.status().resumed_as().empty()) continue;
    SetResumed(old, id);
  }
}

}  // namespace quilt
