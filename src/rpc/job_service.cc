#include "src/rpc/job_service.h"

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "src/cluster/topology.h"
#include "src/common/logging.h"
#include "src/common/status.h"
#include "src/coordinator/job_export.h"
#include "src/coordinator/job_model.h"
#include "src/coordinator/job_submission.h"
#include "src/coordinator/live_cluster.h"
#include "src/planner/plan.h"
#include "src/rpc/handler_util.h"

namespace quilt::rpc {
namespace {

// One plan at a time (each is CPU-bound), a few more waiting.
constexpr int kPlanningThreads = 1;
constexpr int kMaxWaitingPlans = 4;

}  // namespace

JobServiceImpl::JobServiceImpl(Coordinator* coordinator, size_t max_request_bytes)
    : coordinator_(coordinator),
      max_request_bytes_(max_request_bytes),
      planning_(kPlanningThreads, kMaxWaitingPlans) {}

JobServiceImpl::~JobServiceImpl() { planning_.Shutdown(); }

grpc::ServerUnaryReactor* JobServiceImpl::PlanJob(grpc::CallbackServerContext* ctx,
                                                  const grpc::ByteBuffer* raw_request,
                                                  grpc::ByteBuffer* raw_response) {
  auto request = std::make_shared<quilt::v1::PlanJobRequest>();
  absl::Status parsed = ParseRequest(*raw_request, max_request_bytes_, "PlanJob", request.get());
  if (!parsed.ok()) return Finish(ctx, parsed);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const bool taken = planning_.Submit([this, request, reactor, raw_response] {
    quilt::v1::PlanReport report;
    absl::Status s = Plan(*request, &report);
    if (s.ok()) {
      bool own = false;
      grpc::Status ser =
          grpc::SerializationTraits<quilt::v1::PlanReport>::Serialize(report, raw_response, &own);
      if (!ser.ok()) s = FromGrpcStatus(ser);
    }
    reactor->Finish(ToGrpcStatus(s));
  });
  if (!taken) {
    reactor->Finish(ToGrpcStatus(planning_.accepting()
                                     ? absl::ResourceExhaustedError(absl::StrCat(
                                           "the coordinator is already planning ",
                                           planning_.pending(), " jobs; try again later"))
                                     : absl::UnavailableError("the coordinator is shutting down")));
  }
  return reactor;
}

absl::Status JobServiceImpl::Plan(const quilt::v1::PlanJobRequest& request,
                                  quilt::v1::PlanReport* report) {
  ASSIGN_OR_RETURN(Graph graph, TrainingGraphForJob(request.spec()));
  ASSIGN_OR_RETURN(quilt::v1::ClusterSpec spec, LiveClusterSpec(*coordinator_->registry()));
  absl::StatusOr<Topology> topo = Topology::Build(spec);
  if (!topo.ok()) return Annotate(topo.status(), "the live cluster");
  PlanOptions options;
  options.global_batch = request.spec().global_batch();
  options.strategy = request.strategy().empty() ? "all" : request.strategy();
  if (request.time_budget_s() < 0 || request.time_budget_s() > 600) {
    return absl::InvalidArgumentError("time_budget_s must be in [0, 600]");
  }
  if (request.time_budget_s() > 0) options.search.time_budget_s = request.time_budget_s();
  if (request.max_plans() != 0)
    options.search.max_evaluations = std::max<int64_t>(0, request.max_plans());
  options.search.seed = request.seed() == 0 ? 1 : request.seed();
  ASSIGN_OR_RETURN(PlanResult result, quilt::Plan(graph, *topo, options));
  QLOG_INFO("planned {} (batch {}) on {} node(s): best {}, {:.2f} s", graph.name,
            options.global_batch, spec.nodes_size(), result.report.best(),
            result.report.planning_wall_s());
  *report = std::move(result.report);
  return absl::OkStatus();
}

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext*,
                                       const quilt::v1::SubmitJobRequest* request,
                                       quilt::v1::SubmitJobResponse* response) {
  absl::Notification done;
  absl::StatusOr<std::string> id = absl::UnknownError("not run");
  const bool taken = planning_.Submit([&] {
    SubmissionOptions options;
    absl::StatusOr<NewJob> job = PrepareJob(request->spec(), *coordinator_->registry(), options);
    id = job.ok() ? coordinator_->jobs()->Add(std::move(*job)) : job.status();
    done.Notify();
  });
  if (!taken) {
    return ToGrpcStatus(planning_.accepting()
                            ? absl::ResourceExhaustedError(
                                  absl::StrCat("the coordinator is already planning ",
                                               planning_.pending(), " jobs; try again later"))
                            : absl::UnavailableError("the coordinator is shutting down"));
  }
  done.WaitForNotification();
  if (!id.ok()) return ToGrpcStatus(id.status());
  response->set_job_id(*id);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext*, const quilt::v1::GetJobRequest* request,
                                    quilt::v1::JobStatus* response) {
  absl::StatusOr<quilt::v1::JobStatus> st = coordinator_->jobs()->Get(request->job_id());
  if (!st.ok()) return ToGrpcStatus(st.status());
  *response = std::move(*st);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext*, const quilt::v1::ListJobsRequest*,
                                      quilt::v1::ListJobsResponse* response) {
  for (quilt::v1::JobStatus& st : coordinator_->jobs()->List()) {
    *response->add_jobs() = std::move(st);
  }
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::WatchJob(grpc::ServerContext* ctx,
                                      const quilt::v1::WatchJobRequest* request,
                                      grpc::ServerWriter<quilt::v1::JobStatus>* writer) {
  int64_t version = -1;
  while (!ctx->IsCancelled()) {
    const int64_t before = version;
    absl::StatusOr<quilt::v1::JobStatus> st =
        coordinator_->jobs()->WaitForChange(request->job_id(), &version, absl::Seconds(1));
    if (!st.ok()) return ToGrpcStatus(st.status());
    if (version != before && !writer->Write(*st)) break;  // the client went away
    if (JobManager::Ended(st->state())) break;
  }
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext*,
                                       const quilt::v1::CancelJobRequest* request,
                                       quilt::v1::CancelJobResponse*) {
  return ToGrpcStatus(coordinator_->jobs()->Cancel(request->job_id(), request->reason()));
}

grpc::Status JobServiceImpl::ExportJob(grpc::ServerContext*,
                                       const quilt::v1::ExportJobRequest* request,
                                       quilt::v1::ExportJobResponse* response) {
  absl::StatusOr<quilt::v1::JobRecord> record = coordinator_->jobs()->Record(request->job_id());
  if (!record.ok()) return ToGrpcStatus(record.status());
  absl::StatusOr<std::string> onnx = ExportTrainedOnnx(*record);
  if (!onnx.ok()) return ToGrpcStatus(onnx.status());
  response->set_onnx(std::move(*onnx));
  return grpc::Status::OK;
}

}  // namespace quilt::rpc
