// Command-line side of ConfigSchema: adds `--config FILE` and one `--<key>`
// flag per config key to a CLI11 app, and the `config default` /
// `config check FILE` subcommands; then resolves the final config from all
// layers. Used by the daemons' main.cc (the only place flags are defined).
#ifndef QUILT_SRC_COMMON_CONFIG_CLI_H_
#define QUILT_SRC_COMMON_CONFIG_CLI_H_

#include <unistd.h>  // environ

#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "src/common/config.h"
#include "src/common/status.h"

namespace quilt {

// Parses the command line: nullopt to go on, else the exit status (0 after
// --help or --version, 2 for a usage error; CLI11 printed it).
inline std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return std::nullopt;
}

template <typename T>
class ConfigCli {
 public:
  // `validate` checks cross-key constraints of a complete config.
  ConfigCli(CLI::App* app, const ConfigSchema<T>* schema,
            std::function<absl::Status(const T&)> validate)
      : schema_(schema), validate_(std::move(validate)) {
    app->add_option("--config", config_path_,
                    "TOML config file (keys as printed by `config default`)");
    for (const ConfigField& f : schema->fields()) {
      flag_options_[f.key] =
          app->add_option("--" + f.key, flag_values_[f.key], f.doc)
              ->group("Config keys (also in the file and as $" + schema->env_prefix() + "<KEY>)");
    }
    CLI::App* config_cmd = app->add_subcommand("config", "Print or check configuration");
    default_cmd_ = config_cmd->add_subcommand("default", "Print every key with its default");
    check_cmd_ = config_cmd->add_subcommand("check", "Validate a config file");
    check_cmd_->add_option("file", check_path_, "TOML file")->required();
    config_cmd->require_subcommand(1);
  }

  // After app.parse(): handles `config default|check` (returns the exit code
  // to exit with), else returns nullopt and fills `*config` from defaults <
  // file < env < flags, or prints the error and returns exit code 2.
  std::optional<int> Resolve(T* config) {
    if (*default_cmd_) {
      std::cout << schema_->RenderToml(T{});
      return 0;
    }
    if (*check_cmd_) {
      T checked{};
      absl::Status s = schema_->ApplyTomlFile(check_path_, &checked);
      if (s.ok()) s = validate_(checked);
      if (!s.ok()) {
        std::cerr << "config check failed: " << s.message() << "\n";
        return 1;
      }
      std::cout << check_path_ << ": OK\n";
      return 0;
    }
    absl::Status s = Build(config);
    if (!s.ok()) {
      std::cerr << "configuration error: " << s.message() << "\n";
      return 2;
    }
    return std::nullopt;
  }

 private:
  absl::Status Build(T* config) {
    *config = T{};
    if (!config_path_.empty()) RETURN_IF_ERROR(schema_->ApplyTomlFile(config_path_, config));
    std::vector<std::string> names;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
      const std::string entry(*e);
      names.push_back(entry.substr(0, entry.find('=')));
    }
    RETURN_IF_ERROR(schema_->CheckEnvNames(names));
    RETURN_IF_ERROR(schema_->ApplyEnv(config, [](const char* n) { return std::getenv(n); }));
    for (const auto& [key, option] : flag_options_) {
      if (option->count() > 0) RETURN_IF_ERROR(schema_->Set(key, flag_values_[key], config));
    }
    return validate_(*config);
  }

  const ConfigSchema<T>* schema_;
  std::function<absl::Status(const T&)> validate_;
  std::string config_path_;
  std::string check_path_;
  std::map<std::string, std::string> flag_values_;
  std::map<std::string, CLI::Option*> flag_options_;
  CLI::App* default_cmd_ = nullptr;
  CLI::App* check_cmd_ = nullptr;
};

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_CONFIG_CLI_H_
