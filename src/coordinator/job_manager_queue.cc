// JobManager's queue: jobs submitted with JobSpec.queue that wait QUEUED
// for other jobs to leave room, and their start once a plan fits.
#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/status.h"
#include "src/coordinator/job_manager.h"

namespace quilt {

absl::StatusOr<std::string> JobManager::AddQueued(quilt::v1::JobSpec spec, const std::string& why,
                                                  const std::string& resumed_from) {
  NewJob n;
  n.spec = std::move(spec);
  n.resumed_from = resumed_from;
  ASSIGN_OR_RETURN(std::string id, Insert(std::move(n), quilt::v1::JOB_STATE_QUEUED, why));
  // A job of a higher priority goes before older ones: theirs say so.
  absl::MutexLock lock(&mu_);
  RenumberQueue();
  return id;
}

std::vector<std::string> JobManager::QueueOrder() const {
  std::vector<std::string> out;
  for (const std::string& id : order_) {
    if (jobs_.at(id).record.status().state() == quilt::v1::JOB_STATE_QUEUED) out.push_back(id);
  }
  // Stable: the oldest first within a priority.
  std::stable_sort(
      out.begin(), out.end(),
      [this](const std::string& a, const std::string& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return jobs_.at(a).record.status().priority() > jobs_.at(b).record.status().priority();
      });
  return out;
}

std::vector<std::string> JobManager::Queued() const {
  absl::MutexLock lock(&mu_);
  return QueueOrder();
}

int JobManager::QueuedAhead(int32_t priority) const {
  absl::MutexLock lock(&mu_);
  int ahead = 0;
  for (const auto& [id, job] : jobs_) {
    const quilt::v1::JobStatus& st = job.record.status();
    ahead += st.state() == quilt::v1::JOB_STATE_QUEUED && st.priority() >= priority;
  }
  return ahead;
}

bool JobManager::HoldsNodes(quilt::v1::JobState s) {
  return !Ended(s) && s != quilt::v1::JOB_STATE_QUEUED;
}

std::vector<std::string> JobManager::Holding() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const std::string& id : order_) {
    if (HoldsNodes(jobs_.at(id).record.status().state())) out.push_back(id);
  }
  return out;
}

absl::Status JobManager::StartQueued(const std::string& job_id, NewJob n) {
  absl::MutexLock lock(&mu_);
  Job* job = Find(job_id);
  if (job == nullptr) return absl::NotFoundError("no job '" + job_id + "'");
  if (job->record.status().state() != quilt::v1::JOB_STATE_QUEUED) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " is no longer queued (",
                     quilt::v1::JobState_Name(job->record.status().state()), ")"));
  }
  // Stored before it takes effect: a job the coordinator cannot keep
  // started stays queued.
  Job started;
  started.record = job->record;
  SetPlan(&started, &n);
  quilt::v1::JobStatus* st = started.record.mutable_status();
  st->set_state(quilt::v1::JOB_STATE_PENDING);
  st->set_message(std::string(kAwaitingExecutors));
  if (absl::Status s = store_->StartJob(started.record, n.program); !s.ok()) {
    QLOG_ERROR("cannot store the start of queued job {}: {}", job_id, s.ToString());
    // (Passing: the dispatcher tries again, whatever the store's code.)
    return absl::UnavailableError(absl::StrCat("the coordinator cannot store the job's start (",
                                               s.message(), "); it stays queued"));
  }
  job->record = std::move(started.record);
  job->program = std::move(n.program);
  job->version = ++version_;
  job->persisted = clock_->Now();
  job->persisted_version = job->version;
  QLOG_INFO("queued job {} starts: {} steps on {} node(s), strategy {}", job_id,
            job->record.status().steps(), job->record.world_size(),
            job->record.status().strategy());
  RenumberQueue();
  return absl::OkStatus();
}

void JobManager::RenumberQueue() {
  // The head's message is the dispatcher's (what it waits for); a head
  // that still says how many were ahead of it says what comes next until
  // the dispatcher has planned it.
  int ahead = 0;
  for (const std::string& id : QueueOrder()) {
    Job& job = jobs_.at(id);
    const std::string& had = job.record.status().message();
    std::string why = absl::StrCat("behind ", ahead, " queued job(s)");
    if (ahead++ == 0) {
      if (!absl::StartsWith(had, "behind ") || !absl::EndsWith(had, " queued job(s)")) continue;
      why = std::string(kQueueHeadPending);
    }
    if (had != why) {
      job.record.mutable_status()->set_message(why);
      Changed(&job);
    }
  }
}

void JobManager::KeepQueued(const std::string& job_id, const std::string& why) {
  absl::MutexLock lock(&mu_);
  Job* job = Find(job_id);
  if (job == nullptr || job->record.status().state() != quilt::v1::JOB_STATE_QUEUED ||
      job->record.status().message() == why) {
    return;
  }
  // No longer the head (a job of a higher priority came meanwhile): it
  // says how many are ahead instead.
  if (QueueOrder().front() != job_id) {
    RenumberQueue();
    return;
  }
  job->record.mutable_status()->set_message(why);
  Changed(job);
}

void JobManager::FailQueued(const std::string& job_id, const std::string& error) {
  absl::MutexLock lock(&mu_);
  Job* job = Find(job_id);
  if (job == nullptr || job->record.status().state() != quilt::v1::JOB_STATE_QUEUED) return;
  Finish(job, quilt::v1::JOB_STATE_FAILED, "it could not start from the queue: " + error);
  RenumberQueue();
}

}  // namespace quilt
