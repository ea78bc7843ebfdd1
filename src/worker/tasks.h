// The worker's executors: one supervised quilt-executor process per job
// assigned to this node. Start() writes the assignment's program into the
// job's directory under the work directory and starts the executor with
// the coordinator as its rendezvous, the job's data, checkpoint settings
// and this node's emulated slowdown; its stdout (one JSON line per step)
// is read on a thread, its stderr goes to executor.log in the job's
// directory, after a line of the worker's that numbers the run
// (log_tail.h's RunMarker). Each executor's state and the steps not yet sent are
// collected by Reports(); the worker sends them with its next heartbeat.
// A step's loss is kept until the coordinator says it stored it (a
// coordinator that restarts asks for the steps it lost again).
// An executor that finishes no step for the stall timeout (a hung
// checkpoint write on a dead file server, a stopped process) is killed and
// its job fails saying so, instead of running for ever.
// An executor ends when it exits (not when its output closes: a process it
// started may hold that open); signals go to its process group, so what
// it started (under a wrapper script) stops with it.
// Cancel() stops an executor (SIGTERM, SIGKILL when asked again 5 s on); an
// executor dies with the worker (PR_SET_PDEATHSIG), so a killed worker
// never leaves a job half-running on its node.
//
// Thread-safe.
#ifndef QUILT_SRC_WORKER_TASKS_H_
#define QUILT_SRC_WORKER_TASKS_H_

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/quilt/v1/job.pb.h"

namespace quilt {

struct TaskRunnerOptions {
  std::string executor_path;        // quilt-executor
  std::string work_dir;             // one directory per job below it
  std::string coordinator_address;  // the executors' rendezvous
  // How the executors reach it: --tls-ca, --token-file, --tls-server-name,
  // --tls-cert, --tls-key.
  std::vector<std::string> security_flags;
  // Emulated slowdown of this node's devices (1 = none).
  double compute_slowdown = 1;
  std::vector<std::string> device_ids;
  int threads = 1;
  // An executor with no finished step for this long (nor for 20 times its
  // slowest step or its predicted step) is killed as stalled.
  absl::Duration stall_timeout = absl::Minutes(10);
  // Called when there is something new to report (a step, an exit).
  std::function<void()> on_change;
};

class TaskRunner {
 public:
  explicit TaskRunner(TaskRunnerOptions options);
  ~TaskRunner();  // stops every executor

  // Starts the executor of an assignment (nothing if the job is known).
  void Start(const quilt::v1::TaskAssignment& assignment);
  // Stops the job's executor; its report says CANCELLED.
  void Cancel(const std::string& job_id);
  // Steps one report carries at most per job.
  static constexpr size_t kMaxReportSteps = 4000;
  // Every known job's state with the steps the coordinator has not
  // received yet (at most kMaxReportSteps per job).
  std::vector<quilt::v1::TaskReport> Reports() const;
  // Whether a job has a full report's worth of steps still to send (after
  // the coordinator was away): the worker reports again soon.
  bool Backlogged() const;
  // The coordinator received `reports` and answered with `receipts`: a
  // job's steps are sent from its receipt's next step on, and those
  // through its stored step forgotten (all of a report without a
  // receipt); a job whose end was reported and whose steps are all
  // forgotten is forgotten.
  void Ack(const std::vector<quilt::v1::TaskReport>& reports,
           const std::vector<quilt::v1::TaskReceipt>& receipts);
  // Executors still running.
  int running() const;
  // Where job `job_id`'s executor writes its log (this run's, or the last
  // run's on this node); empty for an id that is no plain name.
  std::string LogPath(const std::string& job_id) const;
  // Kills the executors that made no progress for the stall timeout.
  void KillStalled();
  // The worker is stopping: every running job is reported FAILED with
  // `reason` from now on (its executor is stopped with the runner).
  void Abandon(const std::string& reason);

 private:
  struct Task {
    std::string job_id;
    std::string dir;
    pid_t pid = -1;
    bool exited = false;  // reaped
    int out_fd = -1;
    quilt::v1::TaskState state = quilt::v1::TASK_STATE_STARTING;
    bool cancelled = false;
    absl::Time cancelled_at;
    int64_t step = 0;
    absl::Time last_progress;   // start, or the last finished step
    double slowest_step_s = 0;  // measured, or the plan's prediction
    std::string stop_reason;    // why the runner stopped it (stalled, the worker stopping)
    // Steps finished and not known to be stored, from step first_kept;
    // the coordinator has received those before step next_send.
    int64_t first_kept = 1;
    int64_t next_send = 1;
    std::vector<double> loss_parts, step_times;
    int64_t peak_bytes = 0;  // the most its devices held in a step
    std::string message;
    std::thread reader;
  };

  void Read(Task* task);
  // Running, and neither cancelled nor already being stopped.
  static bool Stoppable(const Task& t);

  TaskRunnerOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Task>> tasks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace quilt

#endif  // QUILT_SRC_WORKER_TASKS_H_
