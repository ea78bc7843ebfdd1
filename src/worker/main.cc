// quilt-worker: one daemon per node. Flags, config, logging, signals, device
// discovery and calibration, registration and heartbeats, systemd readiness,
// stop on SIGTERM; the node's job executors (tasks.h).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/cluster/local_node.h"
#include "src/common/cpu_affinity.h"
#include "src/common/crash_report.h"
#include "src/common/daemon_main.h"
#include "src/common/dir_lock.h"
#include "src/common/file_limit.h"
#include "src/common/files.h"
#include "src/common/logging.h"
#include "src/common/net.h"
#include "src/common/random.h"
#include "src/common/signals.h"
#include "src/common/status.h"
#include "src/common/systemd.h"
#include "src/common/version.h"
#include "src/rpc/coordinator_client.h"
#include "src/rpc/security.h"
#include "src/worker/config.h"
#include "src/worker/kernel_rates.h"
#include "src/worker/model_profiler.h"
#include "src/worker/worker.h"

namespace quilt {
namespace {

// Each CPU device's op-type rates, measured with the threads its kernels
// will have, as the GEMM rate is: the executor's kernel threads, at most the
// device's cores (the compute slowdown divides them, as it does the GEMM
// rate).
absl::Status AddOpTypeRates(const WorkerConfig& config, quilt::v1::NodeInfo* node) {
  int cores = 0;
  for (const auto& d : node->devices()) {
    if (d.kind() == quilt::v1::DEVICE_KIND_CPU) cores = std::max(cores, d.cores());
  }
  if (cores == 0) return absl::OkStatus();
  const int threads = std::min(static_cast<int>(config.executor_threads), cores);
  ASSIGN_OR_RETURN(std::vector<quilt::v1::OpTypeRate> rates,
                   MeasureOpTypeRates(threads, absl::Milliseconds(config.calibration_ms)));
  for (auto& d : *node->mutable_devices()) {
    if (d.kind() != quilt::v1::DEVICE_KIND_CPU) continue;
    for (quilt::v1::OpTypeRate r : rates) {
      r.set_flops_per_s(r.flops_per_s() / std::max(1.0, config.compute_slowdown));
      *d.add_measured_op_type_rates() = r;
    }
  }
  std::string list;
  for (const auto& r : rates) {
    absl::StrAppend(&list, list.empty() ? "" : " ", r.op_type(), "=",
                    absl::StrFormat("%.1f", r.flops_per_s() / 1e9));
  }
  QLOG_INFO("op-type calibration gflops: {}", list);
  return absl::OkStatus();
}

int Run(WorkerConfig config) {
  RaiseOpenFileLimit();
  if (config.node_id.empty()) config.node_id = LocalHostname();
  if (absl::Status s = ValidateWorkerConfig(config); !s.ok()) {
    QLOG_ERROR("node id from the hostname is not usable: {}; set node_id", s.ToString());
    return 2;
  }
  const uint64_t incarnation = RandomNonZeroU64();
  QLOG_INFO("starting node={} incarnation={:016x} version={} coordinator={}", config.node_id,
            incarnation, kVersion, config.coordinator_address);

  // Pinned before measuring the devices, so that they are measured on the
  // CPUs their executors (which inherit it) will run on.
  if (!config.cpus.empty()) {
    absl::StatusOr<std::vector<int>> cpus = PinProcessToCpuList(config.cpus);
    if (!cpus.ok()) {
      QLOG_ERROR("cpus: {}", std::string(cpus.status().message()));
      return 2;
    }
    QLOG_INFO("running on CPUs {}", FormatCpuList(*cpus));
  }

  // Checked before measuring the devices (seconds): a bad setting is told
  // at once.
  absl::StatusOr<rpc::ClientSecurity> security =
      rpc::LoadClientSecurity(config.tls_ca_file, config.token_file, config.tls_server_name,
                              config.tls_cert_file, config.tls_key_file);
  if (!security.ok()) {
    QLOG_ERROR("configuration error: {}", std::string(security.status().message()));
    return 2;
  }
  rpc::SetClientSecurity(*security);
  std::string executor = config.executor_path;
  if (executor.empty()) {
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe");
    for (const auto& candidate :
         {self.parent_path() / "quilt-executor",
          self.parent_path().parent_path() / "runtime" / "quilt-executor"}) {
      if (std::filesystem::exists(candidate)) {
        executor = candidate.string();
        break;
      }
    }
  }
  if (executor.empty() || access(executor.c_str(), X_OK) != 0) {
    QLOG_ERROR("no runnable quilt-executor ({}); set executor_path",
               executor.empty() ? "none found next to quilt-worker" : executor);
    return 2;
  }
  std::string work_dir = config.work_dir;
  if (work_dir.empty()) {
    // systemd's StateDirectory= (the unit's /var/lib/quilt-worker), else
    // the temporary directory.
    const char* state = std::getenv("STATE_DIRECTORY");  // a list: the first
    const char* tmp = std::getenv("TMPDIR");
    if (state != nullptr && *state != '\0') {
      const std::string first(state);
      work_dir = absl::StrCat(first.substr(0, first.find(':')), "/", config.node_id);
    } else {
      work_dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/quilt-worker/", config.node_id);
    }
  }
  // Jobs would fail one by one on a work_dir that cannot be used: the
  // worker does not start.
  if (absl::Status w = MakeWritableDir(work_dir); !w.ok()) {
    QLOG_ERROR("configuration error: work_dir {} is not usable: {}", work_dir,
               std::string(w.message()));
    return 2;
  }
  // One worker per work_dir: its jobs' directories are its own.
  absl::StatusOr<std::unique_ptr<DirLock>> work_lock =
      DirLock::Acquire(work_dir, "worker.lock", "a worker");
  if (!work_lock.ok()) {
    QLOG_ERROR("configuration error: {}", std::string(work_lock.status().message()));
    return 2;
  }
  // The programs of jobs a previous run of this worker ran (their executors
  // ended with it): a job's program goes when the coordinator has its end,
  // which that run may not have heard. Their logs stay.
  {
    std::error_code ec;
    int removed = 0;
    for (std::filesystem::directory_iterator it(work_dir, ec), end; !ec && it != end;
         it.increment(ec)) {
      std::error_code rm;
      if (std::filesystem::remove(it->path() / "program.pb", rm)) ++removed;
    }
    if (removed > 0) QLOG_INFO("removed {} program(s) of jobs a previous run left", removed);
  }

  LocalNodeOptions local;
  local.node_id = config.node_id;
  local.version = kVersion;
  local.cpu_devices = static_cast<int>(config.cpu_devices);
  local.cpu_cores = static_cast<int>(config.cpu_cores);
  local.kernel_threads = static_cast<int>(config.executor_threads);
  local.calibration = absl::Milliseconds(config.calibration_ms);
  local.discover_cuda = config.cuda;
  local.compute_slowdown = config.compute_slowdown;
  local.cpu_memory_bytes = config.cpu_memory_mb << 20;
  local.gpu_memory_reserve_bytes = config.gpu_memory_reserve_mb << 20;
  absl::StatusOr<quilt::v1::NodeInfo> node = DiscoverLocalNode(local);
  if (!node.ok()) {
    QLOG_ERROR("device discovery failed: {}", node.status().ToString());
    return 1;
  }
  if (absl::Status s = AddOpTypeRates(config, &*node); !s.ok()) {
    QLOG_ERROR("device calibration failed: {}", s.ToString());
    return 1;
  }

  absl::StatusOr<std::unique_ptr<ProbeServer>> probe_server =
      ProbeServer::Start(config.probe_address);
  if (!probe_server.ok()) {
    QLOG_ERROR("{}", probe_server.status().ToString());
    return 1;
  }
  node->set_address((*probe_server)->address());

  rpc::CoordinatorClient client(config.coordinator_address,
                                absl::Milliseconds(config.rpc_timeout_ms));
  std::atomic<Worker*> running{nullptr};  // read by executor and probe threads
  TaskRunnerOptions task_options;
  task_options.executor_path = executor;
  task_options.work_dir = work_dir;
  task_options.coordinator_address = config.coordinator_address;
  // Paths as configured: the executors run on this node.
  for (const auto& [flag, value] :
       {std::pair<const char*, const std::string&>{"--tls-ca", config.tls_ca_file},
        {"--token-file", config.token_file},
        {"--tls-server-name", config.tls_server_name},
        {"--tls-cert", config.tls_cert_file},
        {"--tls-key", config.tls_key_file}}) {
    if (!value.empty())
      task_options.security_flags.insert(task_options.security_flags.end(), {flag, value});
  }
  task_options.compute_slowdown = config.compute_slowdown;
  for (const auto& d : node->devices()) task_options.device_ids.push_back(d.id());
  task_options.threads = static_cast<int>(config.executor_threads);
  task_options.stall_timeout = absl::Milliseconds(config.stall_timeout_ms);
  task_options.on_change = [&running] {
    if (Worker* w = running.load()) w->Wake();
  };
  TaskRunner tasks(task_options);
  ProbeRunner probes([&running] {
    if (Worker* w = running.load()) w->Wake();
  });
  ProfilerOptions profiler_options;
  profiler_options.executor_path = executor;
  profiler_options.work_dir = work_dir;
  profiler_options.node_id = config.node_id;
  profiler_options.threads = static_cast<int>(config.executor_threads);
  profiler_options.compute_slowdown = config.compute_slowdown;
  profiler_options.jobs_running = [&tasks] { return tasks.running(); };
  profiler_options.on_result = [&running] {
    if (Worker* w = running.load()) w->Wake();
  };
  ModelProfiler profiler(profiler_options);
  WorkerOptions options;
  options.tasks = &tasks;
  options.probes = &probes;
  options.profiler = &profiler;
  options.max_backoff = absl::Milliseconds(config.max_backoff_ms);
  options.on_first_registration = [&config, incarnation] {
    if (config.ready_file.empty()) return;
    absl::Status s = WriteFileAtomically(
        config.ready_file, absl::StrFormat("%s %016x\n", config.node_id, incarnation));
    if (!s.ok()) QLOG_ERROR("cannot write ready_file: {}", s.ToString());
  };
  Worker worker(*node, incarnation, &client, options);
  running = &worker;
  worker.Start();
  NotifyReady(absl::StrFormat("%d device(s); registering with %s", node->devices_size(),
                              config.coordinator_address));

  const bool watchdog = WatchdogInterval() > absl::ZeroDuration();
  while (WaitForSignal(absl::Seconds(1)) != DaemonSignal::kTerminate) {
    if (watchdog) NotifyWatchdog();
  }
  QLOG_INFO("stopping node={}", config.node_id);
  NotifyStopping();
  worker.Stop();
  running = nullptr;
  QLOG_INFO("stopped");
  return 0;
}

}  // namespace
}  // namespace quilt

int main(int argc, char** argv) {
  quilt::InstallCrashReport(argv[0]);
  return quilt::DaemonMain<quilt::WorkerConfig>(
      argc, argv, "quilt-worker", "offers this node's devices to a Quilt coordinator",
      &quilt::WorkerConfigSchema(), quilt::ValidateWorkerConfig,
      [](const quilt::WorkerConfig& config) { return quilt::Run(config); });
}
