// quilt-coordinator configuration: every key with its default. Loaded from
// defaults < TOML file < $QUILT_COORDINATOR_<KEY> < --<key> flags; printed by
// `quilt-coordinator config default`.
#ifndef QUILT_SRC_COORDINATOR_CONFIG_H_
#define QUILT_SRC_COORDINATOR_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "src/common/config.h"

namespace quilt {

struct CoordinatorConfig {
  std::string listen_address = "127.0.0.1:7070";
  std::string state_dir = "/var/lib/quilt";
  int64_t heartbeat_period_ms = 1000;
  int64_t not_ready_after_ms = 5000;
  int64_t down_after_ms = 30000;
  int64_t max_request_bytes = 256 << 20;
  int64_t drain_timeout_ms = 10000;
  int64_t profile_timeout_ms = 60000;
  // The planner's time budget for submissions and live plans that name
  // none (src/planner/plan_budget.h).
  int64_t plan_time_budget_ms = 10000;
  std::string log_level = "info";
  std::string ready_file;
  // TLS (PEM files), the tokens clients send and the CA of their
  // certificates (security.h).
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string token_file;
  std::string tokens_file;
  std::string tls_client_ca_file;
  // Prometheus metrics over plain HTTP (metrics_server.h); empty = off.
  std::string metrics_address;
};

const ConfigSchema<CoordinatorConfig>& CoordinatorConfigSchema();

// Cross-key checks: not_ready_after_ms > heartbeat_period_ms, down_after_ms >
// not_ready_after_ms, a parseable listen address, which off loopback needs
// TLS and a client token.
absl::Status ValidateCoordinatorConfig(const CoordinatorConfig& config);

}  // namespace quilt

#endif  // QUILT_SRC_COORDINATOR_CONFIG_H_
