#include "src/worker/tasks.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "src/common/files.h"
#include "src/common/logging.h"
#include "src/worker/log_tail.h"
#include "src/worker/spawn.h"

namespace quilt {
namespace {

bool Ended(quilt::v1::TaskState s) {
  return s == quilt::v1::TASK_STATE_SUCCEEDED || s == quilt::v1::TASK_STATE_FAILED ||
         s == quilt::v1::TASK_STATE_CANCELLED;
}

}  // namespace

TaskRunner::TaskRunner(TaskRunnerOptions options) : options_(std::move(options)) {}

TaskRunner::~TaskRunner() {
  std::vector<std::unique_ptr<Task>> all;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, t] : tasks_) {
      if (!t->exited && t->pid > 0) {
        t->cancelled = t->stop_reason.empty();
        kill(-t->pid, SIGKILL);
      }
      all.push_back(std::move(t));
    }
    tasks_.clear();
  }
  for (auto& t : all) {
    if (t->reader.joinable()) t->reader.join();
  }
}

void TaskRunner::Start(const quilt::v1::TaskAssignment& a) {
  absl::MutexLock lock(&mu_);
  if (tasks_.count(a.job_id())) return;
  auto task = std::make_unique<Task>();
  Task* t = task.get();
  t->job_id = a.job_id();
  t->dir = options_.work_dir + "/" + a.job_id();
  t->slowest_step_s = std::max(0.0, a.predicted_step_time_s());
  tasks_[a.job_id()] = std::move(task);
  auto fail = [&](const std::string& why) {
    t->state = quilt::v1::TASK_STATE_FAILED;
    t->message = why;
    QLOG_ERROR("job {}: cannot start the executor: {}", a.job_id(), why);
  };
  std::error_code ec;
  std::filesystem::create_directories(t->dir, ec);
  if (ec) return fail("cannot create " + t->dir + ": " + ec.message());
  if (absl::Status w = WriteFileAtomically(t->dir + "/program.pb", a.program()); !w.ok()) {
    return fail(std::string(w.message()));
  }
  std::vector<std::string> argv = {
      options_.executor_path,
      "--program",
      t->dir + "/program.pb",
      "--world",
      absl::StrJoin(a.world(), ","),
      "--rank",
      std::to_string(a.rank()),
      "--rendezvous",
      absl::StrCat("coordinator://", options_.coordinator_address, "/", a.job_id()),
      "--steps",
      std::to_string(a.steps()),
      "--threads",
      std::to_string(options_.threads),
      "--progress"};
  argv.insert(argv.end(), options_.security_flags.begin(), options_.security_flags.end());
  if (a.dataset().source_case() == quilt::v1::DatasetSpec::kNumpy) {
    const quilt::v1::NumpyDataset& numpy = a.dataset().numpy();
    std::string files = numpy.inputs_path();
    for (const std::string& more : numpy.more_inputs_paths()) absl::StrAppend(&files, ",", more);
    argv.insert(argv.end(), {"--data", absl::StrCat(files, ",", numpy.labels_path()), "--seed",
                             std::to_string(a.seed())});
  } else {
    argv.insert(argv.end(),
                {"--data", "synthetic", "--seed", std::to_string(a.dataset().synthetic_seed())});
  }
  if (!a.checkpoint_dir().empty()) {
    argv.insert(argv.end(), {"--checkpoint-dir", a.checkpoint_dir(), "--checkpoint-every",
                             std::to_string(a.checkpoint_interval_steps())});
  }
  if (a.has_resume_from()) {
    const quilt::v1::ResumeFrom& from = a.resume_from();
    if (!from.checkpoint().empty()) {
      argv.insert(argv.end(), {"--restore", from.checkpoint(), "--restore-world",
                               std::to_string(from.world())});
    }
    argv.insert(argv.end(), {"--steps-before", std::to_string(from.steps_before())});
  }
  if (options_.compute_slowdown > 1) {
    std::vector<std::string> items;
    for (const std::string& d : options_.device_ids) {
      items.push_back(absl::StrCat(d, "=", options_.compute_slowdown));
    }
    argv.insert(argv.end(), {"--slowdown", absl::StrJoin(items, ",")});
  }
  const std::string log = t->dir + "/executor.log";
  // (This run's first line: `quiltctl logs --run` tells the runs of a job
  // on this node apart.)
  absl::StatusOr<int> runs = CountLogRuns(log);
  if (!runs.ok()) return fail(std::string(runs.status().message()));
  {
    std::ofstream out(log, std::ios::app | std::ios::binary);
    out << RunMarker(*runs + 1, a.rank(), a.world_size(),
                     absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone()),
                     a.has_resume_from() ? a.resume_from().steps_before() : 0)
        << "\n";
    out.flush();
    if (!out) return fail("cannot write " + log);
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return fail(std::string("pipe: ") + strerror(errno));
  absl::StatusOr<pid_t> spawned = SpawnChild(std::move(argv), log, fds[1]);
  if (!spawned.ok()) {
    close(fds[0]);
    close(fds[1]);
    return fail(std::string(spawned.status().message()));
  }
  const pid_t pid = *spawned;
  close(fds[1]);
  t->pid = pid;
  t->out_fd = fds[0];
  t->state = quilt::v1::TASK_STATE_RUNNING;
  t->last_progress = absl::Now();
  QLOG_INFO("job {}: started executor pid={} rank={} of {}", a.job_id(), pid, a.rank(),
            a.world_size());
  t->reader = std::thread([this, t] { Read(t); });
}

// Progress lines until the executor exits. Not until end of file: a
// process it started (under a wrapper script) may hold the pipe open
// after it ended; what is left of its process group is killed then.
void TaskRunner::Read(Task* t) {
  std::string pending;
  char buf[4096];
  auto exited = [&] {
    siginfo_t info = {};
    return waitid(P_PID, static_cast<id_t>(t->pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
           info.si_pid == t->pid;
  };
  bool ended = false;
  for (;;) {
    ended = ended || exited();
    pollfd p = {t->out_fd, POLLIN, 0};
    const int ready = poll(&p, 1, ended ? 0 : 200);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      if (ended) break;  // exited, and nothing more to read
      continue;
    }
    const ssize_t n = read(t->out_fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // end of file (or an error reading it)
    pending.append(buf, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      const nlohmann::json j =
          nlohmann::json::parse(pending.begin() + start, pending.begin() + nl, nullptr, false);
      if (j.is_discarded() || !j.contains("step")) continue;
      {
        absl::MutexLock lock(&mu_);
        t->step = j.value("step", int64_t{0});
        const auto& part = j["loss_part"];
        t->loss_parts.push_back(part.is_number() ? part.get<double>() : 0.0);
        t->step_times.push_back(j.value("step_time_s", 0.0));
        t->peak_bytes = std::max(t->peak_bytes, j.value("peak_bytes", int64_t{0}));
        t->last_progress = absl::Now();
        t->slowest_step_s = std::max(t->slowest_step_s, t->step_times.back());
      }
      if (options_.on_change) options_.on_change();
    }
    pending.erase(0, start);
  }
  close(t->out_fd);
  // Wait for the exit without reaping, so that the pid stays this child's
  // (Cancel may still signal it) until the state says it ended.
  siginfo_t info = {};
  waitid(P_PID, static_cast<id_t>(t->pid), &info, WEXITED | WNOWAIT);
  kill(-t->pid, SIGKILL);  // what it left running
  int status = 0;
  {
    absl::MutexLock lock(&mu_);
    waitpid(t->pid, &status, 0);
    t->exited = true;
    if (t->cancelled) {
      t->state = quilt::v1::TASK_STATE_CANCELLED;
    } else if (!t->stop_reason.empty()) {
      t->state = quilt::v1::TASK_STATE_FAILED;
      t->message = t->stop_reason;
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      t->state = quilt::v1::TASK_STATE_SUCCEEDED;
    } else {
      t->state = quilt::v1::TASK_STATE_FAILED;
      const std::string log = t->dir + "/executor.log";
      t->message = LastExecutorError(log);
      if (WIFSIGNALED(status)) {
        const int sig = WTERMSIG(status);
        const char* name = sigdescr_np(sig);  // (strsignal is not thread-safe)
        t->message = absl::StrCat("killed by signal ", sig, " (", name != nullptr ? name : "?", ")",
                                  t->message.empty() ? "" : ": ", t->message,
                                  sig == SIGKILL ? "" : "; its log: " + log);
      }
      if (t->message.empty())
        t->message = "exited with status " + std::to_string(WEXITSTATUS(status));
    }
    QLOG_INFO("job {}: executor pid={} ended: {} {}", t->job_id, t->pid,
              quilt::v1::TaskState_Name(t->state), t->message);
  }
  if (options_.on_change) options_.on_change();
}

void TaskRunner::Cancel(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = tasks_.find(job_id);
  if (it == tasks_.end()) {
    // Never started here: remember it as cancelled so the coordinator
    // hears back.
    auto t = std::make_unique<Task>();
    t->job_id = job_id;
    t->state = quilt::v1::TASK_STATE_CANCELLED;
    tasks_[job_id] = std::move(t);
    return;
  }
  Task* t = it->second.get();
  if (Ended(t->state) || t->pid <= 0) return;
  if (t->cancelled) {
    // Asked again (every heartbeat until it ended): force it after 5 s.
    if (absl::Now() - t->cancelled_at > absl::Seconds(5)) kill(-t->pid, SIGKILL);
    return;
  }
  t->cancelled = true;
  t->cancelled_at = absl::Now();
  kill(-t->pid, SIGTERM);
  QLOG_INFO("job {}: stopping executor pid={}", job_id, t->pid);
}

bool TaskRunner::Stoppable(const Task& t) {
  return !Ended(t.state) && t.pid > 0 && !t.cancelled && t.stop_reason.empty();
}

void TaskRunner::KillStalled() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  for (auto& [id, t] : tasks_) {
    if (!Stoppable(*t)) continue;
    const absl::Duration limit =
        std::max(options_.stall_timeout, absl::Seconds(20 * t->slowest_step_s));
    const absl::Duration silent = now - t->last_progress;
    if (silent < limit) continue;
    t->stop_reason = absl::StrFormat(
        "the executor finished no step for %.0f s (%s) and was stopped as stalled "
        "(stall_timeout_ms); its log: %s/executor.log",
        absl::ToDoubleSeconds(silent),
        t->step == 0 ? "before its first step" : absl::StrCat("after step ", t->step), t->dir);
    QLOG_ERROR("job {}: {}", id, t->stop_reason);
    kill(-t->pid, SIGKILL);
  }
}

void TaskRunner::Abandon(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  for (auto& [id, t] : tasks_) {
    if (!Stoppable(*t)) continue;
    t->stop_reason = reason;
    t->state = quilt::v1::TASK_STATE_FAILED;
    t->message = reason;
  }
}

std::vector<quilt::v1::TaskReport> TaskRunner::Reports() const {
  absl::MutexLock lock(&mu_);
  std::vector<quilt::v1::TaskReport> out;
  for (const auto& [id, t] : tasks_) {
    quilt::v1::TaskReport r;
    r.set_job_id(id);
    r.set_state(t->state);
    r.set_step(t->step);
    r.set_first_step(t->next_send);
    r.set_kept_from_step(t->first_kept);
    r.set_peak_bytes(t->peak_bytes);
    // At most kMaxReportSteps per report (the heartbeat's size).
    const size_t from = static_cast<size_t>(t->next_send - t->first_kept);
    const size_t n = std::min<size_t>(t->loss_parts.size() - from, kMaxReportSteps);
    for (size_t i = from; i < from + n; ++i) {
      r.add_loss_parts(t->loss_parts[i]);
      r.add_step_times_s(t->step_times[i]);
    }
    // An ended task reports its end only with its last steps.
    if (from + n < t->loss_parts.size() && Ended(t->state)) {
      r.set_state(quilt::v1::TASK_STATE_RUNNING);
    }
    r.set_message(t->message);
    out.push_back(std::move(r));
  }
  return out;
}

void TaskRunner::Ack(const std::vector<quilt::v1::TaskReport>& reports,
                     const std::vector<quilt::v1::TaskReceipt>& receipts) {
  std::map<std::string, const quilt::v1::TaskReceipt*> receipt_of;
  for (const quilt::v1::TaskReceipt& receipt : receipts) receipt_of[receipt.job_id()] = &receipt;
  std::vector<std::unique_ptr<Task>> done;
  {
    absl::MutexLock lock(&mu_);
    for (const quilt::v1::TaskReport& r : reports) {
      auto it = tasks_.find(r.job_id());
      if (it == tasks_.end()) continue;
      Task* t = it->second.get();
      const int64_t kept_end = t->first_kept + static_cast<int64_t>(t->loss_parts.size());
      auto receipt = receipt_of.find(r.job_id());
      // Without a receipt (a coordinator that does not know the job, or
      // predates receipts) what it received is forgotten.
      const int64_t sent = r.first_step() + r.loss_parts_size();
      const int64_t stored =
          receipt == receipt_of.end() ? sent - 1 : receipt->second->stored_step();
      const int64_t next = receipt == receipt_of.end() ? sent : receipt->second->next_step();
      const size_t forget = static_cast<size_t>(
          std::clamp<int64_t>(stored - t->first_kept + 1, 0, kept_end - t->first_kept));
      t->loss_parts.erase(t->loss_parts.begin(), t->loss_parts.begin() + forget);
      t->step_times.erase(t->step_times.begin(), t->step_times.begin() + forget);
      t->first_kept += static_cast<int64_t>(forget);
      t->next_send = std::clamp(next, t->first_kept, kept_end);
      if (Ended(r.state()) && Ended(t->state) && t->loss_parts.empty()) {
        // The log stays for diagnosis; the program (possibly large) goes.
        std::error_code ec;
        if (!t->dir.empty()) std::filesystem::remove(t->dir + "/program.pb", ec);
        done.push_back(std::move(it->second));
        tasks_.erase(it);
      }
    }
  }
  for (auto& t : done) {
    if (t->reader.joinable()) t->reader.join();
  }
}

bool TaskRunner::Backlogged() const {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, t] : tasks_) {
    const size_t sent = static_cast<size_t>(t->next_send - t->first_kept);
    if (t->loss_parts.size() - sent >= kMaxReportSteps) return true;
  }
  return false;
}

std::string TaskRunner::LogPath(const std::string& job_id) const {
  if (job_id.empty() || job_id == "." || job_id == ".." ||
      job_id.find_first_of("/\\") != std::string::npos) {
    return "";
  }
  return options_.work_dir + "/" + job_id + "/executor.log";
}

int TaskRunner::running() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [id, t] : tasks_) n += Ended(t->state) ? 0 : 1;
  return n;
}

}  // namespace quilt
