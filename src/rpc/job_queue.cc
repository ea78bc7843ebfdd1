// JobServiceImpl's queue (JobSpec.queue): a submission the Ready nodes
// lack the memory for only because other jobs hold it waits QUEUED, and
// the queue's head is planned again whenever what a plan would see
// changes (a job ended or started, a node came, left or was drained), and
// every 5 minutes besides (a plan costs up to the planner's budget).
// In priority order, first in, first out within a priority; when the head
// does not fit, a job behind it may start first (backfill) if it fits now
// and is predicted to end before any job holding nodes does, so that it
// cannot hold up the head (as long as the predictions hold).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "src/common/logging.h"
#include "src/common/status.h"
#include "src/coordinator/job_submission.h"
#include "src/rpc/job_service.h"

namespace quilt::rpc {

absl::Status JobServiceImpl::RefuseDrained(const std::vector<std::string>& world) const {
  const std::set<std::string> nodes(world.begin(), world.end());
  for (const quilt::v1::NodeStatus& n : coordinator_->registry()->ListNodes()) {
    if (n.draining() && nodes.count(n.info().node_id())) {
      return absl::UnavailableError(
          absl::StrCat("node ", n.info().node_id(),
                       " was drained while the job was planned; the job was not started "
                       "(submit it again)"));
    }
  }
  return absl::OkStatus();
}

absl::Status JobServiceImpl::Enqueue(const quilt::v1::JobSpec& spec,
                                     grpc::CallbackServerContext* ctx, const std::string& why,
                                     std::string* job_id, const std::string& resumed_from) {
  // It waits only for room other jobs hold: on the idle cluster, a plan
  // must fit (checked and planned as a submission is).
  absl::StatusOr<NewJob> fits = PrepareJob(spec, *coordinator_->registry(), coordinator_->links(),
                                           coordinator_->profiles(), Planning(ctx));
  if (!fits.ok()) {
    if (fits.status().code() != absl::StatusCode::kFailedPrecondition) return fits.status();
    return absl::FailedPreconditionError(
        absl::StrCat(fits.status().message(),
                     " (it would not start with no other job running either: not queued)"));
  }
  if (ctx != nullptr && ctx->IsCancelled()) {
    return absl::CancelledError("the client gave up waiting; the job was not queued");
  }
  JobManager* jobs = coordinator_->jobs();
  if (!resumed_from.empty()) RETURN_IF_ERROR(jobs->CheckNotResumed(resumed_from));
  ASSIGN_OR_RETURN(std::string id, jobs->AddQueued(spec, why, resumed_from));
  if (!resumed_from.empty()) {
    if (absl::Status marked = jobs->MarkResumed(resumed_from, id); !marked.ok()) {
      (void)jobs->Cancel(id, "its job could not be marked resumed");
      return marked;
    }
  }
  *job_id = id;
  queue_poked_.store(true);  // the dispatcher looks again
  return absl::OkStatus();
}

std::string JobServiceImpl::QueueView() const {
  // What a queued job's plan depends on: the jobs on the nodes and the
  // nodes' states.
  std::string view;
  for (const std::string& id : coordinator_->jobs()->Holding()) absl::StrAppend(&view, id, ",");
  absl::StrAppend(&view, ";");
  for (const quilt::v1::NodeStatus& n : coordinator_->registry()->ListNodes()) {
    absl::StrAppend(&view, n.info().node_id(), ":", n.state(), n.draining() ? "d" : "", ",");
  }
  return view;
}

void JobServiceImpl::DispatchQueued() {
  if (dispatching_.load()) return;
  const std::vector<std::string> queued = coordinator_->jobs()->Queued();
  if (queued.empty()) return;
  // The head and the backfill candidates behind it, and what their plans
  // see.
  std::string view;
  for (size_t k = 0; k < queued.size() && k <= kBackfillCandidates; ++k) {
    absl::StrAppend(&view, queued[k], ",");
  }
  absl::StrAppend(&view, ";", QueueView());
  const absl::Time now = absl::Now();
  const bool poked = queue_poked_.exchange(false);
  if (!poked && view == queue_seen_ && now - queue_tried_ < kQueueRetry) return;
  queue_seen_ = view;
  queue_tried_ = now;
  dispatching_.store(true);
  const bool taken = planning_.Submit([this, queued] {
    const absl::Status head = StartQueued(queued.front());
    if (head.code() == absl::StatusCode::kFailedPrecondition) Backfill(queued);
    dispatching_.store(false);
  });
  if (!taken) {
    // Tried again at the next tick (warned once per head).
    dispatching_.store(false);
    queue_tried_ = absl::InfinitePast();
    if (queue_full_warned_ != queued.front()) {
      queue_full_warned_ = queued.front();
      QLOG_WARN("queued job {} waits: the planning queue is full", queued.front());
    }
  }
}

void JobServiceImpl::Backfill(std::vector<std::string> queued) {
  // The head that found no room must still be the head.
  const std::vector<std::string> now = coordinator_->jobs()->Queued();
  if (now.empty() || now.front() != queued.front()) return;
  queued = now;
  // The head cannot start before a job holding nodes ends (or a node
  // comes): the first predicted end, by each job's steps left at the
  // slower of its predicted and measured step times.
  double first_end = std::numeric_limits<double>::infinity();
  for (const quilt::v1::JobStatus& j : coordinator_->jobs()->List()) {
    if (!JobManager::HoldsNodes(j.state())) continue;
    const double step_s = std::max(j.predicted_step_time_s(), j.measured_step_time_s());
    first_end = std::min(first_end, static_cast<double>(j.steps() - j.step()) * step_s);
  }
  // No job holds a node, or none could be done in time.
  if (!std::isfinite(first_end) || first_end <= absl::ToDoubleSeconds(kBackfillStart)) return;
  // (An absolute time: planning the candidates takes time too.)
  const absl::Time by = absl::Now() + absl::Seconds(first_end);
  for (size_t k = 1; k < queued.size() && k <= kBackfillCandidates; ++k) {
    // One start per round: the next round plans with its load.
    if (StartQueued(queued[k], by).ok()) return;
  }
}

absl::Status JobServiceImpl::StartQueued(const std::string& id,
                                         std::optional<absl::Time> backfill_by) {
  const bool backfill = backfill_by.has_value();
  JobManager* jobs = coordinator_->jobs();
  absl::StatusOr<quilt::v1::JobRecord> record = jobs->RecordWithModel(id);
  if (!record.ok()) {
    QLOG_WARN("queued job {} cannot be read: {}", id, record.status().ToString());
    if (record.status().code() != absl::StatusCode::kNotFound && !backfill) {
      jobs->KeepQueued(id, absl::StrCat("its model cannot be read now (", record.status().message(),
                                        "); tried again later"));
    }
    return absl::UnavailableError("its record cannot be read");
  }
  if (record->status().state() != quilt::v1::JOB_STATE_QUEUED) {
    return absl::AbortedError("no longer queued");
  }
  SubmissionOptions options = Planning(nullptr);
  bool idle = true;  // no other job holds a node when the plan is made
  options.loads = [jobs, &idle] {
    std::map<std::string, NodeLoad> loads = NodeLoads(jobs->List());
    for (const auto& [node, load] : loads) idle &= load.jobs == 0;
    return loads;
  };
  options.place = [&](NewJob&& job) -> absl::Status {
    if (!RefuseDrained(job.world).ok()) {
      return absl::UnavailableError("a node of its plan was drained meanwhile: planned again");
    }
    if (backfill) {
      // Ahead of the head only if it is predicted to be done before the
      // head could start, with room for error.
      const double run_s =
          static_cast<double>(job.spec.steps()) * job.predicted_step_time_s * kBackfillMargin +
          absl::ToDoubleSeconds(kBackfillStart);
      const double left_s = absl::ToDoubleSeconds(*backfill_by - absl::Now());
      if (!(run_s < left_s)) {
        return absl::FailedPreconditionError("its predicted run outlasts the running jobs");
      }
      QLOG_INFO(
          "queued job {} backfills: predicted to take {:.1f} s (with margin), the first job "
          "holding nodes to end in {:.1f} s",
          id, run_s, left_s);
    }
    return jobs->StartQueued(id, std::move(job));
  };
  const absl::Status s = PrepareJob(record->spec(), *coordinator_->registry(),
                                    coordinator_->links(), coordinator_->profiles(), options)
                             .status();
  if (s.ok()) return s;
  // Cancelled (or started by another round) meanwhile.
  absl::StatusOr<quilt::v1::JobStatus> after = jobs->Get(id);
  if (!after.ok() || after->state() != quilt::v1::JOB_STATE_QUEUED) {
    return absl::AbortedError("no longer queued");
  }
  // A backfill candidate that does not start stays as it was.
  if (backfill) return s;
  // Settled: some node Ready, none between Ready and Down (a worker that
  // restarts comes back).
  bool any_ready = false, settled = true;
  for (const quilt::v1::NodeStatus& n : coordinator_->registry()->ListNodes()) {
    any_ready |= n.state() == quilt::v1::NODE_STATE_READY && !n.draining();
    settled &= n.state() != quilt::v1::NODE_STATE_NOT_READY;
  }
  if (s.code() == absl::StatusCode::kFailedPrecondition && idle && any_ready && settled) {
    // The cluster changed since it was queued (a node left, or offers
    // less): it would wait for ever, and hold up every job behind it.
    QLOG_WARN("queued job {} no longer fits the idle cluster: {}", id, s.ToString());
    jobs->FailQueued(
        id, absl::StrCat("it no longer fits even with no other job running: ", s.message()));
    return absl::AbortedError("it failed");
  } else if (s.code() == absl::StatusCode::kFailedPrecondition || Passing(s)) {
    // It waits out room (no plan fits, or no Ready node) and any passing
    // cause.
    jobs->KeepQueued(id, s.code() == absl::StatusCode::kFailedPrecondition
                             ? absl::StrCat("waiting for room: ", s.message())
                             : absl::StrCat("waiting: ", s.message()));
  } else {
    QLOG_WARN("queued job {} cannot start: {}", id, s.ToString());
    jobs->FailQueued(id, std::string(s.message()));
    return absl::AbortedError("it failed");
  }
  return s;
}

}  // namespace quilt::rpc
