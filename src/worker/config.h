// quilt-worker configuration: every key with its default. Loaded from
// defaults < TOML file < $QUILT_WORKER_<KEY> < --<key> flags; printed by
// `quilt-worker config default`.
#ifndef QUILT_SRC_WORKER_CONFIG_H_
#define QUILT_SRC_WORKER_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "src/common/config.h"

namespace quilt {

struct WorkerConfig {
  std::string coordinator_address = "127.0.0.1:7070";
  std::string node_id;
  int64_t cpu_devices = 1;
  int64_t cpu_cores = 0;
  int64_t cpu_memory_mb = 0;
  int64_t gpu_memory_reserve_mb = 1024;
  std::string cpus;
  int64_t calibration_ms = 1000;
  bool cuda = true;
  double compute_slowdown = 1.0;
  int64_t rpc_timeout_ms = 5000;
  int64_t max_backoff_ms = 5000;
  std::string log_level = "info";
  std::string ready_file;
  std::string executor_path;
  std::string work_dir;
  int64_t executor_threads = 1;
  int64_t stall_timeout_ms = 600000;
  std::string probe_address = "127.0.0.1:0";
  // TLS to the coordinator, the client token and certificate
  // (src/rpc/security.h).
  std::string tls_ca_file;
  std::string token_file;
  std::string tls_server_name;
  std::string tls_cert_file;  // a client certificate (mutual TLS)
  std::string tls_key_file;
};

const ConfigSchema<WorkerConfig>& WorkerConfigSchema();

// Cross-key checks (a parseable coordinator address, a valid node id; TLS
// to a coordinator off loopback).
absl::Status ValidateWorkerConfig(const WorkerConfig& config);

}  // namespace quilt

#endif  // QUILT_SRC_WORKER_CONFIG_H_
