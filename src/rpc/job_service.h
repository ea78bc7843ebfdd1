// gRPC adapter of JobService (clients → coordinator). PlanJob builds the
// job's training graph, takes the live cluster (Ready nodes) and returns
// every baseline's prediction; SubmitJob checks and plans the same way,
// then hands the job to the JobManager. Planning is CPU-heavy (seconds for
// large models), so it runs on a small work queue instead of gRPC's
// threads, and a full queue answers RESOURCE_EXHAUSTED at once. GetJob,
// ListJobs, WatchJob (a stream of every change until the job ends),
// GetJobLosses, CancelJob, ExportJob and DeleteJob read and change the
// JobManager's state; GetJobLogs asks the job's workers for the end of
// their executors' logs (JobLogs), on a queue of its own; ResumeJob submits an ended job again from
// its checkpoint, and failed jobs with restarts left are resumed so on their own
// (JobSpec.max_restarts). A submission with JobSpec.queue that fits only once other jobs leave room
// waits QUEUED and is started by the dispatcher (job_queue.cc).
//
// A request that plans may first wait for the workers' profiles of its
// model (seconds, or profile_timeout_ms for a node that does not answer),
// so several planning requests run at once, and only their planner runs
// take turns (one at a time: each is CPU-bound). Exports read checkpoint
// files on a queue of their own.
#ifndef QUILT_SRC_RPC_JOB_SERVICE_H_
#define QUILT_SRC_RPC_JOB_SERVICE_H_

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "proto/quilt/v1/services.grpc.pb.h"
#include "src/common/work_queue.h"
#include "src/coordinator/coordinator.h"
#include "src/coordinator/job_submission.h"

namespace quilt::rpc {

// WatchJob (a server stream) is the one synchronous method: a request
// that does not parse gets gRPC's UNIMPLEMENTED there.
using JobServiceBase = quilt::v1::JobService::WithRawCallbackMethod_PlanJob<
    quilt::v1::JobService::WithRawCallbackMethod_SubmitJob<
        quilt::v1::JobService::WithRawCallbackMethod_GetJob<
            quilt::v1::JobService::WithRawCallbackMethod_ListJobs<
                quilt::v1::JobService::WithRawCallbackMethod_CancelJob<
                    quilt::v1::JobService::WithRawCallbackMethod_ExportJob<
                        quilt::v1::JobService::WithRawCallbackMethod_DeleteJob<
                            quilt::v1::JobService::WithRawCallbackMethod_GetJobLosses<
                                quilt::v1::JobService::WithRawCallbackMethod_ResumeJob<
                                    quilt::v1::JobService::WithRawCallbackMethod_GetJobLogs<
                                        quilt::v1::JobService::Service>>>>>>>>>>;

class JobServiceImpl final : public JobServiceBase {
 public:
  // `max_request_bytes`: the largest PlanJob request (graphs and ONNX files
  // travel inside it).
  JobServiceImpl(Coordinator* coordinator, size_t max_request_bytes);
  ~JobServiceImpl() override;

  grpc::ServerUnaryReactor* PlanJob(grpc::CallbackServerContext* ctx,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* ctx,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ExportJob(grpc::CallbackServerContext* ctx,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* DeleteJob(grpc::CallbackServerContext* ctx,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetJobLosses(grpc::CallbackServerContext* ctx,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ResumeJob(grpc::CallbackServerContext* ctx,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetJobLogs(grpc::CallbackServerContext* ctx,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::Status WatchJob(grpc::ServerContext* ctx, const quilt::v1::WatchJobRequest* request,
                        grpc::ServerWriter<quilt::v1::JobStatus>* writer) override;

  // Runs the accepted plans and exports to completion; call before the
  // server shuts down.
  void Drain() {
    stopping_.store(true);  // watches and the restarts end
    if (restarter_.joinable()) restarter_.join();
    planning_.Shutdown();
    exports_.Shutdown();
    logs_.Shutdown();
  }

 private:
  // `abandoned`: whether the client has left (checked after profiling).
  absl::Status Plan(const quilt::v1::PlanJobRequest& request,
                    const std::function<bool()>& abandoned, quilt::v1::PlanReport* report);
  // A cause that passes (the store, a full queue, a deadline): what failed
  // is tried again later.
  static bool Passing(const absl::Status& s);
  // What every submission plans with: the planner held, the profiles'
  // timeout, and `ctx`'s client leaving (null: none; no loads, no place).
  SubmissionOptions Planning(grpc::CallbackServerContext* ctx);
  // Checks, plans and adds a job (SubmitJob, ResumeJob); its id. `ctx`:
  // the client's call (null for a restart). `resumed_from`: the job it
  // trains on from, checked not resumed and marked so while the planner is
  // held (two resumes of one job take turns there: the second is refused).
  absl::Status Submit(const quilt::v1::JobSpec& spec, grpc::CallbackServerContext* ctx,
                      std::string* job_id, const std::string& resumed_from = "");
  // ResumeJob's work (job_resume.cc); `automatic`: a restart after a
  // failure (the new job has one restart less), `ctx` null then; `queue`:
  // the new job queues (JobSpec.queue) whatever the old one did.
  absl::Status Resume(const std::string& job_id, const std::string& strategy, bool automatic,
                      grpc::CallbackServerContext* ctx, quilt::v1::ResumeJobResponse* response,
                      bool queue = false);
  // Queueing (job_queue.cc). Adds `spec` QUEUED (`why`: its message) once
  // a plan fits the idle cluster. Errors: PrepareJob's, the store's.
  // `resumed_from` as Submit's.
  absl::Status Enqueue(const quilt::v1::JobSpec& spec, grpc::CallbackServerContext* ctx,
                       const std::string& why, std::string* job_id,
                       const std::string& resumed_from);
  // Plans the queue's head on the planning queue when what its plan sees
  // changed (QueueView) or kQueueRetry passed, and backfills behind it
  // when it finds no room; one at a time.
  void DispatchQueued();
  std::string QueueView() const;
  // Plans queued job `id` with the jobs on the nodes now and starts it if
  // a plan fits; else it waits on (why: its message), or fails for a
  // cause that is not passing (its dataset is gone, say). OK when it
  // started; FAILED_PRECONDITION when it waits for room; ABORTED when it
  // is no longer queued or failed. With `backfill_by` (a job behind the
  // head): it starts only if its predicted run (steps × predicted step
  // time × kBackfillMargin + kBackfillStart) ends by then, and is left as
  // it was otherwise.
  absl::Status StartQueued(const std::string& id,
                           std::optional<absl::Time> backfill_by = std::nullopt);
  // After the head of `queued` found no room (and is still the head): the
  // first of the next kBackfillCandidates jobs that StartQueued backfills
  // by the first predicted end of a job holding nodes.
  void Backfill(std::vector<std::string> queued);
  // UNAVAILABLE when a node of `world` is draining.
  absl::Status RefuseDrained(const std::vector<std::string>& world) const;
  // Until Drain: restarts failed jobs with restarts left, on the planning
  // queue, once their failure is old enough for a lost node to be no
  // longer Ready (not_ready_after_ms and a second).
  void RestartLoop();
  // Runs `work` on `queue` and finishes the call with it.
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* OnQueue(WorkQueue* queue, grpc::CallbackServerContext* ctx,
                                    const grpc::ByteBuffer* raw_request,
                                    grpc::ByteBuffer* raw_response, const char* method,
                                    std::function<absl::Status(const Request&, Response*)> work);

  Coordinator* coordinator_;
  size_t max_request_bytes_;
  WorkQueue planning_;
  WorkQueue exports_;
  WorkQueue logs_;  // GetJobLogs waits for heartbeats
  // Held while the planner runs: one plan computes at a time.
  absl::Mutex planner_;
  std::atomic<bool> stopping_{false};
  std::thread restarter_;
  // The dispatcher's state (its thread, restarter_, only).
  static constexpr absl::Duration kQueueRetry = absl::Minutes(5);
  static constexpr size_t kBackfillCandidates = 2;
  static constexpr double kBackfillMargin = 1.5;
  static constexpr absl::Duration kBackfillStart = absl::Seconds(30);
  std::atomic<bool> dispatching_{false};
  std::atomic<bool> queue_poked_{false};  // a job was queued
  std::string queue_seen_;
  std::string queue_full_warned_;  // the head last warned of a full queue
  absl::Time queue_tried_ = absl::InfinitePast();
};

}  // namespace quilt::rpc

#endif  // QUILT_SRC_RPC_JOB_SERVICE_H_
