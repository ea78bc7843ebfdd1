#include "src/worker/worker.h"

#include <algorithm>
#include <random>

#include "src/common/logging.h"
#include "src/common/systemd.h"
#include "src/common/utf8.h"
#include "src/worker/log_tail.h"

namespace quilt {
namespace {

// A log's end read for GetJobLogs, and what one heartbeat carries of them.
constexpr size_t kMaxLogBytes = 256 << 10;
constexpr size_t kMaxLogBytesPerHeartbeat = 1 << 20;

quilt::v1::LogReply JobLog(const TaskRunner* tasks, const quilt::v1::LogRequest& request) {
  quilt::v1::LogReply reply;
  reply.set_request_id(request.request_id());
  const std::string path = tasks == nullptr ? "" : tasks->LogPath(request.job_id());
  if (path.empty()) {
    reply.set_error(tasks == nullptr ? "this worker runs no jobs"
                                     : "'" + ToUtf8(request.job_id()) + "' is no job id");
    return reply;
  }
  // (Every string a protobuf field holds must be UTF-8: a work_dir from the
  // environment may not be.)
  reply.set_path(ToUtf8(path));
  absl::StatusOr<LogTail> tail =
      request.follow()     ? ReadLogFrom(path, request.offset(), kMaxLogBytes)
      : request.run() != 0 ? ReadLogRun(path, request.run(), request.lines(), kMaxLogBytes)
                           : ReadLogTail(path, request.lines(), kMaxLogBytes);
  if (!tail.ok()) {
    reply.set_error(tail.status().code() == absl::StatusCode::kNotFound
                        ? "no log of the job on this node (its work directory was removed, or "
                          "its executor never started here)"
                        : ToUtf8(std::string(tail.status().message())));
    return reply;
  }
  reply.set_text(std::move(tail->text));
  reply.set_truncated(tail->truncated);
  reply.set_end_offset(tail->end_offset);
  reply.set_run(tail->run);
  reply.set_runs(tail->runs);
  return reply;
}

}  // namespace

Worker::Worker(quilt::v1::NodeInfo node, uint64_t incarnation, CoordinatorInterface* coordinator,
               WorkerOptions options)
    : node_(std::move(node)),
      incarnation_(incarnation),
      coordinator_(coordinator),
      options_(std::move(options)) {}

Worker::~Worker() { Stop(); }

void Worker::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void Worker::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  Wake();  // out of the wait for the next heartbeat
  if (thread_.joinable()) thread_.join();
}

bool Worker::Sleep(absl::Duration d) { return !stop_.WaitForNotificationWithTimeout(d); }

bool Worker::AwaitCoordinator(absl::Duration d) {
  const absl::Time end = absl::Now() + d;
  while (!stop_.HasBeenNotified()) {
    const absl::Duration left = end - absl::Now();
    if (left <= absl::ZeroDuration()) return true;
    // In slices, so that a stop is not held up.
    if (coordinator_->WaitForConnection(std::min(left, absl::Milliseconds(200)))) return true;
  }
  return false;
}

void Worker::Wake() {
  absl::MutexLock lock(&wake_mu_);
  woken_ = true;
}

void Worker::Loop() {
  std::mt19937_64 rng(incarnation_);
  std::uniform_real_distribution<double> jitter(0.5, 1.0);
  absl::Duration backoff = options_.initial_backoff;
  absl::Duration period = absl::Seconds(1);
  int failures = 0;
  bool unreachable = false;                      // the last heartbeat's
  std::vector<quilt::v1::LogReply> log_replies;  // not sent yet
  const std::string& id = node_.node_id();

  while (!stop_.HasBeenNotified()) {
    if (!registered_) {
      quilt::v1::RegisterRequest req;
      *req.mutable_node() = node_;
      req.set_incarnation(incarnation_);
      absl::StatusOr<quilt::v1::RegisterResponse> r = coordinator_->Register(req);
      if (r.ok()) {
        registered_ = true;
        period = absl::Seconds(r->heartbeat_period_s());
        backoff = options_.initial_backoff;
        failures = 0;
        QLOG_INFO("registered node={} incarnation={:016x} coordinator_version={} period_s={}", id,
                  incarnation_, r->coordinator_version(), r->heartbeat_period_s());
        NotifyStatus("registered with the coordinator");
        if (registrations_.fetch_add(1) == 0 && options_.on_first_registration) {
          options_.on_first_registration();
        }
        continue;
      }
      // Log the first failure and then every tenth, not every retry.
      if (failures++ % 10 == 0) {
        QLOG_WARN("cannot register node={} retry_in_ms={} error=\"{}\"", id,
                  absl::ToInt64Milliseconds(backoff), r.status().ToString());
        NotifyStatus("waiting for the coordinator: " + std::string(r.status().message()));
      }
      // Unreachable: again as soon as it listens, at the latest after the
      // backoff; refused: after the backoff.
      const absl::Duration wait = backoff * jitter(rng);
      if (r.status().code() == absl::StatusCode::kUnavailable) {
        if (!Sleep(absl::Milliseconds(100)) || !AwaitCoordinator(wait)) break;
      } else if (!Sleep(wait)) {
        break;
      }
      backoff = std::min(backoff * 2, options_.max_backoff);
      continue;
    }

    // The period, or sooner (not before 100 ms) when woken, or, after the
    // coordinator was unreachable, as soon as it listens again.
    if (unreachable) {
      if (!Sleep(absl::Milliseconds(100)) ||
          !AwaitCoordinator(std::max(absl::ZeroDuration(), period - absl::Milliseconds(100)))) {
        break;
      }
    } else {
      if (!Sleep(absl::Milliseconds(100))) break;
      absl::MutexLock lock(&wake_mu_);
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(wake_mu_) {
        return woken_ || stop_.HasBeenNotified();
      };
      wake_mu_.AwaitWithTimeout(absl::Condition(&woken),
                                std::max(absl::ZeroDuration(), period - absl::Milliseconds(100)));
      woken_ = false;
      if (stop_.HasBeenNotified()) break;
    }
    quilt::v1::HeartbeatRequest hb;
    hb.set_node_id(id);
    hb.set_incarnation(incarnation_);
    std::vector<quilt::v1::TaskReport> reports;
    if (options_.tasks != nullptr) {
      options_.tasks->KillStalled();
      reports = options_.tasks->Reports();
    }
    for (const auto& r : reports) *hb.add_tasks() = r;
    std::vector<quilt::v1::LinkProbeResult> measured;
    if (options_.probes != nullptr) measured = options_.probes->Results();
    for (const auto& r : measured) *hb.add_probe_results() = r;
    std::vector<quilt::v1::ModelProfileResult> profiled;
    if (options_.profiler != nullptr) profiled = options_.profiler->Results();
    for (const auto& r : profiled) *hb.add_profile_results() = r;
    size_t logs_sent = 0, log_bytes = 0;
    for (const auto& r : log_replies) {
      log_bytes += r.ByteSizeLong();
      if (logs_sent > 0 && log_bytes > kMaxLogBytesPerHeartbeat) break;
      *hb.add_log_replies() = r;
      ++logs_sent;
    }
    absl::StatusOr<quilt::v1::HeartbeatResponse> h = coordinator_->Heartbeat(hb);
    unreachable = !h.ok() && h.status().code() == absl::StatusCode::kUnavailable;
    if (h.ok()) {
      if (failures > 0) QLOG_INFO("heartbeats resumed node={} after_failures={}", id, failures);
      failures = 0;
      period = absl::Seconds(h->heartbeat_period_s());
      if (options_.tasks != nullptr) {
        options_.tasks->Ack(reports, {h->receipts().begin(), h->receipts().end()});
        if (options_.tasks->Backlogged()) {
          absl::MutexLock lock(&wake_mu_);
          woken_ = true;
        }
        for (const std::string& job : h->cancel_jobs()) options_.tasks->Cancel(job);
        for (const auto& a : h->assignments()) options_.tasks->Start(a);
      }
      if (options_.probes != nullptr) {
        options_.probes->Ack(measured);
        for (const auto& p : h->probes()) options_.probes->Start(p);
      }
      if (options_.profiler != nullptr) {
        options_.profiler->Ack(profiled);
        for (const auto& p : h->profiles()) options_.profiler->Start(p);
      }
      // Logs asked for go back with the next heartbeat, soon.
      log_replies.erase(log_replies.begin(), log_replies.begin() + logs_sent);
      for (const auto& r : h->log_requests()) log_replies.push_back(JobLog(options_.tasks, r));
      if (!log_replies.empty()) {
        absl::MutexLock lock(&wake_mu_);
        woken_ = true;
      }
      continue;
    }
    const absl::StatusCode code = h.status().code();
    // Log replies go again only while the coordinator is away: refused,
    // they could be what it refuses (the coordinator asks again).
    if (code != absl::StatusCode::kUnavailable && code != absl::StatusCode::kDeadlineExceeded) {
      log_replies.clear();
    }
    if (code == absl::StatusCode::kAborted || code == absl::StatusCode::kNotFound) {
      QLOG_WARN("coordinator rejected heartbeat node={} error=\"{}\"; registering again", id,
                h.status().ToString());
      registered_ = false;
      failures = 0;
      continue;
    }
    if (failures++ % 10 == 0) {
      QLOG_WARN("heartbeat failed node={} error=\"{}\"", id, h.status().ToString());
    }
  }
  // Stopping: the coordinator learns it at once (the node is Down, no new
  // work goes there), and with executors running their jobs fail saying
  // why, before the executors die and their peers can only report a lost
  // peer.
  if (registered_) {
    quilt::v1::HeartbeatRequest hb;
    hb.set_node_id(id);
    hb.set_incarnation(incarnation_);
    hb.set_stopping(true);
    if (options_.tasks != nullptr) {
      if (options_.tasks->running() > 0) {
        options_.tasks->Abandon("the worker on " + id + " was stopped");
      }
      for (const auto& r : options_.tasks->Reports()) *hb.add_tasks() = r;
    }
    absl::StatusOr<quilt::v1::HeartbeatResponse> h = coordinator_->Heartbeat(hb);
    if (!h.ok()) {
      QLOG_WARN("cannot report the stop node={} error=\"{}\"", id, h.status().ToString());
    }
  }
}

}  // namespace quilt
