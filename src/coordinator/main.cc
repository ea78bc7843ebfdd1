// quilt-coordinator: the cluster's control plane daemon. Flags, config,
// logging, signals, state, gRPC service, systemd readiness, drain on SIGTERM.
#include <cblas-openblas.h>

#include <memory>

#include "src/common/clock.h"
#include "src/common/crash_report.h"
#include "src/common/daemon_main.h"
#include "src/common/file_limit.h"
#include "src/common/files.h"
#include "src/common/logging.h"
#include "src/common/metrics_server.h"
#include "src/common/signals.h"
#include "src/common/systemd.h"
#include "src/common/version.h"
#include "src/coordinator/config.h"
#include "src/coordinator/coordinator.h"
#include "src/coordinator/metrics.h"
#include "src/rpc/coordinator_server.h"

namespace quilt {
namespace {

int Fail(const char* what, const absl::Status& s) {
  QLOG_ERROR("{}: {}", what, s.ToString());
  return 1;
}

int Run(const CoordinatorConfig& config) {
  RaiseOpenFileLimit();
  auto coordinator = Coordinator::Create(config, RealClock::Get());
  if (!coordinator.ok()) return Fail("cannot load state", coordinator.status());
  auto server = rpc::CoordinatorServer::Start(coordinator->get());
  if (!server.ok()) return Fail("cannot start the API server", server.status());
  (*coordinator)->Start();
  const std::string address = (*server)->address();
  std::string transport = config.tls_cert_file.empty() ? "plaintext(loopback)" : "tls";
  if (!config.tls_client_ca_file.empty()) transport += "+client-certs";
  if (!config.tokens_file.empty()) {
    transport += "+tokens";
  } else if (!config.token_file.empty()) {
    transport += "+token";
  }
  QLOG_INFO("serving address={} state_dir={} version={} transport={}", address, config.state_dir,
            kVersion, transport);
  std::unique_ptr<MetricsServer> metrics;
  if (!config.metrics_address.empty()) {
    Coordinator* c = coordinator->get();
    auto m = MetricsServer::Start(config.metrics_address, "/metrics", [c] {
      return RenderMetrics(c->registry()->ListNodes(), c->jobs()->List());
    });
    if (!m.ok()) return Fail("cannot serve metrics", m.status());
    metrics = std::move(*m);
    QLOG_INFO("metrics at http://{}/metrics", metrics->address());
  }
  if (!config.ready_file.empty()) {
    if (absl::Status s = WriteFileAtomically(config.ready_file, address + "\n"); !s.ok()) {
      return Fail("cannot write ready_file", s);
    }
  }
  NotifyReady("serving on " + address);

  for (;;) {
    DaemonSignal sig = WaitForSignal(absl::Seconds(1));
    if (sig == DaemonSignal::kTerminate) break;
    if (sig == DaemonSignal::kReload) {
      // The client tokens (a client added, a token rotated or revoked).
      absl::StatusOr<size_t> n = (*server)->ReloadClients();
      if (n.ok()) {
        QLOG_INFO("SIGHUP: reloaded the client tokens: {} clients", *n);
      } else {
        QLOG_WARN("SIGHUP: the client tokens were not reloaded (the old ones stay): {}",
                  std::string(n.status().message()));
      }
    }
  }
  QLOG_INFO("draining timeout_ms={}", config.drain_timeout_ms);
  NotifyStopping();
  // Heartbeats go unanswered from now on: nodes are not judged by them.
  (*coordinator)->BeginDrain();
  // Submissions waiting for profiles plan at once with what they have.
  (*coordinator)->profiles()->Shutdown();
  (*coordinator)->logs()->Shutdown();
  metrics.reset();
  (*server)->Shutdown(absl::Milliseconds(config.drain_timeout_ms));
  (*coordinator)->Stop();
  QLOG_INFO("stopped");
  return 0;
}

}  // namespace
}  // namespace quilt

int main(int argc, char** argv) {
  quilt::InstallCrashReport(argv[0]);
  // The planner's linear programs call BLAS on tiny matrices; OpenBLAS's
  // worker threads would then spin on the cores plans are searched on.
  openblas_set_num_threads(1);
  return quilt::DaemonMain<quilt::CoordinatorConfig>(
      argc, argv, "quilt-coordinator", "plans and tracks distributed training on a cluster",
      &quilt::CoordinatorConfigSchema(), quilt::ValidateCoordinatorConfig,
      [](const quilt::CoordinatorConfig& config) { return quilt::Run(config); });
}
