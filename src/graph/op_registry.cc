#include "src/graph/op_registry.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace quilt {

absl::Status InferContext::Error(const std::string& message) const {
  return absl::InvalidArgumentError(
      absl::StrCat("op '", op_.name, "' (", op_.type, "): ", message));
}

absl::Status GradContext::Error(const std::string& message) const {
  return absl::InvalidArgumentError(
      absl::StrCat("gradient of op '", op_.name, "' (", op_.type, "): ", message));
}

int64_t CostContext::InNumel(int i) const {
  int64_t n = 1;
  for (int64_t d : in_dims[i]) n *= d;
  return n;
}

int64_t CostContext::OutNumel(int i) const {
  int64_t n = 1;
  for (int64_t d : out_dims[i]) n *= d;
  return n;
}

double CostContext::IoBytes() const {
  double b = 0;
  for (size_t i = 0; i < in_dims.size(); ++i) {
    b += static_cast<double>(InNumel(static_cast<int>(i))) * DTypeSize(in_dtypes[i]);
  }
  for (size_t i = 0; i < out_dims.size(); ++i) {
    b += static_cast<double>(OutNumel(static_cast<int>(i))) * DTypeSize(out_dtypes[i]);
  }
  return b;
}

OpRegistry& OpRegistry::Global() {
  static OpRegistry* registry = new OpRegistry();
  return *registry;
}

void OpRegistry::Register(OpSchema schema) {
  if (schemas_.count(schema.type)) {
    std::fprintf(stderr, "op type %s registered twice\n", schema.type.c_str());
    std::abort();
  }
  schemas_[schema.type] = std::move(schema);
}

const OpSchema* OpRegistry::Find(const std::string& type) const {
  auto it = schemas_.find(type);
  return it == schemas_.end() ? nullptr : &it->second;
}

std::vector<std::string> OpRegistry::Types() const {
  std::vector<std::string> out;
  for (const auto& [type, schema] : schemas_) out.push_back(type);
  return out;
}

OpCost EstimateOpCost(const OpSchema& schema, const CostContext& ctx) {
  if (schema.cost) return schema.cost(ctx);
  OpCost c;
  for (size_t i = 0; i < ctx.out_dims.size(); ++i) {
    c.flops += static_cast<double>(ctx.OutNumel(static_cast<int>(i)));
  }
  c.bytes = ctx.IoBytes();
  return c;
}

OpCost EstimateOpCost(const Graph& g, const Op& op, const OpSchema& schema, int64_t batch) {
  CostContext c{op, {}, {}, {}, {}};
  for (const std::string& in : op.inputs) {
    const TensorInfo* t = in.empty() ? nullptr : g.FindTensor(in);
    c.in_dims.push_back(t ? t->shape.Concrete(batch) : std::vector<int64_t>{});
    c.in_dtypes.push_back(t ? t->dtype : DType::kF32);
  }
  for (const std::string& out : op.outputs) {
    const TensorInfo* t = g.FindTensor(out);
    c.out_dims.push_back(t ? t->shape.Concrete(batch) : std::vector<int64_t>{});
    c.out_dtypes.push_back(t ? t->dtype : DType::kF32);
  }
  return EstimateOpCost(schema, c);
}

bool IsLocalOutput(const Op& op, const OpSchema& schema, int k) {
  for (int l : schema.local_outputs) {
    if (l == k) return true;
  }
  for (int64_t l : op.attrs.Ints("local_outputs")) {
    if (l == k) return true;
  }
  return false;
}

}  // namespace quilt
