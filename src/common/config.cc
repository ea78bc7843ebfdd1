#include "src/common/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "src/common/status.h"
#include "toml++/toml.h"

namespace quilt {
namespace {

constexpr int64_t kConfigVersion = 1;

const char* TypeName(ConfigType t) {
  switch (t) {
    case ConfigType::kInt:
      return "an integer";
    case ConfigType::kDouble:
      return "a number";
    case ConfigType::kBool:
      return "a boolean";
    case ConfigType::kString:
      return "a string";
  }
  return "?";
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string QuoteToml(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string RenderValue(const ConfigValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return absl::StrCat(*i);
  if (const auto* d = std::get_if<double>(&v)) {
    std::string s = absl::StrFormat("%.17g", *d);
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
  }
  if (const auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  return QuoteToml(std::get<std::string>(v));
}

// Converts a TOML node to the field's type. Integers are accepted for
// doubles. Returns an error message or "".
std::string FromToml(const ConfigField& field, const toml::node& node, ConfigValue* out) {
  switch (field.type) {
    case ConfigType::kInt:
      if (auto v = node.value_exact<int64_t>()) {
        *out = *v;
        return "";
      }
      break;
    case ConfigType::kDouble:
      if (auto v = node.value_exact<double>()) {
        *out = *v;
        return "";
      }
      if (auto v = node.value_exact<int64_t>()) {
        *out = static_cast<double>(*v);
        return "";
      }
      break;
    case ConfigType::kBool:
      if (auto v = node.value_exact<bool>()) {
        *out = *v;
        return "";
      }
      break;
    case ConfigType::kString:
      if (auto v = node.value_exact<std::string>()) {
        *out = *v;
        return "";
      }
      break;
  }
  return absl::StrCat("must be ", TypeName(field.type));
}

}  // namespace

ConfigSchemaBase::ConfigSchemaBase(std::string env_prefix, std::string config_name)
    : env_prefix_(std::move(env_prefix)), config_name_(std::move(config_name)) {}

void ConfigSchemaBase::AddField(ConfigField field) { fields_.push_back(std::move(field)); }

std::string ConfigSchemaBase::EnvName(const std::string& key) const {
  return env_prefix_ + absl::AsciiStrToUpper(key);
}

const ConfigField* ConfigSchemaBase::Find(const std::string& key) const {
  for (const ConfigField& f : fields_) {
    if (f.key == key) return &f;
  }
  return nullptr;
}

absl::Status ConfigSchemaBase::CheckAndSet(const ConfigField& field, const ConfigValue& value,
                                           const std::string& where, void* config) const {
  double number = NAN;
  if (const auto* i = std::get_if<int64_t>(&value)) number = static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(&value)) number = *d;
  if (!std::isnan(number) && (number < field.min || number > field.max)) {
    // Integer keys' bounds as integers (not 1.04858e+06).
    auto bound = [&field](double b) {
      return field.type == ConfigType::kInt && std::fabs(b) < 9e15
                 ? absl::StrCat(static_cast<int64_t>(b))
                 : absl::StrFormat("%g", b);
    };
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s = %s is out of range [%s, %s]", where,
                                                      field.key, RenderValue(value),
                                                      bound(field.min), bound(field.max)));
  }
  if (field.type == ConfigType::kDouble && !std::isfinite(number)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s must be a finite number", where, field.key));
  }
  if (!field.choices.empty()) {
    const std::string& s = std::get<std::string>(value);
    if (std::find(field.choices.begin(), field.choices.end(), s) == field.choices.end()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: %s = \"%s\" is not one of: %s", where,
                                                        field.key, s,
                                                        absl::StrJoin(field.choices, ", ")));
    }
  }
  field.set(config, value);
  return absl::OkStatus();
}

absl::Status ConfigSchemaBase::ApplyTomlImpl(const std::string& text, const std::string& source,
                                             void* config) const {
  toml::table table;
  try {
    table = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s:%d: %s", source, e.source().begin.line, std::string(e.description())));
  }
  for (auto&& [key, node] : table) {
    const std::string name(key.str());
    const std::string where = absl::StrCat(source, ":", node.source().begin.line);
    if (name == "version") {
      auto v = node.value_exact<int64_t>();
      if (!v || *v != kConfigVersion) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: unsupported config version (this %s reads version = %d)", where,
                            config_name_, kConfigVersion));
      }
      continue;
    }
    const ConfigField* field = Find(name);
    if (field == nullptr) {
      std::string hint;
      size_t best = 3;
      for (const ConfigField& f : fields_) {
        size_t d = EditDistance(name, f.key);
        if (d < best) {
          best = d;
          hint = absl::StrCat(" (did you mean '", f.key, "'?)");
        }
      }
      if (node.is_table()) hint = " (tables are not used: keys are flat)";
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: unknown key '%s'%s", where, name, hint));
    }
    ConfigValue value;
    if (std::string err = FromToml(*field, node, &value); !err.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: %s %s", where, name, err));
    }
    RETURN_IF_ERROR(CheckAndSet(*field, value, where, config));
  }
  return absl::OkStatus();
}

absl::Status ConfigSchemaBase::ApplyTomlFileImpl(const std::string& path, void* config) const {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError("config file " + path + " is a directory, not a file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read config file ", path, ": ", std::strerror(errno)));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return ApplyTomlImpl(buffer.str(), path, config);
}

absl::Status ConfigSchemaBase::SetImpl(const std::string& key, const std::string& text,
                                       const std::string& source, void* config) const {
  const ConfigField* field = Find(key);
  if (field == nullptr) return absl::NotFoundError(absl::StrCat("unknown config key '", key, "'"));
  ConfigValue value;
  bool ok = true;
  switch (field->type) {
    case ConfigType::kInt: {
      int64_t v;
      ok = absl::SimpleAtoi(text, &v);
      value = v;
      break;
    }
    case ConfigType::kDouble: {
      double v;
      ok = absl::SimpleAtod(text, &v);
      value = v;
      break;
    }
    case ConfigType::kBool: {
      bool v;
      ok = absl::SimpleAtob(text, &v);
      value = v;
      break;
    }
    case ConfigType::kString:
      value = text;
      break;
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: '%s' is not %s", source, text, TypeName(field->type)));
  }
  return CheckAndSet(*field, value, source, config);
}

absl::Status ConfigSchemaBase::ApplyEnvImpl(
    void* config, const std::function<const char*(const char*)>& getenv) const {
  for (const ConfigField& f : fields_) {
    const std::string name = EnvName(f.key);
    if (const char* v = getenv(name.c_str()); v != nullptr) {
      RETURN_IF_ERROR(SetImpl(f.key, v, "$" + name, config));
    }
  }
  return absl::OkStatus();
}

absl::Status ConfigSchemaBase::CheckEnvNames(const std::vector<std::string>& names) const {
  for (const std::string& name : names) {
    if (name.size() <= env_prefix_.size() ||
        name.compare(0, env_prefix_.size(), env_prefix_) != 0) {
      continue;
    }
    if (name == env_prefix_ + "ARGS") continue;  // the systemd units' extra flags
    bool known = false;
    for (const ConfigField& f : fields_) known |= EnvName(f.key) == name;
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat("$", name, " names no ", config_name_,
                                                     " setting (`config default` lists them)"));
    }
  }
  return absl::OkStatus();
}

std::string ConfigSchemaBase::RenderTomlImpl(const void* config) const {
  std::string out = absl::StrCat("# ", config_name_,
                                 " configuration. Every key is optional; the values shown are "
                                 "the defaults.\n# Precedence: defaults < this file < $",
                                 env_prefix_, "<KEY> < --<key> flags.\n\n");
  absl::StrAppend(&out, "version = ", kConfigVersion, "\n");
  for (const ConfigField& f : fields_) {
    out += "\n";
    std::istringstream doc(f.doc);
    for (std::string line; std::getline(doc, line);) absl::StrAppend(&out, "# ", line, "\n");
    if (!f.choices.empty())
      absl::StrAppend(&out, "# One of: ", absl::StrJoin(f.choices, ", "), "\n");
    absl::StrAppend(&out, f.key, " = ", RenderValue(f.get(config)), "\n");
  }
  return out;
}

}  // namespace quilt
