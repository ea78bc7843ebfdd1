// JobServiceImpl's resuming: a failed or cancelled ONNX job trained on as a
// new job from its last readable checkpoint (ResumeJob, by hand), and the
// restarts of failed jobs with restarts left (JobSpec.max_restarts).
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "src/common/logging.h"
#include "src/common/status.h"
#include "src/coordinator/job_export.h"
#include "src/rpc/job_service.h"

namespace quilt::rpc {

absl::Status JobServiceImpl::Resume(const std::string& job_id, const std::string& strategy,
                                    bool automatic, grpc::CallbackServerContext* ctx,
                                    quilt::v1::ResumeJobResponse* response) {
  JobManager* jobs = coordinator_->jobs();
  ASSIGN_OR_RETURN(quilt::v1::JobRecord record, jobs->RecordWithModel(job_id));
  const quilt::v1::JobState state = record.status().state();
  if (state != quilt::v1::JOB_STATE_FAILED && state != quilt::v1::JOB_STATE_CANCELLED) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " is ", absl::StripPrefix(quilt::v1::JobState_Name(state), "JOB_STATE_"),
        ": only a failed or cancelled job can be resumed"));
  }
  RETURN_IF_ERROR(jobs->CheckNotResumed(job_id));
  absl::StatusOr<quilt::v1::ExportJobResponse> exported = ExportTrainedOnnx(record);
  if (!exported.ok()) {
    return absl::Status(exported.status().code(),
                        absl::StrCat("cannot resume it: ", exported.status().message()));
  }
  quilt::v1::ExportJobResponse& trained = *exported;
  const int64_t left = record.spec().steps() - trained.step();
  if (left <= 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, "'s last checkpoint is of step ", trained.step(),
        ", its last: no steps are left to train (quiltctl export ", job_id, " writes the model)"));
  }
  quilt::v1::JobSpec spec = record.spec();
  spec.set_onnx(std::move(*trained.mutable_onnx()));
  spec.set_steps(left);
  if (!strategy.empty()) spec.set_strategy(strategy);
  if (automatic) spec.set_max_restarts(spec.max_restarts() - 1);
  // The original name, not a chain of "(resumed …)".
  std::string name = spec.name().empty() ? job_id : spec.name();
  if (const size_t at = name.find(" (resumed from "); at != std::string::npos) name.resize(at);
  spec.set_name(absl::StrCat(name, " (resumed from ", job_id, " at step ", trained.step(), ")"));
  RETURN_IF_ERROR(Submit(spec, ctx, response->mutable_job_id()));
  if (absl::Status marked = jobs->MarkResumed(job_id, response->job_id()); !marked.ok()) {
    // Resumed meanwhile by another request: this one's job goes.
    (void)jobs->Cancel(response->job_id(), "job " + job_id + " was resumed twice at once");
    return marked;
  }
  response->set_from_step(trained.step());
  response->set_steps(left);
  response->set_note(trained.note());
  QLOG_INFO("job {} {} as {} from step {} ({} steps left)", job_id,
            automatic ? "restarted after its failure" : "resumed", response->job_id(),
            trained.step(), left);
  return absl::OkStatus();
}

void JobServiceImpl::RestartLoop() {
  const absl::Duration after =
      absl::Milliseconds(coordinator_->config().not_ready_after_ms) + absl::Seconds(1);
  while (!stopping_.load()) {
    absl::SleepFor(absl::Milliseconds(100));
    for (const std::string& id : coordinator_->jobs()->RestartsDue(after)) {
      const bool taken = planning_.Submit([this, id] {
        quilt::v1::ResumeJobResponse response;
        absl::Status s = Resume(id, "", /*automatic=*/true, nullptr, &response);
        if (!s.ok()) {
          QLOG_WARN("job {} failed and could not be restarted: {}", id, std::string(s.message()));
          coordinator_->jobs()->MarkRestartFailed(id, std::string(s.message()));
        }
      });
      if (!taken) {
        coordinator_->jobs()->MarkRestartFailed(
            id, "the coordinator's planning queue was full (quiltctl resume retries it)");
      }
    }
  }
}

}  // namespace quilt::rpc
