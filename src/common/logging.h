// Logging: one thin wrapper over spdlog. Messages carry key=value context
// ("node registered node=a incarnation=1f2e"). Under systemd (stderr is the
// journal stream) records go to journald with their priority; otherwise to
// stderr with a timestamp and level.
//
//   QLOG_INFO("node registered node={} incarnation={:x}", id, inc);
#ifndef QUILT_SRC_COMMON_LOGGING_H_
#define QUILT_SRC_COMMON_LOGGING_H_

#include <string>

#include "absl/status/status.h"
#include "spdlog/spdlog.h"

namespace quilt {

struct LogOptions {
  // Name shown in every record (e.g. "quilt-coordinator").
  std::string component = "quilt";
  // trace | debug | info | warn | error | off.
  std::string level = "info";
};

// Installs the process-wide logger. Call once from main before other threads
// start. Errors: INVALID_ARGUMENT for an unknown level.
absl::Status InitLogging(const LogOptions& options);

// Changes the level of the installed logger (e.g. on SIGHUP).
absl::Status SetLogLevel(const std::string& level);

// True when stderr is connected to the systemd journal.
bool StderrIsJournal();

}  // namespace quilt

#define QLOG_TRACE(...) ::spdlog::trace(__VA_ARGS__)
#define QLOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define QLOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define QLOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define QLOG_ERROR(...) ::spdlog::error(__VA_ARGS__)

#endif  // QUILT_SRC_COMMON_LOGGING_H_
