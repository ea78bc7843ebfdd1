#include "src/worker/config.h"

#include "src/cluster/node_validation.h"
#include "src/common/cpu_affinity.h"
#include "src/common/net.h"
#include "src/common/status.h"

namespace quilt {

const ConfigSchema<WorkerConfig>& WorkerConfigSchema() {
  static const auto* schema = [] {
    using C = WorkerConfig;
    auto* s = new ConfigSchema<C>("QUILT_WORKER_", "quilt-worker");
    s->String("coordinator_address", &C::coordinator_address,
              "The coordinator's gRPC address (host:port).")
        .String("node_id", &C::node_id,
                "This node's id in the cluster; empty = the hostname. Must stay the same\n"
                "across restarts of the worker.")
        .Int("cpu_devices", &C::cpu_devices,
             "CPU devices to offer; the cores are split evenly between them.", 0, 1024)
        .Int("cpu_cores", &C::cpu_cores, "Cores to use in all; 0 = every core available.", 0, 65536)
        .Int("cpu_memory_mb", &C::cpu_memory_mb,
             "Memory the CPU devices offer jobs, in MiB, split evenly between them\n"
             "(the planner keeps every job within it); 0 = the host's (or its cgroup's).",
             0, int64_t{1} << 40)
        .Int("gpu_memory_reserve_mb", &C::gpu_memory_reserve_mb,
             "Memory each GPU keeps back from what it offers jobs, in MiB: the CUDA\n"
             "context, cuBLAS and NCCL workspaces and allocator slack, which plans do\n"
             "not count (they may fill the rest). A GPU it leaves nothing fails start-up.",
             0, int64_t{1} << 20)
        .String("cpus", &C::cpus,
                "CPUs this worker, its device measurements and its executors run on\n"
                "(a list like \"0-3,8\"); empty = those it was started with (e.g.\n"
                "systemd's CPUAffinity=).")
        .Int("calibration_ms", &C::calibration_ms,
             "Duration of the GEMM speed measurement at start.", 10, 60000)
        .Bool("cuda", &C::cuda, "Discover CUDA GPUs.")
        .Double("compute_slowdown", &C::compute_slowdown,
                "Development: run every kernel this many times slower, to emulate a\n"
                "mixed cluster on one machine. 1 = normal speed.",
                1.0, 1000.0)
        .Int("rpc_timeout_ms", &C::rpc_timeout_ms, "Deadline of every call to the coordinator.",
             100, 600000)
        .Int("max_backoff_ms", &C::max_backoff_ms,
             "Longest wait between attempts to reach the coordinator.", 100, 600000)
        .String("log_level", &C::log_level, "Log verbosity.",
                {"trace", "debug", "info", "warn", "error", "off"})
        .String("ready_file", &C::ready_file,
                "If set, \"<node_id> <incarnation>\" is written here after the first\n"
                "successful registration.")
        .String("executor_path", &C::executor_path,
                "The quilt-executor binary; empty = next to quilt-worker (or in the\n"
                "build tree's src/runtime/).")
        .String("work_dir", &C::work_dir,
                "Where each job's program and executor log go; empty =\n"
                "$STATE_DIRECTORY/<node_id> under systemd (/var/lib/quilt-worker),\n"
                "else $TMPDIR/quilt-worker/<node_id>.")
        .Int("executor_threads", &C::executor_threads, "Kernel threads of each executor.", 1, 1024)
        .Int("stall_timeout_ms", &C::stall_timeout_ms,
             "An executor that finishes no step for this long (nor for 20 times its\n"
             "slowest or its predicted step) is stopped and its job fails as stalled.",
             1000, int64_t{7} * 24 * 3600 * 1000)
        .String("probe_address", &C::probe_address,
                "Where this worker serves link probes from other workers (host:port;\n"
                "port 0 = any). The host must be reachable from the other nodes.")
        .String("tls_ca_file", &C::tls_ca_file,
                "PEM CA certificate(s) to trust the coordinator by: talk TLS to it (its\n"
                "executors too). Needed when the coordinator is not on loopback.")
        .String("token_file", &C::token_file,
                "File holding the coordinator's client token (one line). Needs TLS.")
        .String("tls_server_name", &C::tls_server_name,
                "The name the coordinator's certificate carries, when it is not the\n"
                "host of coordinator_address (e.g. reached by IP).")
        .String("tls_cert_file", &C::tls_cert_file,
                "PEM client certificate this worker (and its executors) present to a\n"
                "coordinator that asks for one (its tls_client_ca_file). Needs TLS.")
        .String("tls_key_file", &C::tls_key_file, "PEM private key of tls_cert_file.");
    return s;
  }();
  return *schema;
}

absl::Status ValidateWorkerConfig(const WorkerConfig& c) {
  RETURN_IF_ERROR(ParseHostPort(c.coordinator_address).status());
  RETURN_IF_ERROR(ParseHostPort(c.probe_address).status());
  if (!c.node_id.empty()) RETURN_IF_ERROR(ValidateNodeId(c.node_id));
  if (!IsLoopbackAddress(c.coordinator_address) && c.tls_ca_file.empty()) {
    return absl::InvalidArgumentError(
        "coordinator_address " + c.coordinator_address +
        " is not a loopback address: talking to it needs TLS (tls_ca_file) and, as the "
        "coordinator asks, its client token (token_file) or certificate (tls_cert_file)");
  }
  if (!c.token_file.empty() && c.tls_ca_file.empty()) {
    return absl::InvalidArgumentError(
        "token_file needs TLS (tls_ca_file): over plaintext anyone on the path could read it");
  }
  if (c.tls_cert_file.empty() != c.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "tls_cert_file and tls_key_file go together: a client certificate needs its key");
  }
  if (!c.tls_cert_file.empty() && c.tls_ca_file.empty()) {
    return absl::InvalidArgumentError(
        "tls_cert_file (a client certificate) needs TLS (tls_ca_file)");
  }
  if (!c.cpus.empty()) {
    if (absl::Status s = ParseCpuList(c.cpus).status(); !s.ok()) {
      return absl::InvalidArgumentError("cpus: " + std::string(s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace quilt
