// JobServiceImpl's resuming: a failed or cancelled job trained on as a new
// job from its last readable checkpoint (ResumeJob, by hand), and the
// restarts of failed jobs with restarts left (JobSpec.max_restarts).
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "src/common/logging.h"
#include "src/common/status.h"
#include "src/coordinator/checkpoint_dir.h"
#include "src/coordinator/job_export.h"
#include "src/coordinator/job_submission.h"
#include "src/rpc/job_service.h"
#include "src/rpc/security.h"

namespace quilt::rpc {
namespace {

// The step of a job's latest readable checkpoint (as ExportTrainedOnnx
// finds it, without a model to write). Errors: FAILED_PRECONDITION.
absl::StatusOr<quilt::v1::ExportJobResponse> LatestCheckpointStep(const quilt::v1::JobRecord& job) {
  quilt::v1::ExportJobResponse out;
  RETURN_IF_ERROR(ReadJobCheckpoint(job, &out).status());
  return out;
}

}  // namespace

absl::Status JobServiceImpl::Resume(const std::string& job_id, const std::string& strategy,
                                    bool automatic, grpc::CallbackServerContext* ctx,
                                    quilt::v1::ResumeJobResponse* response, bool queue) {
  JobManager* jobs = coordinator_->jobs();
  ASSIGN_OR_RETURN(quilt::v1::JobRecord record, jobs->RecordWithModel(job_id));
  const quilt::v1::JobState state = record.status().state();
  if (state != quilt::v1::JOB_STATE_FAILED && state != quilt::v1::JOB_STATE_CANCELLED) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " is ", absl::StripPrefix(quilt::v1::JobState_Name(state), "JOB_STATE_"),
        ": only a failed or cancelled job can be resumed"));
  }
  RETURN_IF_ERROR(jobs->CheckNotResumed(job_id));
  // ONNX jobs go on with the trained weights in their model too (what
  // export writes); the others keep their model, and every job's
  // executors restore the checkpoint's state.
  const bool onnx = record.spec().model_case() == quilt::v1::JobSpec::kOnnx;
  absl::StatusOr<quilt::v1::ExportJobResponse> exported =
      onnx ? ExportTrainedOnnx(record) : LatestCheckpointStep(record);
  const quilt::v1::ResumeFrom& started = record.spec().resume_from();
  // A resumed job that failed before a checkpoint of its own (or whose
  // checkpoints were lost) goes on from where it started.
  const bool unread =
      !exported.ok() && exported.status().code() == absl::StatusCode::kFailedPrecondition;
  // A restart (not a resume by hand) of a job that failed before its first
  // checkpoint, none complete in its directory, starts it again from its
  // own start: it has no steps to lose. (Checkpoints that are there but do
  // not read stay an error: starting over would drop their steps unasked.)
  const bool none_yet = unread && automatic &&
                        CompleteSteps(record.spec().checkpoint_dir(), record.world_size()).empty();
  const bool from_start = unread && (!started.checkpoint().empty() || none_yet);
  if (from_start) {
    quilt::v1::ExportJobResponse again;
    again.set_onnx(record.spec().onnx());
    again.set_step(0);
    again.set_note(started.checkpoint().empty()
                       ? absl::StrCat("no checkpoint yet (", exported.status().message(),
                                      "): it starts again from its first step")
                       : absl::StrCat("no checkpoint of its own (", exported.status().message(),
                                      "): it starts again from where it started (",
                                      started.checkpoint(), ")"));
    exported = std::move(again);
  }
  if (!exported.ok()) {
    return absl::Status(exported.status().code(),
                        absl::StrCat("cannot resume it: ", exported.status().message()));
  }
  quilt::v1::ExportJobResponse& trained = *exported;
  const int64_t left = record.spec().steps() - trained.step();
  if (left <= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, "'s last checkpoint is of step ", trained.step(),
                     ", its last: no steps are left to train",
                     onnx ? absl::StrCat(" (quiltctl export ", job_id, " writes the model)") : ""));
  }
  quilt::v1::JobSpec spec = record.spec();
  if (onnx) spec.set_onnx(std::move(*trained.mutable_onnx()));
  spec.set_steps(left);
  if (!strategy.empty()) spec.set_strategy(strategy);
  if (automatic) spec.set_max_restarts(spec.max_restarts() - 1);
  // Every executor starts from the checkpoint's parameters and optimizer
  // state (each taking its share under the new plan), and the step count
  // goes on: the data's position and Adam's bias correction.
  if (!from_start) {
    // (The checkpoint's values supersede the weights the job started from.)
    spec.clear_initial_weights();
    quilt::v1::ResumeFrom* from = spec.mutable_resume_from();
    from->set_checkpoint(
        absl::StrFormat("%s/step-%08d", record.spec().checkpoint_dir(), trained.step()));
    from->set_world(record.world_size());
    from->set_steps_before(started.steps_before() + trained.step());
  }
  // The original name, not a chain of "(resumed …)", cut (at a character)
  // so that the whole fits a job name's 128 bytes.
  std::string name = spec.name().empty() ? job_id : spec.name();
  if (const size_t at = name.find(" (resumed from "); at != std::string::npos) name.resize(at);
  const std::string suffix =
      absl::StrCat(" (resumed from ", job_id, " at step ", trained.step(), ")");
  if (name.size() + suffix.size() > kMaxJobNameBytes) {
    size_t keep = kMaxJobNameBytes > suffix.size() ? kMaxJobNameBytes - suffix.size() : 0;
    while (keep > 0 && (static_cast<unsigned char>(name[keep]) & 0xC0) == 0x80) --keep;
    name.resize(keep);
  }
  spec.set_name(name + suffix);
  // Its checkpoints beside the old job's (<dir>/<new id>), not inside them.
  spec.set_checkpoint_dir(
      std::filesystem::path(record.spec().checkpoint_dir()).parent_path().string());
  if (queue) spec.set_queue(true);
  // Resumed by hand: the resuming client's; a restart keeps the submitter.
  if (!automatic) spec.set_submitted_by(CallerName(ctx));
  RETURN_IF_ERROR(Submit(spec, ctx, response->mutable_job_id(), job_id));
  response->set_from_step(trained.step());
  response->set_steps(left);
  response->set_note(trained.note());
  QLOG_INFO("job {} {} as {} from step {} ({} steps left){}", job_id,
            automatic ? "restarted after its failure" : "resumed", response->job_id(),
            trained.step(), left, trained.note().empty() ? "" : ": " + trained.note());
  return absl::OkStatus();
}

bool JobServiceImpl::Passing(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable ||
         s.code() == absl::StatusCode::kResourceExhausted ||
         s.code() == absl::StatusCode::kDeadlineExceeded;
}

void JobServiceImpl::RestartLoop() {
  const absl::Duration after =
      absl::Milliseconds(coordinator_->config().not_ready_after_ms) + absl::Seconds(1);
  while (!stopping_.load()) {
    absl::SleepFor(absl::Milliseconds(100));
    DispatchQueued();
    for (const std::string& id : coordinator_->jobs()->RestartsDue(after)) {
      const bool taken = planning_.Submit([this, id] {
        quilt::v1::ResumeJobResponse response;
        absl::Status s = Resume(id, "", /*automatic=*/true, nullptr, &response);
        if (s.ok()) return;
        // A passing cause is tried again later; another is kept in the
        // job's status.
        const bool passing = Passing(s);
        QLOG_WARN("job {} failed and could not be restarted{}: {}", id,
                  passing ? " (tried again later)" : "", std::string(s.message()));
        if (!passing) coordinator_->jobs()->MarkRestartFailed(id, std::string(s.message()));
      });
      if (!taken) QLOG_WARN("job {}'s restart waits: the planning queue is full", id);
    }
  }
}

}  // namespace quilt::rpc
