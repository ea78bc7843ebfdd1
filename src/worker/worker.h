// The worker daemon's membership loop: registers this node with the
// coordinator (with a fresh random incarnation per process), heartbeats at
// the period the coordinator asks for, and registers again — with jittered
// exponential backoff — when the coordinator is unreachable, forgot the node
// (NOT_FOUND) or calls this incarnation stale (ABORTED). With a TaskRunner,
// heartbeats carry its executors' reports and bring back the node's job
// assignments and cancellations; Wake() sends the next heartbeat early (at
// most every 100 ms) so that steps and exits reach the coordinator soon.
// Job logs the coordinator asks for (GetJobLogs) go back with the next
// heartbeat, sent early too.
// Stop() sends a last heartbeat that says the worker is stopping (with its
// executors' final reports): the coordinator takes the node Down at once.
//
// Threading: Start() runs the loop on its own thread; Stop() wakes and joins
// it. Accessors are thread-safe.
#ifndef QUILT_SRC_WORKER_WORKER_H_
#define QUILT_SRC_WORKER_WORKER_H_

#include <atomic>
#include <functional>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "proto/quilt/v1/cluster.pb.h"
#include "src/worker/coordinator_interface.h"
#include "src/worker/link_probe.h"
#include "src/worker/model_profiler.h"
#include "src/worker/tasks.h"

namespace quilt {

struct WorkerOptions {
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
  // Called once, after the first successful registration.
  std::function<void()> on_first_registration;
  // The node's executors and link probes (optional; must outlive the
  // worker).
  TaskRunner* tasks = nullptr;
  ProbeRunner* probes = nullptr;
  // Profiles of submitted models (optional; must outlive the worker).
  ModelProfiler* profiler = nullptr;
};

class Worker {
 public:
  // `coordinator` must outlive the worker.
  Worker(quilt::v1::NodeInfo node, uint64_t incarnation, CoordinatorInterface* coordinator,
         WorkerOptions options);
  ~Worker();

  void Start();
  void Stop();
  // Heartbeat soon (something changed).
  void Wake();

  uint64_t incarnation() const { return incarnation_; }
  bool registered() const { return registered_.load(); }
  // Registrations that succeeded so far (1 after the first).
  int registrations() const { return registrations_.load(); }

 private:
  void Loop();
  // Waits `d` or until Stop(); false when stopping.
  bool Sleep(absl::Duration d);
  // Waits up to `d` for a connection to the coordinator (sooner when it is
  // up); false when stopped.
  bool AwaitCoordinator(absl::Duration d);

  const quilt::v1::NodeInfo node_;
  const uint64_t incarnation_;
  CoordinatorInterface* const coordinator_;
  const WorkerOptions options_;
  std::atomic<bool> registered_{false};
  std::atomic<int> registrations_{0};
  absl::Notification stop_;
  absl::Mutex wake_mu_;
  bool woken_ ABSL_GUARDED_BY(wake_mu_) = false;
  std::thread thread_;
};

}  // namespace quilt

#endif  // QUILT_SRC_WORKER_WORKER_H_
