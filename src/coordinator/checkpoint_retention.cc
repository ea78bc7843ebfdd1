#include "src/coordinator/checkpoint_retention.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/common/logging.h"
#include "src/coordinator/checkpoint_dir.h"

namespace quilt {

absl::StatusOr<PrunedCheckpoints> PruneCheckpoints(const std::string& dir, int world, int keep) {
  PrunedCheckpoints out;
  const auto steps = CompleteSteps(dir, world);
  if (steps.empty()) return out;
  out.newest = steps.front().first;
  for (size_t i = std::max(keep, 1); i < steps.size(); ++i) {
    const std::string path = absl::StrCat(dir, "/", steps[i].second);
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("removing the old checkpoint ", path, ": ", ec.message()));
    }
    out.removed.push_back(path);
  }
  return out;
}

void CheckpointRetention::Progress(const std::string& job_id, const quilt::v1::JobRecord& record) {
  const quilt::v1::JobSpec& spec = record.spec();
  const quilt::v1::JobStatus& st = record.status();
  if (spec.keep_checkpoints() <= 0 || spec.checkpoint_dir().empty()) return;
  // The newest checkpoint step the job has passed: its last one once it
  // succeeded. A failed or cancelled job's are left as they are.
  int64_t due = 0;
  if (st.state() == quilt::v1::JOB_STATE_SUCCEEDED) {
    due = spec.steps();
  } else if (st.state() == quilt::v1::JOB_STATE_RUNNING && spec.checkpoint_interval_steps() > 0) {
    due = st.step() / spec.checkpoint_interval_steps() * spec.checkpoint_interval_steps();
  }
  if (due <= 0) return;
  {
    absl::MutexLock lock(&mu_);
    State& s = jobs_[job_id];
    if (s.queued || s.newest >= due) return;
    s.queued = true;
  }
  const bool taken =
      queue_.Submit([this, job_id, dir = spec.checkpoint_dir(), world = record.world_size(),
                     keep = spec.keep_checkpoints()] { Prune(job_id, dir, world, keep); });
  if (!taken) {
    absl::MutexLock lock(&mu_);
    if (auto it = jobs_.find(job_id); it != jobs_.end()) {
      it->second.queued = false;  // (the next report queues it again)
    }
  }
}

void CheckpointRetention::Prune(const std::string& job_id, const std::string& dir, int world,
                                int keep) {
  absl::StatusOr<PrunedCheckpoints> pruned = PruneCheckpoints(dir, world, keep);
  if (!pruned.ok()) {
    QLOG_WARN("job {}: {}", job_id, std::string(pruned.status().message()));
  } else if (!pruned->removed.empty()) {
    QLOG_INFO("job {}: removed {} old checkpoint(s), keeping the newest {}: {}", job_id,
              pruned->removed.size(), keep, absl::StrJoin(pruned->removed, ", "));
  }
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;  // forgotten meanwhile
  it->second.queued = false;
  if (pruned.ok()) it->second.newest = std::max(it->second.newest, pruned->newest);
}

void CheckpointRetention::Forget(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  jobs_.erase(job_id);
}

size_t CheckpointRetention::remembered() {
  absl::MutexLock lock(&mu_);
  return jobs_.size();
}

void CheckpointRetention::Flush() {
  while (queue_.pending() > 0) absl::SleepFor(absl::Milliseconds(5));
}

}  // namespace quilt
