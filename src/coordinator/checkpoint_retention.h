// Checkpoint retention: a job that keeps its newest N checkpoints
// (JobSpec.keep_checkpoints) has the older complete ones removed once a
// newer one is complete, so that a long job's checkpoints do not fill the
// disk. Incomplete step directories (one being written) are never touched,
// and neither are the checkpoints of a job that failed or was cancelled
// (a resume may read an older one when the newest does not read). The
// removal runs on a thread of its own: slow shared storage stalls no
// heartbeat.
#ifndef QUILT_SRC_COORDINATOR_CHECKPOINT_RETENTION_H_
#define QUILT_SRC_COORDINATOR_CHECKPOINT_RETENTION_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/quilt/v1/job.pb.h"
#include "src/common/work_queue.h"

namespace quilt {

struct PrunedCheckpoints {
  int64_t newest = 0;                // the newest complete step (0: none)
  std::vector<std::string> removed;  // step directories removed, newest first
};

// Removes the complete steps of `world` ranks in `dir` older than its
// newest `keep` (keep ≥ 1). Errors: INTERNAL naming a step directory that
// could not be removed (those before it are gone).
absl::StatusOr<PrunedCheckpoints> PruneCheckpoints(const std::string& dir, int world, int keep);

class CheckpointRetention {
 public:
  CheckpointRetention() : queue_(1, 4096) {}
  ~CheckpointRetention() { queue_.Shutdown(); }

  // A job's record after a progress report: when it keeps its newest
  // checkpoints and one newer than the newest seen may be complete (its
  // step passed a checkpoint step, or it succeeded), a pruning of its
  // directory is queued (one at a time per job).
  void Progress(const std::string& job_id, const quilt::v1::JobRecord& record);
  // Drops what is remembered of a job (it was deleted); a pruning of it
  // already queued still runs but leaves nothing behind.
  void Forget(const std::string& job_id);
  // How many jobs are remembered (tests).
  size_t remembered();
  // Waits until the queued prunings have run (tests).
  void Flush();

 private:
  struct State {
    int64_t newest = 0;  // the newest complete step seen
    bool queued = false;
  };
  void Prune(const std::string& job_id, const std::string& dir, int world, int keep);

  absl::Mutex mu_;
  std::map<std::string, State> jobs_ ABSL_GUARDED_BY(mu_);
  WorkQueue queue_;
};

}  // namespace quilt

#endif  // QUILT_SRC_COORDINATOR_CHECKPOINT_RETENTION_H_
