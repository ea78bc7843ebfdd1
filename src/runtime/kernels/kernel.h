// The kernel interface: one function per (device kind, op type), found in
// the KernelRegistry. A kernel reads its inputs and attributes from a
// KernelContext and writes its outputs, which it either allocates through
// the context (with the concrete shapes shape inference gave) or sets to an
// existing tensor (views: Reshape shares its input's buffer).
//
// The context also says where the computation sits in the training step:
// the step number (1-based), the job seed, and the replica's slice of the
// global batch, so that batch-reducing kernels (losses) normalize by the
// global batch and random kernels (dropout) draw the same numbers however
// the batch is split.
#ifndef QUILT_SRC_RUNTIME_KERNELS_KERNEL_H_
#define QUILT_SRC_RUNTIME_KERNELS_KERNEL_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/graph/graph.h"
#include "src/graph/tensor.h"

namespace quilt {

class KernelContext {
 public:
  KernelContext(const Op& op, std::vector<const Tensor*> inputs,
                std::vector<const Shape*> input_shapes, std::vector<std::vector<int64_t>> out_dims,
                std::vector<DType> out_dtypes, std::vector<Tensor>* outputs)
      : op_(op),
        inputs_(std::move(inputs)),
        input_shapes_(std::move(input_shapes)),
        out_dims_(std::move(out_dims)),
        out_dtypes_(std::move(out_dtypes)),
        outputs_(outputs) {}

  const Op& op() const { return op_; }
  const Attrs& attrs() const { return op_.attrs; }
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  int num_outputs() const { return static_cast<int>(out_dims_.size()); }
  bool has_input(int i) const { return i < num_inputs() && inputs_[i] != nullptr; }
  const Tensor& in(int i) const { return *inputs_[i]; }
  // Symbolic shape of input i (where its batch dim is).
  const Shape& in_shape(int i) const { return *input_shapes_[i]; }
  const std::vector<int64_t>& out_dims(int i) const { return out_dims_[i]; }

  // Allocates output i (once) with its inferred dims and dtype.
  absl::StatusOr<Tensor*> Output(int i);
  // Makes output i share `t`'s buffer (t's numel must match).
  absl::Status SetOutput(int i, Tensor t);
  absl::Status Error(const std::string& message) const {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel of op '", op_.name, "' (", op_.type, "): ", message));
  }

  int64_t step = 1;
  uint64_t seed = 0;
  // This execution's batch B and where its slice starts in the global batch.
  int64_t local_batch = 1;
  int64_t batch_offset = 0;
  int64_t global_batch = 1;

 private:
  const Op& op_;
  std::vector<const Tensor*> inputs_;
  std::vector<const Shape*> input_shapes_;
  std::vector<std::vector<int64_t>> out_dims_;
  std::vector<DType> out_dtypes_;
  std::vector<Tensor>* outputs_;
};

using KernelFn = absl::Status (*)(KernelContext&);

class KernelRegistry {
 public:
  static KernelRegistry& Global();
  void Register(const std::string& device, const std::string& op_type, KernelFn fn);
  KernelFn Find(const std::string& device, const std::string& op_type) const;
  std::vector<std::string> OpTypes(const std::string& device) const;

 private:
  std::map<std::pair<std::string, std::string>, KernelFn> kernels_;
};

// The position of the i-th element of this execution's `t` (of `shape`,
// [B, ...]: labels, ids) in the step's: a replica holds rows from
// batch_offset on.
inline int64_t StepPosition(const KernelContext& ctx, const Tensor& t, const Shape& shape,
                            int64_t i) {
  if (shape.BatchAxis() != 0 || ctx.local_batch <= 0 || t.numel() % ctx.local_batch != 0) {
    return i;
  }
  return ctx.batch_offset * (t.numel() / ctx.local_batch) + i;
}

struct KernelRegistration {
  KernelRegistration(const char* device, const char* op_type, KernelFn fn) {
    KernelRegistry::Global().Register(device, op_type, fn);
  }
};

#define QUILT_KERNEL_CONCAT_INNER_(a, b) a##b
#define QUILT_KERNEL_CONCAT_(a, b) QUILT_KERNEL_CONCAT_INNER_(a, b)
#define QUILT_REGISTER_KERNEL(device, op_type, fn)                                               \
  static ::quilt::KernelRegistration QUILT_KERNEL_CONCAT_(quilt_kernel_registration_, __LINE__)( \
      device, op_type, fn)

}  // namespace quilt

#endif  // QUILT_SRC_RUNTIME_KERNELS_KERNEL_H_
