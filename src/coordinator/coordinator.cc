#include "src/coordinator/coordinator.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "src/common/dir_lock.h"
#include "src/common/logging.h"
#include "src/common/status.h"
#include "src/common/systemd.h"
#include "src/coordinator/store/sqlite_store.h"

namespace quilt {

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(const CoordinatorConfig& config,
                                                                 Clock* clock) {
  std::unique_ptr<Coordinator> c(new Coordinator(config, clock));
  c->start_time_ = clock->Now();
  std::error_code ec;
  std::filesystem::create_directories(config.state_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create state_dir ", config.state_dir, ": ", ec.message()));
  }
  // Absolute: the default checkpoint directory lies under it, and workers
  // run elsewhere.
  std::filesystem::path normal = std::filesystem::absolute(config.state_dir, ec).lexically_normal();
  if (!normal.has_filename() && normal.has_parent_path()) normal = normal.parent_path();  // "dir/"
  const std::string state_dir = normal.string();
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot resolve state_dir ", config.state_dir, ": ", ec.message()));
  }
  c->config_.state_dir = state_dir;
  // One coordinator per state dir: a second would fail the first's running
  // jobs as it loaded them, and both would write the same records.
  ASSIGN_OR_RETURN(c->lock_, DirLock::Acquire(state_dir, "coordinator.lock", "a coordinator"));
  const std::string db_path = state_dir + "/coordinator.db";
  ASSIGN_OR_RETURN(c->store_, SqliteStore::Open(db_path));
  LivenessOptions liveness;
  liveness.heartbeat_period = absl::Milliseconds(config.heartbeat_period_ms);
  liveness.not_ready_after = absl::Milliseconds(config.not_ready_after_ms);
  liveness.down_after = absl::Milliseconds(config.down_after_ms);
  c->registry_ = std::make_unique<NodeRegistry>(clock, c->store_.get(), liveness);
  RETURN_IF_ERROR(Annotate(c->registry_->Load(), "loading " + db_path));
  c->jobs_ = std::make_unique<JobManager>(c->store_.get(), c->registry_.get(), clock,
                                          state_dir + "/checkpoints");
  RETURN_IF_ERROR(Annotate(c->jobs_->Load(), "loading the jobs of " + db_path));
  c->links_ = std::make_unique<LinkProbes>(c->registry_.get(), clock);
  NodeRegistry* registry = c->registry_.get();
  auto ready = [registry](const std::string& id) { return registry->IsReady(id); };
  c->profiles_ = std::make_unique<ModelProfiles>(ProfileOptions{}, ready);
  c->logs_ = std::make_unique<JobLogs>(ready, 2 * liveness.heartbeat_period);
  return c;
}

Coordinator::~Coordinator() { Stop(); }

void Coordinator::Start() {
  ticker_ = std::thread([this] { TickerLoop(); });
}

void Coordinator::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (ticker_.joinable()) ticker_.join();
  if (jobs_ != nullptr) jobs_->Flush();  // null when Create failed
}

// Ticks this many periods apart mean the coordinator itself was paused.
constexpr int kPausedAfterTicks = 8;

void Coordinator::TickerLoop() {
  const absl::Duration period = registry_->options().heartbeat_period / 4;
  const absl::Duration watchdog = WatchdogInterval();
  absl::Time last_watchdog = absl::InfinitePast();
  absl::Time last_tick = clock_->Now();
  while (!stop_.WaitForNotificationWithTimeout(period)) {
    // A tick far later than its period: the coordinator was not running,
    // and the workers' heartbeats of that time wait unread.
    const absl::Time now = clock_->Now();
    if (now - last_tick > kPausedAfterTicks * period) {
      QLOG_WARN("the coordinator did not run for {:.1f} s; node silence counted without it",
                absl::ToDoubleSeconds(now - last_tick - period));
      registry_->ExcuseSilence(now - last_tick - period);
    }
    last_tick = now;
    if (!draining_.load()) {
      registry_->CheckLiveness();
      jobs_->CheckNodes();
    }
    if (watchdog > absl::ZeroDuration() && absl::Now() - last_watchdog >= watchdog) {
      NotifyWatchdog();
      last_watchdog = absl::Now();
    }
  }
}

}  // namespace quilt
