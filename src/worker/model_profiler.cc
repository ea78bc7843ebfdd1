#include "src/worker/model_profiler.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "src/common/files.h"
#include "src/common/logging.h"
#include "src/common/status.h"
#include "src/worker/spawn.h"

namespace quilt {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

ModelProfiler::ModelProfiler(ProfilerOptions options) : options_(std::move(options)) {
  thread_ = std::thread([this] { Loop(); });
}

ModelProfiler::~ModelProfiler() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    if (child_ > 0) kill(child_, SIGKILL);
  }
  thread_.join();
}

void ModelProfiler::Start(const quilt::v1::ModelProfile& profile) {
  absl::MutexLock lock(&mu_);
  if (!known_.insert(profile.profile_id()).second) {
    // Asked again (a restarted coordinator): a finished profile is sent
    // again; one queued or running reports when it ends.
    auto done = finished_.find(profile.profile_id());
    if (done == finished_.end()) return;
    for (const auto& r : results_) {
      if (r.profile_id() == profile.profile_id()) return;
    }
    results_.push_back(done->second);
    return;
  }
  queue_.push_back(profile);
}

std::vector<quilt::v1::ModelProfileResult> ModelProfiler::Results() const {
  absl::MutexLock lock(&mu_);
  return results_;
}

void ModelProfiler::Ack(const std::vector<quilt::v1::ModelProfileResult>& sent) {
  absl::MutexLock lock(&mu_);
  for (const auto& r : sent) {
    results_.erase(std::remove_if(results_.begin(), results_.end(),
                                  [&](const quilt::v1::ModelProfileResult& x) {
                                    return x.profile_id() == r.profile_id();
                                  }),
                   results_.end());
  }
}

void ModelProfiler::Loop() {
  while (true) {
    quilt::v1::ModelProfile next;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ModelProfiler* p)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) { return p->stop_ || !p->queue_.empty(); },
          this));
      if (stop_) return;
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    quilt::v1::ModelProfileResult result = Run(next);
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
      if (result.error().empty() && result.jobs_running() == 0) {
        finished_[result.profile_id()] = result;
      } else {
        // A failure may not recur, nor a job's load: asked again, run again.
        known_.erase(result.profile_id());
      }
      results_.push_back(std::move(result));
    }
    if (options_.on_result) options_.on_result();
  }
}

quilt::v1::ModelProfileResult ModelProfiler::Run(const quilt::v1::ModelProfile& profile) {
  const absl::Time start = absl::Now();
  quilt::v1::ModelProfileResult result;
  result.set_profile_id(profile.profile_id());
  auto busy = [this] { return options_.jobs_running ? options_.jobs_running() : 0; };
  int jobs = busy();
  for (int i = 0; i < profile.runs_size(); ++i) {
    absl::Status st = RunOne(profile, i, result.add_runs());
    if (!st.ok()) {
      result.clear_runs();
      result.set_error(std::string(st.message()));
      break;
    }
  }
  result.set_wall_s(absl::ToDoubleSeconds(absl::Now() - start));
  result.set_jobs_running(std::max(jobs, busy()));
  if (result.error().empty()) {
    std::string runs;
    for (const auto& r : result.runs()) {
      absl::StrAppend(&runs, runs.empty() ? "" : ", ", r.rows(), " rows ",
                      absl::StrFormat("%.2f", r.step_time_s() * 1e3), " ms");
    }
    QLOG_INFO("profile {} on {}: {} ({:.1f} s)", profile.profile_id(), profile.device(), runs,
              result.wall_s());
  } else {
    QLOG_WARN("profile {} on {} failed: {}", profile.profile_id(), profile.device(),
              result.error());
  }
  return result;
}

absl::Status ModelProfiler::RunOne(const quilt::v1::ModelProfile& profile, int index,
                                   quilt::v1::ModelProfileResult::Run* out) {
  const quilt::v1::ModelProfile::Run& run = profile.runs(index);
  const std::string dir =
      absl::StrCat(options_.work_dir, "/profiles/", profile.profile_id(), "/", run.rows(), "-rows");
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir + "/rdv", ec);
  if (ec) return absl::UnavailableError("cannot create " + dir + ": " + ec.message());
  RETURN_IF_ERROR(WriteFileAtomically(dir + "/program.pb", run.program()));
  std::vector<std::string> argv = {
      options_.executor_path, "--program", dir + "/program.pb", "--world", options_.node_id,
      "--rank", "0", "--rendezvous", dir + "/rdv", "--steps",
      std::to_string(std::max<int64_t>(1, profile.steps())), "--data", "synthetic", "--threads",
      std::to_string(options_.threads), "--out", dir + "/out",
      // (The job's learning rate on synthetic
      // data may diverge: nothing is applied.)
      "--timing-only"};
  if (options_.compute_slowdown > 1) {
    argv.insert(argv.end(),
                {"--slowdown", absl::StrCat(profile.device(), "=", options_.compute_slowdown)});
  }
  const std::string log = dir + "/executor.log";
  pid_t pid = -1;
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return absl::CancelledError("the worker is stopping");
    ASSIGN_OR_RETURN(pid, SpawnChild(std::move(argv), log, -1));
    child_ = pid;
  }
  const absl::Time deadline = absl::Now() + options_.run_timeout;
  int status = 0;
  bool timed_out = false;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (absl::Now() > deadline && !timed_out) {
      timed_out = true;
      kill(pid, SIGKILL);
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  {
    absl::MutexLock lock(&mu_);
    child_ = -1;
  }
  if (timed_out) {
    return absl::DeadlineExceededError(absl::StrCat("the run at ", run.rows(),
                                                    " rows took longer than ",
                                                    absl::FormatDuration(options_.run_timeout)));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const std::string last = LastExecutorError(log);
    return absl::InternalError(absl::StrCat("the executor at ", run.rows(), " rows ",
                                            WIFSIGNALED(status) ? "was killed" : "failed",
                                            last.empty() ? "" : ": ", last));
  }
  std::ifstream in(dir + "/out/metrics.json");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json m = nlohmann::json::parse(text.str(), nullptr, false);
  if (m.is_discarded() || !m.contains("step_times_s") || !m.contains("compute_times_s")) {
    return absl::InternalError("the executor wrote no step times in " + dir + "/out/metrics.json");
  }
  std::vector<double> steps, compute;
  const size_t n = m["step_times_s"].size();
  const size_t skip = std::min<size_t>(
      static_cast<size_t>(std::max<int64_t>(0, profile.warmup_steps())), n > 0 ? n - 1 : 0);
  for (size_t k = skip; k < n && k < m["compute_times_s"].size(); ++k) {
    steps.push_back(m["step_times_s"][k].get<double>());
    compute.push_back(m["compute_times_s"][k].get<double>());
  }
  if (steps.empty()) return absl::InternalError("the executor ran no steps");
  out->set_rows(run.rows());
  out->set_step_time_s(Median(steps));
  out->set_compute_time_s(Median(compute));
  std::filesystem::remove_all(dir, ec);
  std::filesystem::remove(options_.work_dir + "/profiles/" + profile.profile_id(), ec);
  return absl::OkStatus();
}

}  // namespace quilt
