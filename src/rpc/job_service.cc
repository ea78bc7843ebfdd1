#include "src/rpc/job_service.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "src/cluster/topology.h"
#include "src/common/logging.h"
#include "src/common/status.h"
#include "src/coordinator/checkpoint_dir.h"
#include "src/coordinator/job_export.h"
#include "src/coordinator/job_model.h"
#include "src/coordinator/job_submission.h"
#include "src/coordinator/live_cluster.h"
#include "src/planner/plan.h"
#include "src/rpc/handler_util.h"
#include "src/rpc/security.h"
#include "src/rpc/server.h"

namespace quilt::rpc {
namespace {

// Planning requests in progress at once (most of a request's time may be
// spent waiting for profiles; the planner itself runs one at a time), and
// a few more waiting.
constexpr int kPlanningThreads = 4;
constexpr int kMaxWaitingPlans = 4;
constexpr int kExportThreads = 1;
constexpr int kMaxWaitingExports = 4;
constexpr int kLogThreads = 2;
constexpr int kMaxWaitingLogs = 8;
constexpr int kDefaultLogLines = 100;
constexpr int kMaxLogLines = 10000;
// Requests that carry ids only.
constexpr size_t kMaxSmallRequestBytes = 64 << 10;

}  // namespace

JobServiceImpl::JobServiceImpl(Coordinator* coordinator, size_t max_request_bytes)
    : coordinator_(coordinator),
      max_request_bytes_(max_request_bytes),
      planning_(kPlanningThreads, kMaxWaitingPlans),
      exports_(kExportThreads, kMaxWaitingExports),
      logs_(kLogThreads, kMaxWaitingLogs) {
  restarter_ = std::thread([this] { RestartLoop(); });
}

JobServiceImpl::~JobServiceImpl() { Drain(); }

template <typename Request, typename Response>
grpc::ServerUnaryReactor* JobServiceImpl::OnQueue(
    WorkQueue* queue, grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw_request,
    grpc::ByteBuffer* raw_response, const char* method,
    std::function<absl::Status(const Request&, Response*)> work) {
  auto request = std::make_shared<Request>();
  absl::Status parsed = ParseRequest(*raw_request, max_request_bytes_, method, request.get());
  if (!parsed.ok()) return Finish(ctx, parsed);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const bool taken = queue->Submit([ctx, request, reactor, raw_response, work] {
    if (ctx->IsCancelled()) {  // the client left while this waited its turn
      reactor->Finish(ToGrpcStatus(absl::CancelledError("the client gave up waiting")));
      return;
    }
    Response response;
    absl::Status s = work(*request, &response);
    if (s.ok()) {
      bool own = false;
      grpc::Status ser =
          grpc::SerializationTraits<Response>::Serialize(response, raw_response, &own);
      if (!ser.ok()) s = FromGrpcStatus(ser);
    }
    reactor->Finish(ToGrpcStatus(s));
  });
  if (!taken) {
    reactor->Finish(ToGrpcStatus(
        queue->accepting()
            ? absl::ResourceExhaustedError(absl::StrCat("the coordinator is already ",
                                                        queue == &planning_ ? "planning "
                                                        : queue == &logs_ ? "fetching the logs of "
                                                                          : "exporting ",
                                                        queue->pending(), " jobs; try again later"))
            : absl::UnavailableError("the coordinator is shutting down")));
  }
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::PlanJob(grpc::CallbackServerContext* ctx,
                                                  const grpc::ByteBuffer* raw_request,
                                                  grpc::ByteBuffer* raw_response) {
  return OnQueue<quilt::v1::PlanJobRequest, quilt::v1::PlanReport>(
      &planning_, ctx, raw_request, raw_response, "PlanJob",
      [this, ctx](const quilt::v1::PlanJobRequest& r, quilt::v1::PlanReport* report) {
        return Plan(
            r, [ctx] { return ctx->IsCancelled(); }, report);
      });
}

absl::Status JobServiceImpl::Plan(const quilt::v1::PlanJobRequest& request,
                                  const std::function<bool()>& abandoned,
                                  quilt::v1::PlanReport* report) {
  ASSIGN_OR_RETURN(Graph graph, TrainingGraphForJob(request.spec()));
  ASSIGN_OR_RETURN(quilt::v1::ClusterSpec spec,
                   LiveClusterSpec(*coordinator_->registry(), coordinator_->links()));
  std::vector<std::string> calibration;
  std::set<std::string> measured_loaded;
  if (coordinator_->config().profile_timeout_ms > 0) {
    ASSIGN_OR_RETURN(
        spec, ProfiledCluster(graph, request.spec().global_batch(), *coordinator_->registry(),
                              coordinator_->links(), coordinator_->profiles(),
                              absl::Milliseconds(coordinator_->config().profile_timeout_ms),
                              &calibration, abandoned, &measured_loaded));
    if (abandoned()) return absl::CancelledError("the client gave up waiting");
  }
  // As a job submitted now would share the nodes with the jobs on them.
  for (std::string& line :
       ShareBusyNodes(NodeLoads(coordinator_->jobs()->List()), measured_loaded, &spec)) {
    calibration.push_back(std::move(line));
  }
  absl::StatusOr<Topology> topo = Topology::Build(spec);
  if (!topo.ok()) return Annotate(topo.status(), "the live cluster");
  PlanOptions options;
  options.global_batch = request.spec().global_batch();
  options.strategy = request.strategy().empty() ? "all" : request.strategy();
  if (request.time_budget_s() < 0 || request.time_budget_s() > 600) {
    return absl::InvalidArgumentError("time_budget_s must be in [0, 600]");
  }
  options.search.time_budget_s = request.time_budget_s() > 0
                                     ? request.time_budget_s()
                                     : coordinator_->config().plan_time_budget_ms / 1000.0;
  if (request.max_plans() != 0)
    options.search.max_evaluations = std::max<int64_t>(0, request.max_plans());
  options.search.seed = request.seed() == 0 ? 1 : request.seed();
  if (request.groups() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("groups must be 0 (by cluster size) or more, got ", request.groups()));
  }
  options.search.target_groups = request.groups();
  options.accumulate = !request.no_micro_batches();
  options.program_with_graph = false;  // a report only
  ASSIGN_OR_RETURN(PlanResult result, PlanHolding(&planner_, graph, *topo, options));
  QLOG_INFO("planned {} (batch {}) on {} node(s): best {}, {:.2f} s", graph.name,
            options.global_batch, spec.nodes_size(), result.report.best(),
            result.report.planning_wall_s());
  *report = std::move(result.report);
  for (const std::string& line : calibration) report->add_calibration(line);
  return absl::OkStatus();
}

SubmissionOptions JobServiceImpl::Planning(grpc::CallbackServerContext* ctx) {
  SubmissionOptions options;
  options.planner_lock = &planner_;
  options.profile_timeout = absl::Milliseconds(coordinator_->config().profile_timeout_ms);
  options.time_budget_s = coordinator_->config().plan_time_budget_ms / 1000.0;
  options.abandoned = [ctx] { return ctx != nullptr && ctx->IsCancelled(); };
  return options;
}

absl::Status JobServiceImpl::Submit(const quilt::v1::JobSpec& spec,
                                    grpc::CallbackServerContext* ctx, std::string* job_id,
                                    const std::string& resumed_from) {
  SubmissionOptions options = Planning(ctx);
  options.loads = [this] { return NodeLoads(coordinator_->jobs()->List()); };
  // Added while the planner is held: the next submission's plan counts
  // this job on its nodes.
  options.place = [&](NewJob&& job) -> absl::Status {
    // A client that gave up (its deadline, Ctrl-C) never learns the job's
    // id: a job it would submit again is not started.
    if (ctx != nullptr && ctx->IsCancelled()) {
      QLOG_INFO("submission of '{}' dropped: the client gave up waiting", spec.name());
      return absl::CancelledError("the client gave up waiting; the job was not started");
    }
    // A node drained while the job was planned takes no new job: the
    // submission is refused (an automatic restart is tried again later).
    RETURN_IF_ERROR(RefuseDrained(job.world));
    if (!resumed_from.empty()) RETURN_IF_ERROR(coordinator_->jobs()->CheckNotResumed(resumed_from));
    job.resumed_from = resumed_from;
    ASSIGN_OR_RETURN(std::string id, coordinator_->jobs()->Add(std::move(job)));
    if (!resumed_from.empty()) {
      if (absl::Status marked = coordinator_->jobs()->MarkResumed(resumed_from, id); !marked.ok()) {
        (void)coordinator_->jobs()->Cancel(id, "its job could not be marked resumed");
        return marked;
      }
    }
    if (ctx != nullptr && ctx->IsCancelled()) {
      // It left while the job was stored: the job is ended before any
      // worker hears of it.
      (void)coordinator_->jobs()->Cancel(id, "the client gave up waiting for the submission");
      return absl::CancelledError("the client gave up waiting; the job was not started");
    }
    *job_id = id;
    return absl::OkStatus();
  };
  // (A resumed job, and a restart, queue as the job they go on from did.)
  const bool queueing = spec.queue();
  // First in, first out within a priority: behind the jobs queued already
  // of its priority or a higher one.
  const int ahead = queueing ? coordinator_->jobs()->QueuedAhead(spec.priority()) : 0;
  if (ahead > 0) {
    return Enqueue(spec, ctx, absl::StrCat("behind ", ahead, " queued job(s)"), job_id,
                   resumed_from);
  }
  absl::Status s = PrepareJob(spec, *coordinator_->registry(), coordinator_->links(),
                              coordinator_->profiles(), options)
                       .status();
  if (!queueing || s.code() != absl::StatusCode::kFailedPrecondition) return s;
  return Enqueue(spec, ctx, absl::StrCat("waiting for room: ", s.message()), job_id, resumed_from);
}

grpc::ServerUnaryReactor* JobServiceImpl::SubmitJob(grpc::CallbackServerContext* ctx,
                                                    const grpc::ByteBuffer* raw_request,
                                                    grpc::ByteBuffer* raw_response) {
  return OnQueue<quilt::v1::SubmitJobRequest, quilt::v1::SubmitJobResponse>(
      &planning_, ctx, raw_request, raw_response, "SubmitJob",
      [this, ctx](const quilt::v1::SubmitJobRequest& r, quilt::v1::SubmitJobResponse* response) {
        quilt::v1::JobSpec spec = r.spec();
        spec.set_submitted_by(CallerName(ctx));
        return Submit(spec, ctx, response->mutable_job_id());
      });
}

grpc::ServerUnaryReactor* JobServiceImpl::ResumeJob(grpc::CallbackServerContext* ctx,
                                                    const grpc::ByteBuffer* raw_request,
                                                    grpc::ByteBuffer* raw_response) {
  // It reads a checkpoint and plans: the planning queue.
  return OnQueue<quilt::v1::ResumeJobRequest, quilt::v1::ResumeJobResponse>(
      &planning_, ctx, raw_request, raw_response, "ResumeJob",
      [this, ctx](const quilt::v1::ResumeJobRequest& r, quilt::v1::ResumeJobResponse* response) {
        return Resume(r.job_id(), r.strategy(), /*automatic=*/false, ctx, response, r.queue());
      });
}

grpc::ServerUnaryReactor* JobServiceImpl::GetJob(grpc::CallbackServerContext* ctx,
                                                 const grpc::ByteBuffer* raw_request,
                                                 grpc::ByteBuffer* raw_response) {
  return HandleUnary<quilt::v1::GetJobRequest, quilt::v1::JobStatus>(
      ctx, raw_request, raw_response, kMaxSmallRequestBytes, "GetJob",
      [this](const quilt::v1::GetJobRequest& r, quilt::v1::JobStatus* response) {
        ASSIGN_OR_RETURN(*response, coordinator_->jobs()->Get(r.job_id()));
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* JobServiceImpl::GetJobLosses(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* raw_request,
                                                       grpc::ByteBuffer* raw_response) {
  return HandleUnary<quilt::v1::GetJobLossesRequest, quilt::v1::JobLosses>(
      ctx, raw_request, raw_response, kMaxSmallRequestBytes, "GetJobLosses",
      [this](const quilt::v1::GetJobLossesRequest& r, quilt::v1::JobLosses* response) {
        if (r.from_step() < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("from_step must be 0 or more, not ", r.from_step()));
        }
        ASSIGN_OR_RETURN(std::vector<double> losses, coordinator_->jobs()->Losses(r.job_id()));
        constexpr int64_t kMaxLosses = 100000;
        const int64_t first = std::max<int64_t>(r.from_step(), 1);
        const int64_t last = static_cast<int64_t>(losses.size());
        response->set_first_step(first);
        response->set_last_step(last);
        for (int64_t step = first; step <= std::min(last, first + kMaxLosses - 1); ++step) {
          response->add_losses(losses[static_cast<size_t>(step - 1)]);
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* JobServiceImpl::GetJobLogs(grpc::CallbackServerContext* ctx,
                                                     const grpc::ByteBuffer* raw_request,
                                                     grpc::ByteBuffer* raw_response) {
  return OnQueue<quilt::v1::GetJobLogsRequest, quilt::v1::GetJobLogsResponse>(
      &logs_, ctx, raw_request, raw_response, "GetJobLogs",
      [this, ctx](const quilt::v1::GetJobLogsRequest& r, quilt::v1::GetJobLogsResponse* response) {
        if (r.lines() < 0 || r.lines() > kMaxLogLines) {
          return absl::InvalidArgumentError(absl::StrCat("lines must be 1 to ", kMaxLogLines,
                                                         " (0: ", kDefaultLogLines, "), not ",
                                                         r.lines()));
        }
        if (r.run() < -1) {
          return absl::InvalidArgumentError(
              absl::StrCat("run must be 1 or more (-1: the last), not ", r.run()));
        }
        if (r.run() != 0 && !r.offsets().empty()) {
          return absl::InvalidArgumentError(
              "a follow reads on from the offsets given: it takes no run");
        }
        ASSIGN_OR_RETURN(const quilt::v1::JobRecord job, coordinator_->jobs()->Record(r.job_id()));
        // Each node once, in rank order, with its ranks.
        std::vector<std::string> nodes;
        std::map<std::string, std::vector<int>> ranks;
        for (int rank = 0; rank < job.world_size(); ++rank) {
          std::vector<int>& of = ranks[job.world(rank)];
          if (of.empty()) nodes.push_back(job.world(rank));
          of.push_back(rank);
        }
        if (nodes.empty()) {
          return absl::FailedPreconditionError(absl::StrCat(
              "job ", r.job_id(), " has not run on any node (",
              absl::StripPrefix(quilt::v1::JobState_Name(job.status().state()), "JOB_STATE_"),
              ")"));
        }
        if (!r.node().empty()) {
          if (ranks.count(r.node()) == 0) {
            return absl::NotFoundError(absl::StrCat("node ", r.node(), " is not in job ",
                                                    r.job_id(), "'s world (",
                                                    absl::StrJoin(nodes, ", "), ")"));
          }
          nodes = {r.node()};
        }
        // Workers answer with their next heartbeat and the one after it;
        // the nodes that did answer are sent before the client's deadline.
        const absl::Duration left =
            absl::FromChrono(ctx->deadline()) - absl::Now() - absl::Milliseconds(500);
        const absl::Duration timeout = std::max(
            absl::Milliseconds(100),
            std::min(left, 2 * absl::Milliseconds(coordinator_->config().heartbeat_period_ms) +
                               absl::Seconds(3)));
        std::map<std::string, int64_t> offsets;
        for (const auto& [node, offset] : r.offsets()) {
          if (offset < 0) {
            return absl::InvalidArgumentError(
                absl::StrCat("the offset of node ", node, " is negative (", offset, ")"));
          }
          if (ranks.count(node) == 0) {
            return absl::NotFoundError(
                absl::StrCat("node ", node, " is not in job ", r.job_id(), "'s world"));
          }
          offsets[node] = offset;
        }
        if (!offsets.empty()) {
          std::vector<std::string> followed;
          for (const std::string& n : nodes) {
            if (offsets.count(n) > 0) followed.push_back(n);
          }
          nodes = std::move(followed);
        }
        std::vector<quilt::v1::LogReply> replies = coordinator_->logs()->Fetch(
            r.job_id(), nodes, r.lines() == 0 ? kDefaultLogLines : r.lines(), timeout, offsets,
            r.run());
        for (size_t i = 0; i < nodes.size(); ++i) {
          quilt::v1::GetJobLogsResponse::NodeLog* log = response->add_nodes();
          log->set_node(nodes[i]);
          for (int rank : ranks[nodes[i]]) log->add_ranks(rank);
          log->set_text(std::move(*replies[i].mutable_text()));
          log->set_error(replies[i].error());
          log->set_path(replies[i].path());
          log->set_truncated(replies[i].truncated());
          log->set_end_offset(replies[i].end_offset());
          log->set_run(replies[i].run());
          log->set_runs(replies[i].runs());
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* JobServiceImpl::ListJobs(grpc::CallbackServerContext* ctx,
                                                   const grpc::ByteBuffer* raw_request,
                                                   grpc::ByteBuffer* raw_response) {
  return HandleUnary<quilt::v1::ListJobsRequest, quilt::v1::ListJobsResponse>(
      ctx, raw_request, raw_response, kMaxSmallRequestBytes, "ListJobs",
      [this](const quilt::v1::ListJobsRequest&, quilt::v1::ListJobsResponse* response) {
        for (quilt::v1::JobStatus& st : coordinator_->jobs()->List()) {
          *response->add_jobs() = std::move(st);
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* JobServiceImpl::CancelJob(grpc::CallbackServerContext* ctx,
                                                    const grpc::ByteBuffer* raw_request,
                                                    grpc::ByteBuffer* raw_response) {
  return HandleUnary<quilt::v1::CancelJobRequest, quilt::v1::CancelJobResponse>(
      ctx, raw_request, raw_response, kMaxSmallRequestBytes, "CancelJob",
      [this, ctx](const quilt::v1::CancelJobRequest& r, quilt::v1::CancelJobResponse*) {
        return coordinator_->jobs()->Cancel(r.job_id(), r.reason(), CallerName(ctx));
      });
}

grpc::ServerUnaryReactor* JobServiceImpl::ExportJob(grpc::CallbackServerContext* ctx,
                                                    const grpc::ByteBuffer* raw_request,
                                                    grpc::ByteBuffer* raw_response) {
  // Reading a checkpoint is file work: a queue of its own, not gRPC's threads.
  return OnQueue<quilt::v1::ExportJobRequest, quilt::v1::ExportJobResponse>(
      &exports_, ctx, raw_request, raw_response, "ExportJob",
      [this](const quilt::v1::ExportJobRequest& r, quilt::v1::ExportJobResponse* response) {
        ASSIGN_OR_RETURN(quilt::v1::JobRecord record,
                         coordinator_->jobs()->RecordWithModel(r.job_id()));
        ASSIGN_OR_RETURN(*response, r.format() == quilt::v1::EXPORT_FORMAT_NPZ
                                        ? ExportTrainedWeights(record)
                                        : ExportTrainedOnnx(record));
        // What one reply carries (less room for its other fields).
        const size_t bytes = response->ByteSizeLong();
        if (bytes > static_cast<size_t>(kMaxResponseBytes) - (64 << 10)) {
          return absl::ResourceExhaustedError(absl::StrFormat(
              "job %s's export takes %.1f MiB, more than one reply carries (%d MiB): its "
              "checkpoint is in %s (a .npy file per tensor and rank, listed in each rank's "
              "metrics.json)",
              r.job_id(), bytes / 1048576.0, kMaxResponseBytes >> 20,
              record.spec().checkpoint_dir()));
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* JobServiceImpl::DeleteJob(grpc::CallbackServerContext* ctx,
                                                    const grpc::ByteBuffer* raw_request,
                                                    grpc::ByteBuffer* raw_response) {
  // Removing checkpoints is file work: the exports' queue.
  return OnQueue<quilt::v1::DeleteJobRequest, quilt::v1::DeleteJobResponse>(
      &exports_, ctx, raw_request, raw_response, "DeleteJob",
      [this](const quilt::v1::DeleteJobRequest& r, quilt::v1::DeleteJobResponse* response) {
        ASSIGN_OR_RETURN(std::string checkpoints, coordinator_->jobs()->Deletable(r.job_id()));
        // A job resumed from its checkpoint that has not started yet (queued,
        // or its executors not yet running) still needs it.
        if (!r.keep_checkpoints()) {
          ASSIGN_OR_RETURN(const quilt::v1::JobStatus old, coordinator_->jobs()->Get(r.job_id()));
          absl::StatusOr<quilt::v1::JobStatus> next =
              old.resumed_as().empty() ? absl::NotFoundError("")
                                       : coordinator_->jobs()->Get(old.resumed_as());
          if (next.ok() && (next->state() == quilt::v1::JOB_STATE_QUEUED ||
                            next->state() == quilt::v1::JOB_STATE_PENDING)) {
            return absl::FailedPreconditionError(absl::StrCat(
                "job ", next->job_id(), " goes on from this job's checkpoint and has not started ",
                "yet: delete this job once that one has written a checkpoint of its own, or keep ",
                "the checkpoints (--keep-checkpoints)"));
          }
          // Until it writes a checkpoint of its own, that job (resumed
          // again, or restarted) reads this one's again.
          if (next.ok() && next->state() != quilt::v1::JOB_STATE_SUCCEEDED) {
            absl::StatusOr<quilt::v1::JobRecord> record =
                coordinator_->jobs()->Record(next->job_id());
            if (record.ok() && record->world_size() > 0 &&
                CompleteSteps(record->spec().checkpoint_dir(), record->world_size()).empty()) {
              return absl::FailedPreconditionError(absl::StrCat(
                  "job ", next->job_id(), " goes on from this job's checkpoint and has written ",
                  "none of its own yet (a resume or restart of it would read this job's again): ",
                  "delete this job once that one has a checkpoint, or keep the checkpoints ",
                  "(--keep-checkpoints)"));
            }
          }
        }
        // The files first: a job whose record went first would leave them
        // with nothing that names them if the coordinator stopped between.
        // Only the job's own directory (<checkpoint_dir>/<job id>).
        std::error_code ec;
        if (!r.keep_checkpoints() && !checkpoints.empty() &&
            std::filesystem::path(checkpoints).filename() == r.job_id() &&
            std::filesystem::exists(checkpoints, ec)) {
          std::filesystem::remove_all(checkpoints, ec);
          if (ec) {
            return absl::UnavailableError(absl::StrCat("cannot remove job ", r.job_id(),
                                                       "'s checkpoints in ", checkpoints, " (",
                                                       ec.message(), "); the job is kept"));
          }
          response->set_removed_checkpoints(checkpoints);
        }
        RETURN_IF_ERROR(coordinator_->jobs()->Delete(r.job_id()).status());
        return absl::OkStatus();
      });
}

grpc::Status JobServiceImpl::WatchJob(grpc::ServerContext* ctx,
                                      const quilt::v1::WatchJobRequest* request,
                                      grpc::ServerWriter<quilt::v1::JobStatus>* writer) {
  // A running job that does not change is written again every
  // kUnchangedEvery, with its time since it last progressed (a stall
  // shows in the watch).
  constexpr absl::Duration kUnchangedEvery = absl::Seconds(10);
  int64_t version = -1;
  absl::Time written = absl::InfinitePast();
  while (!ctx->IsCancelled()) {
    // A stopping coordinator ends its watches at once (the server waits
    // for open calls before it stops).
    if (stopping_.load()) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is shutting down");
    }
    const int64_t before = version;
    absl::StatusOr<quilt::v1::JobStatus> st =
        coordinator_->jobs()->WaitForChange(request->job_id(), &version, absl::Seconds(1));
    if (!st.ok()) return ToGrpcStatus(st.status());
    const bool again =
        st->state() == quilt::v1::JOB_STATE_RUNNING && absl::Now() - written >= kUnchangedEvery;
    if (version != before || again) {
      if (!writer->Write(*st)) break;  // the client went away
      written = absl::Now();
    }
    if (JobManager::Ended(st->state())) break;
  }
  return grpc::Status::OK;
}

}  // namespace quilt::rpc
