#include "src/coordinator/job_manager.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/common/display_text.h"
#include "src/common/logging.h"
#include "src/common/proto_time.h"
#include "src/common/status.h"
#include "src/coordinator/checkpoint_dir.h"

namespace quilt {

using quilt::v1::JobState;
using quilt::v1::TaskState;

namespace {

// "running" for JOB_STATE_RUNNING, in messages.
std::string StateWord(quilt::v1::JobState s) {
  return absl::AsciiStrToLower(quilt::v1::JobState_Name(s).substr(strlen("JOB_STATE_")));
}

std::string NewJobId() {
  static std::mt19937_64 rng(std::random_device{}());
  return absl::StrFormat("job-%08x", static_cast<uint32_t>(rng()));
}

}  // namespace

bool JobManager::TaskEnded(TaskState s) {
  return s == quilt::v1::TASK_STATE_SUCCEEDED || s == quilt::v1::TASK_STATE_FAILED ||
         s == quilt::v1::TASK_STATE_CANCELLED;
}

bool JobManager::Ended(JobState s) {
  return s == quilt::v1::JOB_STATE_SUCCEEDED || s == quilt::v1::JOB_STATE_FAILED ||
         s == quilt::v1::JOB_STATE_CANCELLED;
}

std::map<std::string, std::vector<std::string>> JobManager::ActiveJobsByNode(
    const std::vector<quilt::v1::JobStatus>& jobs) {
  std::map<std::string, std::vector<std::string>> out;
  for (const quilt::v1::JobStatus& job : jobs) {
    if (Ended(job.state())) continue;
    for (const std::string& node : job.nodes()) out[node].push_back(job.job_id());
  }
  return out;
}

JobManager::JobManager(CoordinatorStore* store, NodeRegistry* registry, Clock* clock,
                       std::string checkpoint_root)
    : store_(store),
      registry_(registry),
      clock_(clock),
      checkpoint_root_(std::move(checkpoint_root)) {}

absl::Status JobManager::Load() {
  ASSIGN_OR_RETURN(std::vector<quilt::v1::JobRecord> records, store_->ListJobs());
  absl::MutexLock lock(&mu_);
  loaded_at_ = clock_->Now();
  for (quilt::v1::JobRecord& r : records) {
    const std::string id = r.status().job_id();
    Job& job = jobs_[id];
    job.record = std::move(r);
    order_.push_back(id);
    const bool ended = Ended(job.record.status().state());
    job.loaded_ended = ended && !job.record.late_steps_open();
    if (ended && !job.loaded_ended) {
      // Ended, not closed, when the coordinator stopped: the steps stored
      // are where it ended, and every node's first report may carry the
      // steps its executor reached before it learned of the end.
      for (const auto& [node, task] : job.record.tasks()) {
        job.end_step = std::max(job.end_step, task.step());
      }
      for (const std::string& n : job.record.world()) job.unheard_at_end.insert(n);
      job.grace_from = clock_->Now();
    }
    if (job.loaded_ended) continue;
    if (HoldsNodes(job.record.status().state())) {
      // Workers keep running their executors while the coordinator is away
      // and report to it again: the job goes on. A node that comes back
      // without its executor (its worker restarted), or not at all (Down),
      // fails it then.
      job.record.mutable_status()->set_message(std::string(kAwaitingReports));
      QLOG_INFO("job {} resumes after the restart at step {}; waiting for its nodes", id,
                job.record.status().step());
    }
    // Workers keep the losses of steps after the stored ones until told
    // they are stored, and send them again.
    ASSIGN_OR_RETURN(const int64_t stored, store_->LastLossStep(id));
    job.losses_first = stored + 1;
    for (const auto& [node, task] : job.record.tasks()) {
      job.next_step[node] = job.losses_first;
      // An executor that ended with every step it ran stored was forgotten
      // by its worker (the receipt said so), which reports it no more: it
      // is heard, or the job would wait for it forever.
      if (!ended && TaskEnded(task.state()) && task.step() <= stored) job.heard.insert(node);
    }
  }
  RelinkResumed();
  return absl::OkStatus();
}

JobManager::Job* JobManager::Find(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : &it->second;
}

void JobManager::Flush() {
  absl::MutexLock lock(&mu_);
  for (auto& [id, job] : jobs_) {
    if (job.persisted_version != job.version) Persist(&job).IgnoreError();  // (logged)
  }
}

absl::Status JobManager::Persist(Job* job) {
  job->persisted = clock_->Now();
  // With the losses of the steps every rank finished since the last write
  // (appended).
  const int64_t through = Settled(*job);
  CoordinatorStore::LossChunk chunk;
  size_t taken = 0;
  if (through >= job->losses_first) {
    const size_t n = static_cast<size_t>(through - job->losses_first + 1);
    taken = std::min(n, job->losses_tail.size());
    chunk.first_step = job->losses_first;
    chunk.losses.assign(job->losses_tail.begin(), job->losses_tail.begin() + taken);
    chunk.losses.resize(n, std::nan(""));
  }
  if (absl::Status s = store_->PutJob(job->record, chunk); !s.ok()) {
    QLOG_ERROR("cannot store job {}: {}", job->record.status().job_id(), s.ToString());
    return s;
  }
  job->persisted_version = job->version;
  if (!chunk.losses.empty()) {
    job->losses_tail.erase(job->losses_tail.begin(), job->losses_tail.begin() + taken);
    job->losses_first = through + 1;
    // Partial sums of stored steps never complete now (a restart lost parts).
    job->loss_by_step.erase(job->loss_by_step.begin(),
                            job->loss_by_step.lower_bound(job->losses_first));
  }
  return absl::OkStatus();
}

int64_t JobManager::NextStep(const Job& job, const std::string& node) {
  auto next = job.next_step.find(node);
  return next == job.next_step.end() ? 1 : next->second;
}

int64_t JobManager::Settled(const Job& job) {
  if (job.closed) return job.end_step;
  int64_t through = job.record.status().step();
  for (const std::string& node : job.record.world()) {
    through = std::min(through, NextStep(job, node) - 1);
  }
  return through;
}

void JobManager::Changed(Job* job, bool durable) {
  job->version = ++version_;
  if (!durable && clock_->Now() - job->persisted < absl::Seconds(5)) return;
  Persist(job).IgnoreError();  // (logged; retried at the next change or Flush)
}

absl::StatusOr<std::string> JobManager::Add(NewJob n) {
  return Insert(std::move(n), quilt::v1::JOB_STATE_PENDING, std::string(kAwaitingExecutors));
}

void JobManager::SetPlan(Job* job, NewJob* n) {
  quilt::v1::JobRecord& r = job->record;
  quilt::v1::JobStatus* st = r.mutable_status();
  st->set_strategy(n->strategy);
  st->set_micro_batches(n->micro_batches);
  st->set_micro_batches_in_flight(n->micro_batches_in_flight);
  st->set_predicted_step_time_s(n->predicted_step_time_s);
  for (const std::string& line : n->calibration) st->add_calibration(line);
  for (const auto& [device, bytes] : n->predicted_device_memory_bytes) {
    (*st->mutable_predicted_device_memory_bytes())[device] = bytes;
  }
  for (const auto& [node, bytes] : n->predicted_memory_bytes) {
    (*st->mutable_predicted_memory_bytes())[node] = bytes;
  }
  for (const std::string& node : n->world) {
    st->add_nodes(node);
    r.add_world(node);
    quilt::v1::TaskReport t;
    t.set_job_id(st->job_id());
    t.set_state(quilt::v1::TASK_STATE_UNSPECIFIED);
    (*r.mutable_tasks())[node] = t;
  }
}

absl::StatusOr<std::string> JobManager::Insert(NewJob n, JobState state, std::string message) {
  absl::MutexLock lock(&mu_);
  std::string id = NewJobId();
  while (jobs_.count(id)) id = NewJobId();
  Job& job = jobs_[id];
  order_.push_back(id);
  quilt::v1::JobRecord& r = job.record;
  quilt::v1::JobStatus* st = r.mutable_status();
  st->set_job_id(id);
  st->set_name(n.spec.name().empty() ? id : n.spec.name());
  st->set_resumed_from(n.resumed_from);
  st->set_priority(n.spec.priority());
  st->set_submitted_by(n.spec.submitted_by());
  st->set_steps_before(n.spec.resume_from().steps_before());
  st->set_state(state);
  st->set_message(std::move(message));
  *st->mutable_submitted_at() = ToProtoTime(clock_->Now());
  st->set_steps(n.spec.steps());
  SetPlan(&job, &n);
  // The model's bytes and the program are stored apart (the record is
  // rewritten as the job runs); the program stays here until every node
  // has its assignment.
  CoordinatorStore::JobModel model;
  if (n.spec.has_onnx()) {
    model.onnx = std::move(*n.spec.mutable_onnx());
    n.spec.set_onnx("");
  }
  model.weights = std::move(*n.spec.mutable_initial_weights());
  n.spec.clear_initial_weights();
  model.program = n.program;
  job.program = std::move(n.program);
  *r.mutable_spec() = std::move(n.spec);
  // Each job checkpoints into a directory of its own (<dir>/<job id>), so
  // a reused directory never mixes two jobs' steps.
  r.mutable_spec()->set_checkpoint_dir(
      (r.spec().checkpoint_dir().empty() ? checkpoint_root_ : r.spec().checkpoint_dir()) + "/" +
      id);
  // Stored before it is acknowledged: a job the coordinator cannot keep
  // is not started.
  job.version = ++version_;
  if (absl::Status s = store_->AddJob(r, model); !s.ok()) {
    QLOG_ERROR("cannot store job {}: {}", id, s.ToString());
    jobs_.erase(id);
    order_.pop_back();
    return absl::Status(s.code(), absl::StrCat("the coordinator cannot store the job (",
                                               s.message(), "); it was not started"));
  }
  job.persisted = clock_->Now();
  job.persisted_version = job.version;
  if (state == quilt::v1::JOB_STATE_QUEUED) {
    QLOG_INFO("job {} queued: {}", id, st->message());
  } else {
    QLOG_INFO("job {} added: {} steps on {} node(s), strategy {}", id, st->steps(), r.world_size(),
              st->strategy());
  }
  return id;
}

absl::StatusOr<quilt::v1::JobStatus> JobManager::Get(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError("no job '" + job_id + "'");
  return Answered(it->second.record.status());
}

absl::StatusOr<quilt::v1::JobRecord> JobManager::Record(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError("no job '" + job_id + "'");
  return it->second.record;
}

absl::StatusOr<std::vector<double>> JobManager::Losses(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError("no job '" + job_id + "'");
  const Job& job = it->second;
  ASSIGN_OR_RETURN(std::vector<double> losses, store_->GetJobLosses(job_id));
  const int64_t through = Settled(job);
  if (job.losses_tail.empty() || through < job.losses_first) return losses;
  losses.resize(static_cast<size_t>(job.losses_first - 1), std::nan(""));
  const size_t n =
      std::min(job.losses_tail.size(), static_cast<size_t>(through - job.losses_first + 1));
  losses.insert(losses.end(), job.losses_tail.begin(), job.losses_tail.begin() + n);
  losses.resize(static_cast<size_t>(through), std::nan(""));
  return losses;
}

absl::StatusOr<std::string> JobManager::Deletable(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError("no job '" + job_id + "'");
  const quilt::v1::JobState state = it->second.record.status().state();
  if (!Ended(state)) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " is ", StateWord(state),
                                                      "; cancel it first (quiltctl cancel ", job_id,
                                                      ")"));
  }
  return it->second.record.spec().checkpoint_dir();
}

absl::StatusOr<std::string> JobManager::Delete(const std::string& job_id) {
  RETURN_IF_ERROR(Deletable(job_id).status());
  absl::MutexLock lock(&mu_);
  Job* job = Find(job_id);
  if (job == nullptr) return absl::NotFoundError("no job '" + job_id + "'");
  if (absl::Status s = store_->DeleteJob(job_id); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("cannot delete job ", job_id, " from the store (",
                                               s.message(), "); kept"));
  }
  std::string checkpoints = job->record.spec().checkpoint_dir();
  jobs_.erase(job_id);
  order_.erase(std::find(order_.begin(), order_.end(), job_id));
  restarts_tried_.erase(job_id);
  retention_.Forget(job_id);
  ++version_;
  QLOG_INFO("job {} deleted", job_id);
  return checkpoints;
}

absl::StatusOr<quilt::v1::JobRecord> JobManager::RecordWithModel(const std::string& job_id) const {
  ASSIGN_OR_RETURN(quilt::v1::JobRecord record, Record(job_id));
  // Read outside the lock: a model can be large.
  ASSIGN_OR_RETURN(CoordinatorStore::JobModel model, store_->GetJobModel(job_id));
  if (record.spec().has_onnx()) record.mutable_spec()->set_onnx(std::move(model.onnx));
  record.mutable_spec()->set_initial_weights(std::move(model.weights));
  record.set_program(std::move(model.program));
  return record;
}

std::vector<quilt::v1::JobStatus> JobManager::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<quilt::v1::JobStatus> out;
  for (const std::string& id : order_) out.push_back(Answered(jobs_.at(id).record.status()));
  return out;
}

std::map<std::string, int> JobManager::CountByState() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, int> out;
  for (const auto& [id, job] : jobs_) ++out[quilt::v1::JobState_Name(job.record.status().state())];
  return out;
}

void JobManager::Finish(Job* job, JobState state, const std::string& message,
                        const std::string& node) {
  quilt::v1::JobStatus* st = job->record.mutable_status();
  if (Ended(st->state())) return;
  st->set_state(state);
  st->set_message(message);
  *st->mutable_finished_at() = ToProtoTime(clock_->Now());
  // Steps reported so far bound what counts after the end.
  job->end_step = 0;
  for (const auto& [n, t] : job->record.tasks()) job->end_step = std::max(job->end_step, t.step());
  job->record.set_late_steps_open(true);
  for (const std::string& n : job->record.world()) {
    if (!job->heard.count(n)) job->unheard_at_end.insert(n);
  }
  job->record.clear_addresses();
  QLOG_INFO("job {} {}: {}", st->job_id(), quilt::v1::JobState_Name(state), message);
  // (A job that failed in the queue ran on no node: no node's event.)
  if (state == quilt::v1::JOB_STATE_FAILED && registry_ != nullptr &&
      (!node.empty() || !job->record.world().empty())) {
    registry_->RecordJobFailure(
        !node.empty() || job->record.world().empty() ? node : job->record.world(0),
        absl::StrCat("job ", st->job_id(), st->name().empty() ? "" : " (" + st->name() + ")", ": ",
                     message));
  }
  Changed(job);
}

absl::Status JobManager::Cancel(const std::string& job_id, const std::string& reason,
                                const std::string& by) {
  // (A job its nodes have not reported to since a restart may have
  // finished meanwhile: ApplyReport then says it succeeded.)
  // Shown in tables and logs: printable, one line, short.
  RETURN_IF_ERROR(CheckDisplayText(reason, 512, "the reason"));
  absl::MutexLock lock(&mu_);
  Job* job = Find(job_id);
  if (job == nullptr) return absl::NotFoundError("no job '" + job_id + "'");
  if (Ended(job->record.status().state())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " already ended (", StateWord(job->record.status().state()), ")"));
  }
  const bool queued = job->record.status().state() == quilt::v1::JOB_STATE_QUEUED;
  Finish(job, quilt::v1::JOB_STATE_CANCELLED,
         absl::StrCat("cancelled", by.empty() ? (reason.empty() ? " by request" : "") : " by " + by,
                      reason.empty() ? "" : ": " + reason));
  if (queued) RenumberQueue();
  job->cancelled_unheard = !job->unheard_at_end.empty();
  if (job->persisted_version != job->version) {
    // Finish could not store it: the cancel holds until this coordinator
    // stops, and is stored with the job's next change once writes succeed.
    absl::Status stored = Persist(job);
    if (!stored.ok()) {
      return absl::Status(
          stored.code(),
          absl::StrCat("job ", job_id,
                       " is cancelled, but the coordinator cannot store that yet: it is stored "
                       "when its state directory takes writes again (if the coordinator "
                       "restarts before then, executors that had not yet stopped train on: "
                       "cancel again): ",
                       stored.message()));
    }
  }
  return absl::OkStatus();
}

void JobManager::ApplyReport(Job* job, const std::string& node,
                             const quilt::v1::TaskReport& report) {
  quilt::v1::JobRecord& r = job->record;
  auto task = r.mutable_tasks()->find(node);
  if (task == r.mutable_tasks()->end()) return;  // not a node of this job
  const bool ended = Ended(r.status().state());
  if (ended && job->loaded_ended) {
    // Ended before this coordinator started: only an executor's end is
    // noted (its worker is told to stop it until then).
    if (TaskEnded(report.state())) task->second.set_state(report.state());
    return;
  }
  int64_t& next = job->next_step.try_emplace(node, 1).first->second;
  if (report.first_step() > next && report.kept_from_step() > 0 &&
      report.kept_from_step() <= next) {
    // Steps this coordinator lacks (received before a restart, not stored)
    // that the worker still keeps: it sends them again (the receipt asks
    // for them), and this report with them. (A report with no steps of its
    // own, the worker having sent them all before the restart, waits too:
    // taken now, an executor's end would end the job without them.)
    return;
  }
  job->heard.insert(node);
  quilt::v1::TaskReport& t = task->second;
  // An ended job keeps the state it ended in, and takes the steps of its
  // executors up to where it ended (the other ranks' reports of the steps
  // before a failure come after it); an executor's own end is noted.
  if (ended && job->unheard_at_end.erase(node) > 0 && !job->closed && !TaskEnded(t.state())) {
    job->end_step = std::max(job->end_step, report.step());
  }
  const int64_t limit = ended ? job->end_step : INT64_MAX;
  // (An executor's end is final: a late report of it running, one that
  // waited out a retry, does not undo it, nor does a worker's report of a
  // job it no longer knows, stopped by a cancel.)
  if (!TaskEnded(t.state()) && (!ended || TaskEnded(report.state()))) {
    t.set_state(report.state());
  }
  t.set_step(std::max(t.step(), std::min(report.step(), limit)));
  if (report.peak_bytes() > t.peak_bytes()) {
    t.set_peak_bytes(report.peak_bytes());
    (*r.mutable_status()->mutable_measured_memory_bytes())[node] = t.peak_bytes();
  }
  if (!ended && !report.message().empty()) t.set_message(report.message());
  if (!ended && r.status().message() == kAwaitingReports) r.mutable_status()->set_message("");
  const int rank =
      static_cast<int>(std::find(r.world().begin(), r.world().end(), node) - r.world().begin());
  const int world = r.world_size();
  quilt::v1::JobStatus* st = r.mutable_status();
  for (int i = 0; i < report.loss_parts_size(); ++i) {
    const int64_t step = report.first_step() + i;
    if (step > limit) break;
    if (step < next) continue;  // applied before (a retried heartbeat)
    next = step + 1;
    if (rank == 0 && i < report.step_times_s_size()) {
      job->rank0_step_times.push_back(report.step_times_s(i));
    }
    auto& [sum, ranks] = job->loss_by_step[step];
    sum += report.loss_parts(i);
    if (++ranks == world) {
      // Kept until written (Persist); steps missing before it (lost across
      // a coordinator restart) are NaN.
      if (step >= job->losses_first) {
        const size_t at = static_cast<size_t>(step - job->losses_first);
        if (job->losses_tail.size() <= at) job->losses_tail.resize(at + 1, std::nan(""));
        job->losses_tail[at] = sum;
      }
      if (step >= st->last_loss_step()) {
        st->set_last_loss(sum);
        st->set_last_loss_step(step);
      }
      job->loss_by_step.erase(step);
    }
  }
  // The job's step: the one every executor finished (once it is closed,
  // the last any executor reached).
  int64_t step = INT64_MAX;
  for (const auto& [n, task_report] : r.tasks()) step = std::min(step, task_report.step());
  const int64_t before = st->step();
  st->set_step(job->closed ? job->end_step : step == INT64_MAX ? 0 : step);
  if (st->step() > before) *st->mutable_progressed_at() = ToProtoTime(clock_->Now());
  // Measured step time: the mean after the first step (the warm-up), over
  // the last 20 steps or the last kStepTimeWindow of them, whichever is
  // longer (20 steps of a millisecond would swing with every pause).
  auto& times = job->rank0_step_times;
  if (times.size() > kMaxStepTimes) {
    times.erase(times.begin() + 1, times.end() - kMaxStepTimes / 2);  // (the warm-up stays)
  }
  if (times.size() > 1) {
    size_t from = times.size();
    double sum = 0;
    while (from > 1 && (times.size() - from < 20 || sum < kStepTimeWindow)) sum += times[--from];
    const double mean = sum / static_cast<double>(times.size() - from);
    st->set_measured_step_time_s(mean);
    if (mean > 0) st->set_samples_per_s(static_cast<double>(r.spec().global_batch()) / mean);
  }
  if (st->state() == quilt::v1::JOB_STATE_CANCELLED) {
    // If every executor had finished every step (one the cancel reached
    // reports itself cancelled), the job succeeded before the cancel could
    // reach it: while its last reports were on their way, or, cancelled
    // after a restart, before its nodes reported.
    bool finished = static_cast<int>(job->heard.size()) == world;
    for (const auto& [n, task_report] : r.tasks()) {
      finished = finished && task_report.state() == quilt::v1::TASK_STATE_SUCCEEDED &&
                 task_report.step() >= r.spec().steps();
    }
    if (finished) {
      st->set_state(quilt::v1::JOB_STATE_SUCCEEDED);
      st->set_message(
          absl::StrFormat("%d steps (finished %sbefore the cancel reached it)", r.spec().steps(),
                          job->cancelled_unheard ? "while the coordinator was away, " : ""));
      QLOG_INFO("job {}: {}", r.status().job_id(), st->message());
      job->cancelled_unheard = false;
      Changed(job);  // stored at once (OnHeartbeat stores no change of an end)
    }
  }
  if (Ended(st->state())) return;
  if (report.state() == quilt::v1::TASK_STATE_FAILED) {
    const std::string message =
        absl::StrCat("the executor on ", node, " failed: ", report.message());
    // An executor that failed because a peer did: the peer's own report,
    // which names the cause, usually follows; the job waits a little for it.
    if (absl::StrContains(report.message(), kPeerFailed)) {
      if (job->knock_on.message.empty()) job->knock_on = {node, message, clock_->Now()};
      return;
    }
    Finish(job, quilt::v1::JOB_STATE_FAILED, message, node);
    return;
  }
  if (report.state() == quilt::v1::TASK_STATE_CANCELLED) {
    // Workers stop an executor only when the coordinator says so: the job
    // ended before a restart and the end was not stored (a full disk). A
    // cancel, unless another executor reports the failure that ended it
    // (CheckNodes waits a little for that).
    if (job->stopped.message.empty()) {
      job->stopped = {node,
                      absl::StrCat("cancelled (the executor on ", node,
                                   " had been stopped by a cancel this coordinator could not "
                                   "store before it restarted)"),
                      clock_->Now()};
    }
    return;
  }
  if (report.state() == quilt::v1::TASK_STATE_RUNNING &&
      st->state() == quilt::v1::JOB_STATE_PENDING) {
    st->set_state(quilt::v1::JOB_STATE_RUNNING);
    st->set_message("");
    *st->mutable_started_at() = ToProtoTime(clock_->Now());
    *st->mutable_progressed_at() = st->started_at();
  }
  // Done when every executor succeeded and every node has reported to this
  // coordinator (after a restart, a node's stored end may come before the
  // steps its worker keeps and sends again).
  bool all_done = static_cast<int>(job->heard.size()) == world;
  for (const auto& [n, task_report] : r.tasks()) {
    all_done = all_done && task_report.state() == quilt::v1::TASK_STATE_SUCCEEDED;
  }
  if (all_done) {
    if (!st->has_started_at()) *st->mutable_started_at() = ToProtoTime(clock_->Now());
    Finish(job, quilt::v1::JOB_STATE_SUCCEEDED,
           st->last_loss_step() == st->steps()
               ? absl::StrFormat("%d steps, final loss %.6g", st->steps(), st->last_loss())
           : st->last_loss_step() == 0
               ? absl::StrFormat("%d steps (no step's loss is complete: parts of them went "
                                 "with a worker that restarted)",
                                 st->steps())
               : absl::StrFormat("%d steps (losses complete up to step %d, loss %.6g there)",
                                 st->steps(), st->last_loss_step(), st->last_loss()));
  }
}

void JobManager::OnHeartbeat(const quilt::v1::HeartbeatRequest& request,
                             quilt::v1::HeartbeatResponse* response) {
  const std::string& node = request.node_id();
  // Whether the jobs this node ran and reports no more (its worker
  // restarted) finished first: every rank wrote the final checkpoint. Read
  // without the lock: shared storage that hangs stalls this heartbeat, not
  // the coordinator. (Jobs only leave this set meanwhile.)
  std::map<std::string, bool> finished_unreported;
  {
    std::set<std::string> reports;
    for (const quilt::v1::TaskReport& report : request.tasks()) reports.insert(report.job_id());
    struct Unreported {
      std::string id, dir;
      int world = 0;
      int64_t steps = 0;
    };
    std::vector<Unreported> unreported;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [id, job] : jobs_) {
        const quilt::v1::JobRecord& r = job.record;
        auto task = r.tasks().find(node);
        if (task == r.tasks().end() || Ended(r.status().state()) || reports.count(id) ||
            task->second.state() == quilt::v1::TASK_STATE_UNSPECIFIED ||
            TaskEnded(task->second.state())) {
          continue;
        }
        unreported.push_back({id, r.spec().checkpoint_dir(), r.world_size(), r.spec().steps()});
      }
    }
    for (const Unreported& u : unreported) {
      const auto steps = CompleteSteps(u.dir, u.world);
      finished_unreported[u.id] = !steps.empty() && steps.front().first == u.steps;
    }
  }
  absl::MutexLock lock(&mu_);
  std::map<std::string, bool> reported;
  for (const quilt::v1::TaskReport& report : request.tasks()) {
    reported[report.job_id()] = true;
    Job* job = Find(report.job_id());
    if (job == nullptr) {
      // Unknown here (a lost database): stop it if it still runs.
      if (!TaskEnded(report.state())) response->add_cancel_jobs(report.job_id());
      continue;
    }
    const quilt::v1::JobState before = job->record.status().state();
    auto known = job->record.tasks().find(node);
    const TaskState task_before = known == job->record.tasks().end()
                                      ? quilt::v1::TASK_STATE_UNSPECIFIED
                                      : known->second.state();
    const int64_t step_before = job->record.status().step();
    const int64_t next_before = NextStep(*job, node);
    ApplyReport(job, node, report);
    retention_.Progress(report.job_id(), job->record);
    const quilt::v1::JobState after = job->record.status().state();
    // A step that passes a checkpoint is stored at once, so that a job's
    // recorded step never falls behind its last checkpoint.
    const int64_t every = job->record.spec().checkpoint_interval_steps();
    const bool checkpointed =
        every > 0 && job->record.status().step() / every != step_before / every;
    // (Finish already stored an end.)
    if (!(Ended(after) && after != before)) {
      // (An ended job's late steps are stored at once: its workers forget
      // them when told so.)
      const bool late_steps = Ended(after) && NextStep(*job, node) != next_before;
      Changed(job, /*durable=*/after != before || report.state() != task_before || checkpointed ||
                       late_steps);
    }
    if (Ended(job->record.status().state()) && !TaskEnded(report.state())) {
      response->add_cancel_jobs(report.job_id());
    }
    quilt::v1::TaskReceipt* receipt = response->add_receipts();
    receipt->set_job_id(report.job_id());
    const int64_t next_step = NextStep(*job, node);
    // Everything may go once the ended job is stored and this node sent its
    // steps up to the end (or the job ended before this coordinator began).
    // (A node unheard since the job ended, its report waiting for the
    // steps it sends again, may still extend the end: not yet.)
    const bool stored_end =
        Ended(job->record.status().state()) && job->persisted_version == job->version &&
        (job->loaded_ended || (next_step > job->end_step && !job->unheard_at_end.count(node)));
    receipt->set_stored_step(stored_end ? INT64_MAX : job->losses_first - 1);
    receipt->set_next_step(next_step);
  }
  for (const std::string& id : order_) {
    Job& job = jobs_.at(id);
    const quilt::v1::JobRecord& r = job.record;
    auto task = r.tasks().find(node);
    if (task == r.tasks().end()) continue;
    const bool started = task->second.state() != quilt::v1::TASK_STATE_UNSPECIFIED;
    if (!Ended(r.status().state()) && started && !TaskEnded(task->second.state()) &&
        !reported.count(id)) {
      // A worker reports every executor it knows until the coordinator
      // has its end: this one is gone (the worker restarted). If every
      // rank wrote the final checkpoint, it finished first (the worker
      // restarted while the coordinator was away, its report lost).
      auto finished = finished_unreported.find(id);
      if (finished == finished_unreported.end()) continue;  // (the next heartbeat decides)
      if (finished->second) {
        quilt::v1::TaskReport done;
        done.set_job_id(id);
        done.set_state(quilt::v1::TASK_STATE_SUCCEEDED);
        done.set_step(r.spec().steps());
        done.set_message("finished (its final checkpoint is complete); its worker restarted since");
        // The steps it had not reported are lost with its worker: their
        // losses are settled as missing (NaN), and the job's message says
        // up to which step they are complete.
        job.next_step[node] = r.spec().steps() + 1;
        ApplyReport(&job, node, done);
        Changed(&job);
        continue;
      }
      (*job.record.mutable_tasks())[node].set_state(quilt::v1::TASK_STATE_FAILED);
      Finish(&job, quilt::v1::JOB_STATE_FAILED,
             absl::StrCat("the worker on ", node,
                          " no longer runs the executor (did the worker restart?)"),
             node);
      continue;
    }
    if (Ended(r.status().state())) {
      if (started && !TaskEnded(task->second.state()) && !reported.count(id)) {
        response->add_cancel_jobs(id);
      }
      std::string().swap(job.program);
      continue;
    }
    if (started) {
      const bool all_started = std::all_of(r.tasks().begin(), r.tasks().end(), [](const auto& t) {
        return t.second.state() != quilt::v1::TASK_STATE_UNSPECIFIED;
      });
      if (all_started) std::string().swap(job.program);
      continue;
    }
    if (job.program.empty()) {
      // Handed to every node already, or the coordinator restarted.
      absl::StatusOr<CoordinatorStore::JobModel> model = store_->GetJobModel(id);
      if (!model.ok()) {
        QLOG_ERROR("cannot read job {}'s program: {}", id, model.status().ToString());
        continue;
      }
      job.program = std::move(model->program);
    }
    quilt::v1::TaskAssignment* a = response->add_assignments();
    a->set_job_id(id);
    a->set_program(job.program);
    for (const std::string& n : r.world()) a->add_world(n);
    a->set_rank(
        static_cast<int>(std::find(r.world().begin(), r.world().end(), node) - r.world().begin()));
    a->set_steps(r.spec().steps());
    *a->mutable_dataset() = r.spec().dataset();
    a->set_seed(r.spec().seed());
    a->set_checkpoint_interval_steps(r.spec().checkpoint_interval_steps());
    a->set_checkpoint_dir(r.spec().checkpoint_dir());
    a->set_predicted_step_time_s(r.status().predicted_step_time_s());
    if (r.spec().has_resume_from()) *a->mutable_resume_from() = r.spec().resume_from();
  }
}

absl::StatusOr<std::vector<std::string>> JobManager::ExchangeAddresses(const std::string& job_id,
                                                                       int rank, int size,
                                                                       const std::string& address) {
  absl::MutexLock lock(&mu_);
  Job* job = Find(job_id);
  if (job == nullptr || Ended(job->record.status().state())) {
    return absl::NotFoundError("no running job '" + job_id + "'");
  }
  const int world = job->record.world_size();
  if (size != world || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " of ", size, " is not in job ",
                                                   job_id, " (", world, " executors)"));
  }
  if (address.empty()) return absl::InvalidArgumentError("empty address");
  // Kept in the record: a rank that has everyone's addresses does not
  // publish again, and its peers may still be asking when the coordinator
  // restarts.
  auto* addresses = job->record.mutable_addresses();
  while (addresses->size() < world) addresses->Add();
  if (addresses->Get(rank) != address) {
    *addresses->Mutable(rank) = address;
    Changed(job);
  }
  for (const std::string& a : *addresses) {
    if (a.empty()) return std::vector<std::string>{};
  }
  return std::vector<std::string>(addresses->begin(), addresses->end());
}

absl::StatusOr<quilt::v1::JobStatus> JobManager::WaitForChange(const std::string& job_id,
                                                               int64_t* version,
                                                               absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  if (jobs_.find(job_id) == jobs_.end()) return absl::NotFoundError("no job '" + job_id + "'");
  // Looked up again on every check: the job may be deleted meanwhile.
  const int64_t seen = *version;
  auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = jobs_.find(job_id);
    return it == jobs_.end() || it->second.version > seen;
  };
  mu_.AwaitWithTimeout(absl::Condition(&changed), timeout);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError("job '" + job_id + "' was deleted");
  *version = it->second.version;
  return Answered(it->second.record.status());
}

quilt::v1::JobStatus JobManager::Answered(quilt::v1::JobStatus status) const {
  if (status.state() == quilt::v1::JOB_STATE_RUNNING && status.has_progressed_at()) {
    status.set_since_progress_s(std::max(
        0.0, absl::ToDoubleSeconds(clock_->Now() - FromProtoTime(status.progressed_at()))));
  }
  return status;
}

}  // namespace quilt
