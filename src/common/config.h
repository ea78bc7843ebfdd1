// Typed configuration with documented defaults, layered
//   defaults < TOML file < environment < command-line flags.
//
// A daemon describes its config struct once with a ConfigSchema<T> (key, doc,
// type, bounds, member pointer); the schema then parses TOML files (naming
// the file, line and key of every error), reads QUILT_<DAEMON>_<KEY>
// environment variables, applies flag values, and renders every default as a
// commented TOML file (`config default`). Files carry a top-level
// `version = 1`. Keys are flat and mirror the flags: `heartbeat_period_ms`
// in the file is `--heartbeat_period_ms` on the command line.
#ifndef QUILT_SRC_COMMON_CONFIG_H_
#define QUILT_SRC_COMMON_CONFIG_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"

namespace quilt {

using ConfigValue = std::variant<int64_t, double, bool, std::string>;

enum class ConfigType { kInt, kDouble, kBool, kString };

struct ConfigField {
  std::string key;
  std::string doc;
  ConfigType type;
  // Inclusive bounds for kInt / kDouble.
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  // For kString: allowed values (empty = any).
  std::vector<std::string> choices;
  std::function<void(void* config, const ConfigValue& value)> set;
  std::function<ConfigValue(const void* config)> get;
};

// Untyped core; use ConfigSchema<T>.
class ConfigSchemaBase {
 public:
  // `env_prefix` e.g. "QUILT_COORDINATOR_"; `config_name` e.g.
  // "quilt-coordinator" (used in rendered files).
  ConfigSchemaBase(std::string env_prefix, std::string config_name);

  const std::vector<ConfigField>& fields() const { return fields_; }
  const std::string& env_prefix() const { return env_prefix_; }

  // Environment variable name of a key: prefix + upper-cased key.
  std::string EnvName(const std::string& key) const;

 protected:
  void AddField(ConfigField field);

  // Parses TOML text; `source` names it in errors ("file.toml"). Errors:
  // INVALID_ARGUMENT naming source:line and the key (syntax errors, unknown
  // keys, wrong types, values out of range, unsupported version).
  absl::Status ApplyTomlImpl(const std::string& text, const std::string& source,
                             void* config) const;
  // Reads the file and applies it. Errors: NOT_FOUND / PERMISSION_DENIED for
  // unreadable files, else as ApplyTomlImpl.
  absl::Status ApplyTomlFileImpl(const std::string& path, void* config) const;
  // Applies every set QUILT_<...>_<KEY> variable, read through `getenv`.
  absl::Status ApplyEnvImpl(void* config,
                            const std::function<const char*(const char*)>& getenv) const;
  // Refuses environment variables with this schema's prefix that name no
  // key (a misspelt setting would otherwise be ignored), but <prefix>ARGS
  // (the systemd units' extra flags). `names`: the environment's variable
  // names. Errors: INVALID_ARGUMENT naming the first.
  absl::Status CheckEnvNames(const std::vector<std::string>& names) const;
  // Applies one value given as text (a flag). Errors: NOT_FOUND for an unknown
  // key, INVALID_ARGUMENT for a bad value.
  absl::Status SetImpl(const std::string& key, const std::string& text, const std::string& source,
                       void* config) const;
  std::string RenderTomlImpl(const void* config) const;

 private:
  const ConfigField* Find(const std::string& key) const;
  absl::Status CheckAndSet(const ConfigField& field, const ConfigValue& value,
                           const std::string& where, void* config) const;

  std::string env_prefix_;
  std::string config_name_;
  std::vector<ConfigField> fields_;
};

template <typename T>
class ConfigSchema : public ConfigSchemaBase {
 public:
  using ConfigSchemaBase::ConfigSchemaBase;

  ConfigSchema& Int(std::string key, int64_t T::*member, std::string doc,
                    int64_t min = std::numeric_limits<int64_t>::min(),
                    int64_t max = std::numeric_limits<int64_t>::max()) {
    ConfigField f{std::move(key), std::move(doc), ConfigType::kInt};
    f.min = static_cast<double>(min);
    f.max = static_cast<double>(max);
    f.set = [member](void* c, const ConfigValue& v) {
      static_cast<T*>(c)->*member = std::get<int64_t>(v);
    };
    f.get = [member](const void* c) { return ConfigValue(static_cast<const T*>(c)->*member); };
    AddField(std::move(f));
    return *this;
  }

  ConfigSchema& Double(std::string key, double T::*member, std::string doc,
                       double min = -std::numeric_limits<double>::infinity(),
                       double max = std::numeric_limits<double>::infinity()) {
    ConfigField f{std::move(key), std::move(doc), ConfigType::kDouble};
    f.min = min;
    f.max = max;
    f.set = [member](void* c, const ConfigValue& v) {
      static_cast<T*>(c)->*member = std::get<double>(v);
    };
    f.get = [member](const void* c) { return ConfigValue(static_cast<const T*>(c)->*member); };
    AddField(std::move(f));
    return *this;
  }

  ConfigSchema& Bool(std::string key, bool T::*member, std::string doc) {
    ConfigField f{std::move(key), std::move(doc), ConfigType::kBool};
    f.set = [member](void* c, const ConfigValue& v) {
      static_cast<T*>(c)->*member = std::get<bool>(v);
    };
    f.get = [member](const void* c) { return ConfigValue(static_cast<const T*>(c)->*member); };
    AddField(std::move(f));
    return *this;
  }

  ConfigSchema& String(std::string key, std::string T::*member, std::string doc,
                       std::vector<std::string> choices = {}) {
    ConfigField f{std::move(key), std::move(doc), ConfigType::kString};
    f.choices = std::move(choices);
    f.set = [member](void* c, const ConfigValue& v) {
      static_cast<T*>(c)->*member = std::get<std::string>(v);
    };
    f.get = [member](const void* c) { return ConfigValue(static_cast<const T*>(c)->*member); };
    AddField(std::move(f));
    return *this;
  }

  using ConfigSchemaBase::CheckEnvNames;
  absl::Status ApplyToml(const std::string& text, const std::string& source, T* config) const {
    return ApplyTomlImpl(text, source, config);
  }
  absl::Status ApplyTomlFile(const std::string& path, T* config) const {
    return ApplyTomlFileImpl(path, config);
  }
  absl::Status ApplyEnv(T* config, const std::function<const char*(const char*)>& getenv) const {
    return ApplyEnvImpl(config, getenv);
  }
  absl::Status Set(const std::string& key, const std::string& text, T* config) const {
    return SetImpl(key, text, "--" + key, config);
  }
  // Every key with its doc comment and value, as a loadable TOML file.
  std::string RenderToml(const T& config) const { return RenderTomlImpl(&config); }
};

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_CONFIG_H_
