// CPU kernel of CumSum (float32 and int64).
#include "src/common/status.h"
#include "src/runtime/kernels/kernel.h"

namespace quilt::cpu {
namespace {

template <typename T>
void Scan(const T* x, T* y, const std::vector<int64_t>& dims, int64_t axis, bool exclusive,
          bool reverse) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= dims[d];
  for (size_t d = axis + 1; d < dims.size(); ++d) inner *= dims[d];
  const int64_t n = dims[axis];
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t base = o * n * inner + i;
      T sum = 0;
      for (int64_t k = 0; k < n; ++k) {
        const int64_t at = base + (reverse ? n - 1 - k : k) * inner;
        if (exclusive) {
          y[at] = sum;
          sum += x[at];
        } else {
          sum += x[at];
          y[at] = sum;
        }
      }
    }
  }
}

absl::Status CumSum(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  ASSIGN_OR_RETURN(Tensor * y, ctx.Output(0));
  int64_t axis = ctx.attrs().Int("axis", 0);
  if (axis < 0) axis += x.rank();
  const bool exclusive = ctx.attrs().Int("exclusive", 0) != 0;
  const bool reverse = ctx.attrs().Int("reverse", 0) != 0;
  if (x.dtype() == DType::kI64) {
    Scan(x.i64(), y->i64(), x.dims(), axis, exclusive, reverse);
  } else {
    Scan(x.f32(), y->f32(), x.dims(), axis, exclusive, reverse);
  }
  return absl::OkStatus();
}

QUILT_REGISTER_KERNEL("cpu", "CumSum", CumSum);

}  // namespace
}  // namespace quilt::cpu
