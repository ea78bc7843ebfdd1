// Op attributes: a small typed map (ints, floats, strings, lists, tensors)
// with getters that either return a default or fail with an error naming
// the attribute.
#ifndef QUILT_SRC_GRAPH_ATTRS_H_
#define QUILT_SRC_GRAPH_ATTRS_H_

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/quilt/v1/graph.pb.h"
#include "src/graph/tensor.h"

namespace quilt {

using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>,
                               std::vector<double>, std::vector<std::string>, Tensor>;

class Attrs {
 public:
  bool Has(const std::string& key) const { return values_.count(key) > 0; }
  void Set(const std::string& key, AttrValue v) { values_[key] = std::move(v); }
  void SetInt(const std::string& key, int64_t v) { values_[key] = v; }
  void SetFloat(const std::string& key, double v) { values_[key] = v; }
  void SetString(const std::string& key, std::string v) { values_[key] = std::move(v); }
  void SetInts(const std::string& key, std::vector<int64_t> v) { values_[key] = std::move(v); }
  void Erase(const std::string& key) { values_.erase(key); }

  // With defaults (the default is also returned for a value of another type;
  // Validate-time checks use the Status getters below).
  int64_t Int(const std::string& key, int64_t def = 0) const;
  double Float(const std::string& key, double def = 0) const;
  std::string String(const std::string& key, const std::string& def = "") const;
  std::vector<int64_t> Ints(const std::string& key, std::vector<int64_t> def = {}) const;
  std::vector<double> Floats(const std::string& key, std::vector<double> def = {}) const;

  // Errors: INVALID_ARGUMENT naming the key when missing or of another type.
  absl::StatusOr<int64_t> RequireInt(const std::string& key) const;
  absl::StatusOr<std::vector<int64_t>> RequireInts(const std::string& key) const;
  absl::StatusOr<Tensor> RequireTensor(const std::string& key) const;

  const std::map<std::string, AttrValue>& values() const { return values_; }

  void ToProto(google::protobuf::Map<std::string, quilt::v1::AttrValue>* out) const;
  static absl::StatusOr<Attrs> FromProto(
      const google::protobuf::Map<std::string, quilt::v1::AttrValue>& in);

 private:
  std::map<std::string, AttrValue> values_;
};

}  // namespace quilt

#endif  // QUILT_SRC_GRAPH_ATTRS_H_
