// Profiling submitted models on this node (services.proto ModelProfile):
// each run's one-device program is written under the work directory and
// run by quilt-executor alone — a directory rendezvous, synthetic data,
// this node's kernel threads and emulated slowdown, as the job's executor
// will run — and the medians of its per-step times after warm-up go back
// with the next heartbeat. Profiles run one at a time in the order asked;
// a run that fails or outlasts its time limit fails the profile with the
// executor's last error line.
//
// Thread-safe.
#ifndef QUILT_SRC_WORKER_MODEL_PROFILER_H_
#define QUILT_SRC_WORKER_MODEL_PROFILER_H_

#include <sys/types.h>

#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/quilt/v1/services.pb.h"

namespace quilt {

struct ProfilerOptions {
  std::string executor_path;  // quilt-executor
  std::string work_dir;       // profiles/<id>/ below it
  std::string node_id;
  int threads = 1;
  // Emulated slowdown of this node's devices (1 = none).
  double compute_slowdown = 1;
  // Limit of each run of the executor.
  absl::Duration run_timeout = absl::Seconds(120);
  // Called when a profile has finished.
  std::function<void()> on_result;
  // Executors of jobs running on the node now (null: none): a profile taken
  // while some run says so and is not kept.
  std::function<int()> jobs_running;
};

class ModelProfiler {
 public:
  explicit ModelProfiler(ProfilerOptions options);
  ~ModelProfiler();  // kills a running executor
  // Queues a profile (nothing if its id is known).
  void Start(const quilt::v1::ModelProfile& profile);
  std::vector<quilt::v1::ModelProfileResult> Results() const;
  // The coordinator has these: they are not sent again.
  void Ack(const std::vector<quilt::v1::ModelProfileResult>& sent);

 private:
  void Loop();
  quilt::v1::ModelProfileResult Run(const quilt::v1::ModelProfile& profile);
  // One run of the executor; its medians into `out`.
  absl::Status RunOne(const quilt::v1::ModelProfile& profile, int index,
                      quilt::v1::ModelProfileResult::Run* out);

  const ProfilerOptions options_;
  mutable absl::Mutex mu_;
  std::deque<quilt::v1::ModelProfile> queue_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> known_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, quilt::v1::ModelProfileResult> finished_ ABSL_GUARDED_BY(mu_);
  std::vector<quilt::v1::ModelProfileResult> results_ ABSL_GUARDED_BY(mu_);
  pid_t child_ ABSL_GUARDED_BY(mu_) = -1;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace quilt

#endif  // QUILT_SRC_WORKER_MODEL_PROFILER_H_
