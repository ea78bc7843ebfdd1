// The start of a daemon's main, the same for each: termination signals
// blocked before any thread starts (signals.h), the command line and the
// config resolved (config_cli.h: --help, --version and `config …` exit
// here), logging set up, then the daemon's own Run with the config.
#ifndef QUILT_SRC_COMMON_DAEMON_MAIN_H_
#define QUILT_SRC_COMMON_DAEMON_MAIN_H_

#include <cstdio>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "src/common/config_cli.h"
#include "src/common/logging.h"
#include "src/common/signals.h"
#include "src/common/version.h"

namespace quilt {

// `name` is the binary's ("quilt-worker"), `about` heads its --help. The
// exit status: 1 when signals cannot be blocked, 0 or 2 from the command
// line and config, 2 when logging cannot be set up, else `run`'s.
template <typename T>
int DaemonMain(int argc, char** argv, const std::string& name, const std::string& about,
               const ConfigSchema<T>* schema, std::function<absl::Status(const T&)> validate,
               const std::function<int(const T&)>& run) {
  if (absl::Status s = BlockTerminationSignals(); !s.ok()) {
    std::cerr << name << ": " << s.message() << "\n";
    return 1;
  }
  CLI::App app{name + ": " + about};
  app.set_version_flag("--version", kVersion);
  T config;
  ConfigCli<T> config_cli(&app, schema, std::move(validate));
  if (std::optional<int> code = ParseCommandLine(app, argc, argv)) return *code;
  if (std::optional<int> code = config_cli.Resolve(&config)) return *code;
  if (absl::Status s = InitLogging({name, config.log_level}); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 2;
  }
  return run(config);
}

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_DAEMON_MAIN_H_
