// The coordinator's jobs: records in the store, their state machine, the
// exchange with workers, and which failed jobs were resumed or are due a
// restart (job_manager_restarts.cc). A planned job (program lowered, nodes chosen)
// is added PENDING; its nodes' workers receive their assignment with their
// next heartbeat and report their executor's state and per-step metrics
// with every heartbeat after; the job is RUNNING once an executor runs,
// SUCCEEDED when every executor succeeded, FAILED when one failed (the
// reason names the node) or a node of the job went Down, CANCELLED on
// request (the workers are told to stop their executors). Executors find
// each other through ExchangeAddresses. Every change is written to the
// store. Jobs that were PENDING or RUNNING when the coordinator stopped go
// on after it starts again: workers keep their executors running and
// report them when they reconnect (a node back without its executor, or
// Down, fails the job as it would have).
//
// Thread-safe. Watchers wait on a per-manager version counter.
#ifndef QUILT_SRC_COORDINATOR_JOB_MANAGER_H_
#define QUILT_SRC_COORDINATOR_JOB_MANAGER_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/quilt/v1/job.pb.h"
#include "proto/quilt/v1/services.pb.h"
#include "src/common/clock.h"
#include "src/coordinator/checkpoint_retention.h"
#include "src/coordinator/node_registry.h"
#include "src/coordinator/store/store.h"

namespace quilt {

struct NewJob {
  quilt::v1::JobSpec spec;
  std::string program;             // serialized DistributedProgram
  std::vector<std::string> world;  // node ids by rank
  std::string strategy;
  int micro_batches = 0;            // the program's (JobStatus.micro_batches)
  int micro_batches_in_flight = 0;  // its strategy's (JobStatus.micro_batches_in_flight)
  double predicted_step_time_s = 0;
  // Per node: what its devices were planned with (JobStatus.calibration).
  std::vector<std::string> calibration;
  // Per node: the plan's peak memory of its devices, summed.
  std::map<std::string, int64_t> predicted_memory_bytes;
  // The same per device.
  std::map<std::string, int64_t> predicted_device_memory_bytes;
  // The job it trains on from (JobStatus.resumed_from), if resumed.
  std::string resumed_from;
};

class JobManager {
 public:
  // A job checkpoints into <its checkpoint_dir or checkpoint_root>/<job id>.
  JobManager(CoordinatorStore* store, NodeRegistry* registry, Clock* clock,
             std::string checkpoint_root);

  // Loads the jobs from the store.
  absl::Status Load();

  // Adds a planned job; returns its id.
  absl::StatusOr<std::string> Add(NewJob job);

  // Queueing (JobSpec.queue; job_manager_queue.cc). Adds a job that waits
  // for room, QUEUED: no plan or nodes yet, `why` its status message;
  // `resumed_from`: the job it trains on from (JobStatus.resumed_from).
  absl::StatusOr<std::string> AddQueued(quilt::v1::JobSpec spec, const std::string& why,
                                        const std::string& resumed_from = "");
  // The queued jobs' ids in the order they start: the highest priority
  // first, then the oldest.
  std::vector<std::string> Queued() const;
  // How many queued jobs start before a job of `priority` queued now (those
  // of its priority or a higher one).
  int QueuedAhead(int32_t priority) const;
  // The ids of the jobs that hold nodes (neither ended nor queued), oldest
  // first: what a queued job's plan depends on (no status copied).
  std::vector<std::string> Holding() const;
  // A queued job's plan: it becomes PENDING on `job.world`, as Add adds a
  // job (stored first). Errors: NOT_FOUND, FAILED_PRECONDITION (no longer
  // queued: cancelled meanwhile), the store's (it stays queued).
  absl::Status StartQueued(const std::string& job_id, NewJob job);
  // A queued job waits on: `why` becomes its status message (stored when
  // it changed) if it is the queue's head; one behind says how many are
  // ahead instead. Nothing for a job no longer queued.
  void KeepQueued(const std::string& job_id, const std::string& why);
  // A queued job that cannot start as submitted: FAILED with `error`.
  void FailQueued(const std::string& job_id, const std::string& error);

  // Errors: NOT_FOUND.
  absl::StatusOr<quilt::v1::JobStatus> Get(const std::string& job_id) const;
  absl::StatusOr<quilt::v1::JobRecord> Record(const std::string& job_id) const;
  // The same with the model's bytes (spec.onnx) and the program, which
  // records leave in the store. Errors: NOT_FOUND.
  absl::StatusOr<quilt::v1::JobRecord> RecordWithModel(const std::string& job_id) const;
  // Whether the job may be deleted (it ended); its checkpoint directory.
  // Errors: NOT_FOUND, FAILED_PRECONDITION (not ended).
  absl::StatusOr<std::string> Deletable(const std::string& job_id) const;
  // Forgets an ended job (its record and model, in the store too); its
  // checkpoint directory. Errors: as Deletable, UNAVAILABLE (the store
  // failed: kept).
  absl::StatusOr<std::string> Delete(const std::string& job_id);
  // The summed loss of every settled step, from step 1 (NaN for steps lost
  // across a coordinator restart). Errors: NOT_FOUND, the store's.
  absl::StatusOr<std::vector<double>> Losses(const std::string& job_id) const;
  std::vector<quilt::v1::JobStatus> List() const;
  std::map<std::string, int> CountByState() const;

  // Errors: NOT_FOUND, FAILED_PRECONDITION (the job already ended),
  // INVALID_ARGUMENT (a reason with a control character or over 512 bytes).
  // `by`: the client that asked (named in the job's message).
  absl::Status Cancel(const std::string& job_id, const std::string& reason,
                      const std::string& by = "");

  // A worker's heartbeat: applies its task reports and adds the node's
  // assignments and cancellations to `response`.
  void OnHeartbeat(const quilt::v1::HeartbeatRequest& request,
                   quilt::v1::HeartbeatResponse* response);

  // Resuming (JobService.ResumeJob): records that `next` trains on from
  // `job_id`'s checkpoint (JobStatus.resumed_as). Errors: NOT_FOUND,
  // FAILED_PRECONDITION (already resumed: its resumed_as is named).
  absl::Status MarkResumed(const std::string& job_id, const std::string& next);
  // Errors: as MarkResumed, without marking.
  absl::Status CheckNotResumed(const std::string& job_id) const;
  // Failed jobs with restarts left (spec.max_restarts > 0), not resumed,
  // with no restart_error, whose failure (or this coordinator's start, if
  // later) is at least `after` old (a lost node no longer Ready) and that
  // it did not return in the last `after` (a restart that failed for a
  // passing reason is tried again then).
  std::vector<std::string> RestartsDue(absl::Duration after);
  // Why the restart after `job_id`'s failure cannot be made
  // (JobStatus.restart_error: not tried again); nothing once it is resumed.
  void MarkRestartFailed(const std::string& job_id, const std::string& error);

  // Writes every job changed since it was last stored (progress is stored
  // at most every few seconds): at shutdown.
  void Flush();

  // Fails running jobs whose nodes are Down, and jobs whose executor failed
  // because a peer did when no report of the peer's own failure came within
  // kRootCauseWait. Called by the liveness ticker.
  void CheckNodes();

  // Rendezvous of a job's executors: records `address` for `rank`; returns
  // every address once all ranks have one, else an empty list.
  // Errors: NOT_FOUND (unknown or ended job), INVALID_ARGUMENT (rank or
  // size not the job's).
  absl::StatusOr<std::vector<std::string>> ExchangeAddresses(const std::string& job_id, int rank,
                                                             int size, const std::string& address);

  // Waits until the job changed after `*version` (or `timeout`); returns
  // its status and sets `*version`. Errors: NOT_FOUND.
  absl::StatusOr<quilt::v1::JobStatus> WaitForChange(const std::string& job_id, int64_t* version,
                                                     absl::Duration timeout) const;

  static bool Ended(quilt::v1::JobState s);
  // PENDING or RUNNING: neither ended nor queued (the job has its nodes).
  static bool HoldsNodes(quilt::v1::JobState s);
  // Per node, the ids of the jobs in `jobs` that have not ended and run on
  // it (in the order given).
  static std::map<std::string, std::vector<std::string>> ActiveJobsByNode(
      const std::vector<quilt::v1::JobStatus>& jobs);
  static bool TaskEnded(quilt::v1::TaskState s);

  // How long a job whose executor failed because of a peer waits for the
  // peer's report (its cause) before it fails with the one it has.
  static constexpr absl::Duration kRootCauseWait = absl::Seconds(3);
  // The measured step time is a mean over at least this much of the
  // latest steps (seconds), and the step times kept at most so many.
  static constexpr double kStepTimeWindow = 10.0;
  static constexpr size_t kMaxStepTimes = 200000;
  // Executor errors caused by a failed peer (the transport's words).
  static constexpr absl::string_view kPeerFailed = ": the peer failed";
  // How long an ended job waits for steps from nodes that went silent
  // before their parts count as lost.
  static constexpr absl::Duration kLateStepsGrace = absl::Seconds(60);

 private:
  // `status` as answered now: with the seconds since the job last
  // progressed.
  quilt::v1::JobStatus Answered(quilt::v1::JobStatus status) const;
  // The message of a planned job until an executor runs.
  static constexpr absl::string_view kAwaitingExecutors =
      "waiting for the workers to start the executors";
  // The message of a queued job that became the head until the dispatcher
  // has planned it.
  static constexpr absl::string_view kQueueHeadPending =
      "first in the queue: checking whether it fits now";
  // The message of a job found running at start-up until a node reports.
  static constexpr absl::string_view kAwaitingReports =
      "the coordinator restarted; waiting for the job's nodes to report";

  struct Job {
    quilt::v1::JobRecord record;  // without the model's bytes and the program
    // The program, until every node of the job has been handed it.
    std::string program;
    int64_t version = 0;
    std::map<int64_t, std::pair<double, int>> loss_by_step;  // sum, ranks
    // Losses of steps losses_first, losses_first + 1, … not written yet.
    std::vector<double> losses_tail;
    int64_t losses_first = 1;
    std::vector<double> rank0_step_times;
    // Per node: the first step not applied yet (a retried heartbeat brings
    // steps again).
    std::map<std::string, int64_t> next_step;
    // Nodes that reported to this coordinator (the job does not succeed
    // before all have: after a restart their stored ends come before the
    // steps their workers send again).
    std::set<std::string> heard;
    // The last step any executor had reported when the job ended: steps up
    // to it still count after the end.
    int64_t end_step = 0;
    // Nodes this coordinator had not heard from when the job ended (after
    // a restart, their steps so far were not here): the steps their
    // executors had reached came before they could learn of the end, so
    // each one's first report after it extends end_step to its executor's
    // step, until the job is closed.
    std::set<std::string> unheard_at_end;
    // Cancelled while some node was unheard (above).
    bool cancelled_unheard = false;
    // It had ended when this coordinator loaded it (its steps are stored).
    bool loaded_ended = false;
    // When the late steps' grace began: the end, or for a job loaded ended
    // but open, the load (the time the coordinator was away does not
    // count: its workers could not send).
    absl::Time grace_from = absl::InfinitePast();
    // Ended, and no more steps will come (CloseEnded): steps through
    // end_step are settled, a part still missing is NaN.
    bool closed = false;
    absl::Time persisted = absl::InfinitePast();
    int64_t persisted_version = -1;
    // The first failure report caused by a peer, until the job ends.
    struct KnockOn {
      std::string node, message;
      absl::Time since;
    } knock_on;
    // The first executor reported stopped by a cancel this coordinator does
    // not know of (stored before a restart: a cancel, or the stop of an
    // ended job's other executors); a failure reported meanwhile wins.
    KnockOn stopped;
  };

  void ApplyReport(Job* job, const std::string& node, const quilt::v1::TaskReport& report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds and stores a job in `state`.
  absl::StatusOr<std::string> Insert(NewJob n, quilt::v1::JobState state, std::string message);
  // Sets each queued job's message but the first's to how many are queued
  // before it (after one left the queue).
  void RenumberQueue() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The record's plan from `n`: strategy, predictions, nodes and tasks.
  static void SetPlan(Job* job, NewJob* n);
  // A failure is recorded among the cluster's events against `node` (the
  // job's first node when empty).
  void Finish(Job* job, quilt::v1::JobState state, const std::string& message,
              const std::string& node = "") ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Wakes watchers; writes the record now when `durable`, else at most
  // every few seconds (progress only).
  void Changed(Job* job, bool durable = true) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The last step whose loss is settled: every node sent its part or went
  // past it (a part missing then is lost for good: NaN); end_step once the
  // job is closed.
  static int64_t Settled(const Job& job);
  // Closes the ended jobs whose nodes have nothing more to send: each has
  // sent its steps through the end or is Down (`down`), or the job ended
  // kLateStepsGrace ago. `down`: the Down nodes (and why).
  void CloseEnded(const std::map<std::string, std::string>& down)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The first step of `node` not applied yet.
  static int64_t NextStep(const Job& job, const std::string& node);
  // Writes the record (failures are logged; the next change tries again).
  absl::Status Persist(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Job* Find(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // At Load: a resumed job's resumed_from marks its old job resumed (a
  // coordinator that stopped between adding the new job and marking the
  // old one).
  void RelinkResumed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FAILED_PRECONDITION naming the job `job_id` was resumed as, if any.
  static absl::Status NotResumed(const Job& job, const std::string& job_id);
  // Marks `job` resumed as `next` (no restart error then) and stores it.
  void SetResumed(Job* job, const std::string& next) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  CoordinatorStore* store_;
  NodeRegistry* registry_;
  Clock* clock_;
  std::string checkpoint_root_;
  mutable absl::Mutex mu_;
  std::map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> order_ ABSL_GUARDED_BY(mu_);
  // Queued() under the lock.
  std::vector<std::string> QueueOrder() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  // Jobs RestartsDue returned, and when.
  std::map<std::string, absl::Time> restarts_tried_ ABSL_GUARDED_BY(mu_);
  // When Load ran: a failure before it counts from then (the nodes have
  // been reconnecting since).
  absl::Time loaded_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Removes the checkpoints beyond those a job keeps, as it passes new ones.
  CheckpointRetention retention_;
};

}  // namespace quilt

#endif  // QUILT_SRC_COORDINATOR_JOB_MANAGER_H_
