#include "src/runtime/kernels/kernel.h"

#include <cstdio>
#include <cstdlib>

#include "src/common/status.h"

namespace quilt {

absl::StatusOr<Tensor*> KernelContext::Output(int i) {
  Tensor& t = (*outputs_)[i];
  if (!t.valid()) {
    ASSIGN_OR_RETURN(t, Tensor::Empty(out_dtypes_[i], out_dims_[i]));
  }
  return &t;
}

absl::Status KernelContext::SetOutput(int i, Tensor t) {
  int64_t n = 1;
  for (int64_t d : out_dims_[i]) n *= d;
  if (t.numel() != n || t.dtype() != out_dtypes_[i]) return Error("view of the wrong size");
  (*outputs_)[i] = t.Reshaped(out_dims_[i]);
  return absl::OkStatus();
}

KernelRegistry& KernelRegistry::Global() {
  static KernelRegistry* r = new KernelRegistry();
  return *r;
}

void KernelRegistry::Register(const std::string& device, const std::string& op_type, KernelFn fn) {
  if (!kernels_.emplace(std::make_pair(device, op_type), fn).second) {
    std::fprintf(stderr, "kernel %s/%s registered twice\n", device.c_str(), op_type.c_str());
    std::abort();
  }
}

KernelFn KernelRegistry::Find(const std::string& device, const std::string& op_type) const {
  auto it = kernels_.find({device, op_type});
  return it == kernels_.end() ? nullptr : it->second;
}

std::vector<std::string> KernelRegistry::OpTypes(const std::string& device) const {
  std::vector<std::string> out;
  for (const auto& [key, fn] : kernels_) {
    if (key.first == device) out.push_back(key.second);
  }
  return out;
}

}  // namespace quilt
