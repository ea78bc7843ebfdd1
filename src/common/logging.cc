#include "src/common/logging.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/sinks/systemd_sink.h"

namespace quilt {
namespace {

absl::Status ParseLevel(const std::string& text, spdlog::level::level_enum* level) {
  static const std::pair<const char*, spdlog::level::level_enum> kLevels[] = {
      {"trace", spdlog::level::trace}, {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},   {"warn", spdlog::level::warn},
      {"error", spdlog::level::err},   {"off", spdlog::level::off},
  };
  for (const auto& [name, value] : kLevels) {
    if (text == name) {
      *level = value;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError("unknown log level '" + text +
                                    "' (expected trace, debug, info, warn, error or off)");
}

}  // namespace

bool StderrIsJournal() {
  // systemd sets JOURNAL_STREAM=<device>:<inode> of the stream it connects.
  const char* env = std::getenv("JOURNAL_STREAM");
  if (env == nullptr) return false;
  std::pair<std::string, std::string> parts = absl::StrSplit(env, ':');
  uint64_t dev = 0, ino = 0;
  if (!absl::SimpleAtoi(parts.first, &dev) || !absl::SimpleAtoi(parts.second, &ino)) return false;
  struct stat st;
  if (fstat(fileno(stderr), &st) != 0) return false;
  return static_cast<uint64_t>(st.st_dev) == dev && static_cast<uint64_t>(st.st_ino) == ino;
}

absl::Status InitLogging(const LogOptions& options) {
  spdlog::level::level_enum level;
  if (absl::Status s = ParseLevel(options.level, &level); !s.ok()) return s;
  std::shared_ptr<spdlog::logger> logger;
  if (StderrIsJournal()) {
    auto sink = std::make_shared<spdlog::sinks::systemd_sink_mt>(options.component);
    logger = std::make_shared<spdlog::logger>(options.component, sink);
    logger->set_pattern("%v");
  } else {
    auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    logger = std::make_shared<spdlog::logger>(options.component, sink);
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ %n: %v");
  }
  logger->set_level(level);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
  return absl::OkStatus();
}

absl::Status SetLogLevel(const std::string& text) {
  spdlog::level::level_enum level;
  if (absl::Status s = ParseLevel(text, &level); !s.ok()) return s;
  spdlog::default_logger()->set_level(level);
  return absl::OkStatus();
}

}  // namespace quilt
