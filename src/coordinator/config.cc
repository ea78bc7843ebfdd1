#include "src/coordinator/config.h"

#include "absl/strings/str_cat.h"
#include "src/common/net.h"
#include "src/common/status.h"

namespace quilt {

const ConfigSchema<CoordinatorConfig>& CoordinatorConfigSchema() {
  static const auto* schema = [] {
    using C = CoordinatorConfig;
    auto* s = new ConfigSchema<C>("QUILT_COORDINATOR_", "quilt-coordinator");
    s->String("listen_address", &C::listen_address,
              "Address of the gRPC API (workers, quiltctl, clients): host:port.\n"
              "Port 0 picks a free port (see ready_file). Off loopback it needs TLS\n"
              "(tls_cert_file, tls_key_file) and client tokens (token_file or tokens_file)\n"
              "or client certificates (tls_client_ca_file).")
        .String("state_dir", &C::state_dir,
                "Directory of the state database (coordinator.db). Created if missing.")
        .Int("heartbeat_period_ms", &C::heartbeat_period_ms,
             "How often workers are told to heartbeat.", 50, 600000)
        .Int("not_ready_after_ms", &C::not_ready_after_ms,
             "A node with no heartbeat for this long becomes NotReady.", 100, 3600000)
        .Int("down_after_ms", &C::down_after_ms,
             "A node with no heartbeat for this long becomes Down.", 200, 86400000)
        .Int("max_request_bytes", &C::max_request_bytes,
             "Largest request accepted (a submitted model must fit).", 1 << 20, 2000000000)
        .Int("drain_timeout_ms", &C::drain_timeout_ms,
             "On SIGTERM, how long in-flight calls may take before the server stops.", 0, 600000)
        .Int("profile_timeout_ms", &C::profile_timeout_ms,
             "How long a submission waits for the workers to profile its model before planning "
             "(0: plan with the devices' start-up figures).",
             0, 3600000)
        .Int("plan_time_budget_ms", &C::plan_time_budget_ms,
             "How long planning a submitted job (or a live `quiltctl plan` naming no\n"
             "--time-budget) may take, counted on the planner's clock of work (about the\n"
             "wall's seconds on 2 cores; the same plan on any machine). Simulating the plan and\n"
             "the baselines in full is never cut short, so on hundreds of devices it can take\n"
             "longer; where no plan fits, fitting one goes on.",
             100, 600000)
        .String("log_level", &C::log_level, "Log verbosity.",
                {"trace", "debug", "info", "warn", "error", "off"})
        .String("ready_file", &C::ready_file,
                "If set, the bound address is written to this file once serving.")
        .String("tls_cert_file", &C::tls_cert_file,
                "PEM certificate (chain) of the API: serve TLS. Clients trust its CA\n"
                "(workers' tls_ca_file, quiltctl --tls-ca).")
        .String("tls_key_file", &C::tls_key_file, "PEM private key of tls_cert_file.")
        .String("token_file", &C::token_file,
                "File holding the client token (one line): every call must carry it\n"
                "(workers' token_file, quiltctl --token-file); an admin's, allowed\n"
                "every call. Needs TLS.")
        .String("tokens_file", &C::tokens_file,
                "File of named client tokens with roles, a line each: NAME ROLE TOKEN\n"
                "(roles: admin, user: jobs; viewer: reads only; worker: workers and\n"
                "their executors), or NAME ROLE certificate for the client certificate\n"
                "of common name NAME (tls_client_ca_file). Beside or instead of\n"
                "token_file. Needs TLS. SIGHUP (systemctl reload) reads both files again.")
        .String("tls_client_ca_file", &C::tls_client_ca_file,
                "PEM CA(s) of client certificates (mutual TLS): every client must present\n"
                "a certificate one of them signed (workers' tls_cert_file, quiltctl\n"
                "--tls-cert). Without tokens such a client is an admin named by its\n"
                "certificate's common name; with tokens_file, a client without a token\n"
                "must be one of its certificate lines. Needs TLS.")
        .String("metrics_address", &C::metrics_address,
                "If set (host:port), Prometheus metrics are served at /metrics there:\n"
                "nodes, jobs, and each job's step, loss and step time. Plain HTTP with no\n"
                "token (the page holds job names, node ids and numbers). Empty: off.");
    return s;
  }();
  return *schema;
}

absl::Status ValidateCoordinatorConfig(const CoordinatorConfig& c) {
  RETURN_IF_ERROR(ParseHostPort(c.listen_address).status());
  if (!c.metrics_address.empty()) {
    if (absl::Status s = ParseHostPort(c.metrics_address).status(); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("metrics_address: ", s.message()));
    }
  }
  if (c.tls_cert_file.empty() != c.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "tls_cert_file and tls_key_file go together: TLS needs the certificate and its key");
  }
  const bool tokens = !c.token_file.empty() || !c.tokens_file.empty();
  if (tokens && c.tls_cert_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(c.token_file.empty() ? "tokens_file" : "token_file",
                     " needs TLS (tls_cert_file, tls_key_file): over plaintext anyone on the path "
                     "could read the tokens"));
  }
  if (!c.tls_client_ca_file.empty() && c.tls_cert_file.empty()) {
    return absl::InvalidArgumentError(
        "tls_client_ca_file (client certificates) needs TLS (tls_cert_file, tls_key_file)");
  }
  const bool client_certs = !c.tls_client_ca_file.empty();
  if (!IsLoopbackAddress(c.listen_address) &&
      (c.tls_cert_file.empty() || (!tokens && !client_certs))) {
    return absl::InvalidArgumentError(
        "listen_address " + c.listen_address +
        " is not a loopback address: off loopback the API needs TLS (tls_cert_file, "
        "tls_key_file) and client tokens (token_file or tokens_file) or client certificates "
        "(tls_client_ca_file)");
  }
  if (c.not_ready_after_ms <= c.heartbeat_period_ms) {
    return absl::InvalidArgumentError(absl::StrCat("not_ready_after_ms (", c.not_ready_after_ms,
                                                   ") must be greater than heartbeat_period_ms (",
                                                   c.heartbeat_period_ms, ")"));
  }
  if (c.down_after_ms <= c.not_ready_after_ms) {
    return absl::InvalidArgumentError(absl::StrCat("down_after_ms (", c.down_after_ms,
                                                   ") must be greater than not_ready_after_ms (",
                                                   c.not_ready_after_ms, ")"));
  }
  if (c.state_dir.empty()) return absl::InvalidArgumentError("state_dir is empty");
  return absl::OkStatus();
}

}  // namespace quilt
