#include "src/graph/attrs.h"

#include "absl/strings/str_cat.h"
#include "src/common/status.h"

namespace quilt {

int64_t Attrs::Int(const std::string& key, int64_t def) const {
  auto it = values_.find(key);
  if (it == values_.end()) return def;
  if (const auto* v = std::get_if<int64_t>(&it->second)) return *v;
  if (const auto* v = std::get_if<double>(&it->second)) return static_cast<int64_t>(*v);
  return def;
}

double Attrs::Float(const std::string& key, double def) const {
  auto it = values_.find(key);
  if (it == values_.end()) return def;
  if (const auto* v = std::get_if<double>(&it->second)) return *v;
  if (const auto* v = std::get_if<int64_t>(&it->second)) return static_cast<double>(*v);
  return def;
}

std::string Attrs::String(const std::string& key, const std::string& def) const {
  auto it = values_.find(key);
  if (it == values_.end()) return def;
  if (const auto* v = std::get_if<std::string>(&it->second)) return *v;
  return def;
}

std::vector<int64_t> Attrs::Ints(const std::string& key, std::vector<int64_t> def) const {
  auto it = values_.find(key);
  if (it == values_.end()) return def;
  if (const auto* v = std::get_if<std::vector<int64_t>>(&it->second)) return *v;
  return def;
}

std::vector<double> Attrs::Floats(const std::string& key, std::vector<double> def) const {
  auto it = values_.find(key);
  if (it == values_.end()) return def;
  if (const auto* v = std::get_if<std::vector<double>>(&it->second)) return *v;
  return def;
}

absl::StatusOr<int64_t> Attrs::RequireInt(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) return absl::InvalidArgumentError("missing attribute '" + key + "'");
  if (const auto* v = std::get_if<int64_t>(&it->second)) return *v;
  return absl::InvalidArgumentError("attribute '" + key + "' must be an integer");
}

absl::StatusOr<std::vector<int64_t>> Attrs::RequireInts(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) return absl::InvalidArgumentError("missing attribute '" + key + "'");
  if (const auto* v = std::get_if<std::vector<int64_t>>(&it->second)) return *v;
  return absl::InvalidArgumentError("attribute '" + key + "' must be a list of integers");
}

absl::StatusOr<Tensor> Attrs::RequireTensor(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) return absl::InvalidArgumentError("missing attribute '" + key + "'");
  if (const auto* v = std::get_if<Tensor>(&it->second)) return *v;
  return absl::InvalidArgumentError("attribute '" + key + "' must be a tensor");
}

void Attrs::ToProto(google::protobuf::Map<std::string, quilt::v1::AttrValue>* out) const {
  for (const auto& [key, value] : values_) {
    quilt::v1::AttrValue& a = (*out)[key];
    std::visit(
        [&a](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, int64_t>) {
            a.set_i(v);
          } else if constexpr (std::is_same_v<T, double>) {
            a.set_f(v);
          } else if constexpr (std::is_same_v<T, std::string>) {
            a.set_s(v);
          } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
            for (int64_t x : v) a.mutable_ints()->add_values(x);
            a.mutable_ints();  // present even when empty
          } else if constexpr (std::is_same_v<T, std::vector<double>>) {
            for (double x : v) a.mutable_floats()->add_values(x);
            a.mutable_floats();
          } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            for (const auto& x : v) a.mutable_strings()->add_values(x);
            a.mutable_strings();
          } else {
            *a.mutable_tensor() = v.ToProto();
          }
        },
        value);
  }
}

absl::StatusOr<Attrs> Attrs::FromProto(
    const google::protobuf::Map<std::string, quilt::v1::AttrValue>& in) {
  Attrs attrs;
  for (const auto& [key, a] : in) {
    switch (a.value_case()) {
      case quilt::v1::AttrValue::kI:
        attrs.Set(key, a.i());
        break;
      case quilt::v1::AttrValue::kF:
        attrs.Set(key, a.f());
        break;
      case quilt::v1::AttrValue::kS:
        attrs.Set(key, a.s());
        break;
      case quilt::v1::AttrValue::kInts:
        attrs.Set(key, std::vector<int64_t>(a.ints().values().begin(), a.ints().values().end()));
        break;
      case quilt::v1::AttrValue::kFloats:
        attrs.Set(key, std::vector<double>(a.floats().values().begin(), a.floats().values().end()));
        break;
      case quilt::v1::AttrValue::kStrings:
        attrs.Set(key, std::vector<std::string>(a.strings().values().begin(),
                                                a.strings().values().end()));
        break;
      case quilt::v1::AttrValue::kTensor: {
        ASSIGN_OR_RETURN(Tensor t, Tensor::FromProto(a.tensor()));
        attrs.Set(key, std::move(t));
        break;
      }
      default:
        return absl::InvalidArgumentError(absl::StrCat("attribute '", key, "' has no value"));
    }
  }
  return attrs;
}

}  // namespace quilt
