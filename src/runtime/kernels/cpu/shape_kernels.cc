// CPU kernels of layout ops: views (no copy), Transpose, Concat, Split,
// Slice (+grad) and Gather (+grad).
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/graph/ops/slice_spec.h"
#include "src/runtime/kernels/cpu/loops.h"
#include "src/runtime/kernels/kernel.h"

namespace quilt::cpu {
namespace {

absl::Status View(KernelContext& ctx) { return ctx.SetOutput(0, ctx.in(0)); }

std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& d) {
  std::vector<int64_t> s(d.size(), 1);
  for (int i = static_cast<int>(d.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * d[i + 1];
  return s;
}

absl::Status Transpose(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  ASSIGN_OR_RETURN(Tensor * out, ctx.Output(0));
  const int r = x.rank();
  std::vector<int64_t> perm = ctx.attrs().Ints("perm");
  if (perm.empty()) {
    for (int i = r - 1; i >= 0; --i) perm.push_back(i);
  }
  const std::vector<int64_t> in_strides = RowMajorStrides(x.dims());
  // Stride in the input of each output dim.
  std::vector<int64_t> src_stride(r);
  for (int i = 0; i < r; ++i) src_stride[i] = in_strides[perm[i]];
  const std::vector<int64_t>& od = out->dims();
  const int64_t esize = DTypeSize(x.dtype());
  if (r == 0) {
    std::memcpy(out->raw(), x.raw(), esize);
    return absl::OkStatus();
  }
  const int64_t inner = od[r - 1];
  const int64_t inner_stride = src_stride[r - 1];
  const int64_t rows = inner == 0 ? 0 : out->numel() / inner;
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(out->raw());
  ParallelFor(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(inner, 1)),
              [&](int64_t rb, int64_t re) {
                for (int64_t row = rb; row < re; ++row) {
                  int64_t off = 0, rem = row;
                  for (int d = r - 2; d >= 0; --d) {
                    off += (rem % od[d]) * src_stride[d];
                    rem /= od[d];
                  }
                  char* o = dst + row * inner * esize;
                  if (inner_stride == 1) {
                    std::memcpy(o, src + off * esize, inner * esize);
                  } else if (esize == 4) {
                    const float* s = reinterpret_cast<const float*>(src) + off;
                    float* q = reinterpret_cast<float*>(o);
                    for (int64_t i = 0; i < inner; ++i) q[i] = s[i * inner_stride];
                  } else {
                    for (int64_t i = 0; i < inner; ++i) {
                      std::memcpy(o + i * esize, src + (off + i * inner_stride) * esize, esize);
                    }
                  }
                }
              });
  return absl::OkStatus();
}

int NormAxis(int64_t axis, int rank) { return static_cast<int>(axis < 0 ? axis + rank : axis); }

absl::Status Concat(KernelContext& ctx) {
  ASSIGN_OR_RETURN(Tensor * out, ctx.Output(0));
  const int axis = NormAxis(ctx.attrs().Int("axis", 0), out->rank());
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < out->rank(); ++i) {
    if (i < axis) outer *= out->dim(i);
    if (i > axis) inner *= out->dim(i);
  }
  const int64_t esize = DTypeSize(out->dtype());
  const int64_t out_row = out->dim(axis) * inner * esize;
  int64_t at = 0;
  for (int k = 0; k < ctx.num_inputs(); ++k) {
    const Tensor& x = ctx.in(k);
    const int64_t chunk = x.dim(axis) * inner * esize;
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(static_cast<char*>(out->raw()) + o * out_row + at,
                  static_cast<const char*>(x.raw()) + o * chunk, chunk);
    }
    at += chunk;
  }
  return absl::OkStatus();
}

absl::Status Split(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const int axis = NormAxis(ctx.attrs().Int("axis", 0), x.rank());
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < x.rank(); ++i) {
    if (i < axis) outer *= x.dim(i);
    if (i > axis) inner *= x.dim(i);
  }
  const int64_t esize = DTypeSize(x.dtype());
  const int64_t in_row = x.dim(axis) * inner * esize;
  int64_t at = 0;
  for (int k = 0; k < ctx.num_outputs(); ++k) {
    ASSIGN_OR_RETURN(Tensor * out, ctx.Output(k));
    const int64_t chunk = out->dim(axis) * inner * esize;
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(static_cast<char*>(out->raw()) + o * chunk,
                  static_cast<const char*>(x.raw()) + o * in_row + at, chunk);
    }
    at += chunk;
  }
  return absl::OkStatus();
}

// Copies between a tensor of `full` dims and its slice (direction by `to_slice`).
template <typename T>
void SliceCopy(const ops::SliceSpec& s, const std::vector<int64_t>& full, T* full_data,
               T* slice_data, bool to_slice) {
  const int r = static_cast<int>(full.size());
  const std::vector<int64_t> fs = RowMajorStrides(full);
  const int64_t n = Numel(s.count);
  std::vector<int64_t> idx(r, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (int d = 0; d < r; ++d) off += (s.start[d] + idx[d] * s.step[d]) * fs[d];
    if (to_slice) {
      slice_data[i] = full_data[off];
    } else {
      full_data[off] += slice_data[i];
    }
    for (int d = r - 1; d >= 0; --d) {
      if (++idx[d] < s.count[d]) break;
      idx[d] = 0;
    }
  }
}

absl::Status Slice(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  if (x.dtype() != DType::kF32 && x.dtype() != DType::kI64) {
    return ctx.Error("only f32 and i64 slices");
  }
  ASSIGN_OR_RETURN(ops::SliceSpec s, ops::ResolveSlice(ctx.attrs(), Shape::Fixed(x.dims())));
  ASSIGN_OR_RETURN(Tensor * out, ctx.Output(0));
  if (x.dtype() == DType::kI64) {  // ids, positions
    SliceCopy(s, x.dims(), const_cast<int64_t*>(x.i64()), out->i64(), true);
  } else {
    SliceCopy(s, x.dims(), const_cast<float*>(x.f32()), out->f32(), true);
  }
  return absl::OkStatus();
}

absl::Status SliceGrad(KernelContext& ctx) {
  ASSIGN_OR_RETURN(Tensor * dx, ctx.Output(0));
  dx->SetZero();
  ASSIGN_OR_RETURN(ops::SliceSpec s, ops::ResolveSlice(ctx.attrs(), Shape::Fixed(dx->dims())));
  SliceCopy(s, dx->dims(), dx->f32(), const_cast<float*>(ctx.in(0).f32()), false);
  return absl::OkStatus();
}

// [outer, n, inner] view of `data` along `axis`.
void GatherView(const std::vector<int64_t>& data, int axis, int64_t* outer, int64_t* n,
                int64_t* inner) {
  *outer = *inner = 1;
  *n = data[axis];
  for (int i = 0; i < static_cast<int>(data.size()); ++i) {
    if (i < axis) *outer *= data[i];
    if (i > axis) *inner *= data[i];
  }
}

// Indices in [−n, n), or with `from_data` (the model's input looked up
// directly, an embedding) in [0, n): negative ids there are bad data (−1
// padding, −100 ignored labels) that would wrap.
absl::Status CheckIndices(KernelContext& ctx, const Tensor& idx, int64_t n,
                          bool from_data = false) {
  for (int64_t i = 0; i < idx.numel(); ++i) {
    const int64_t v = idx.i64()[i];
    if (from_data && (v < 0 || v >= n)) {
      return ctx.Error(
          absl::StrCat("id ", v, " at position ", StepPosition(ctx, idx, ctx.in_shape(1), i),
                       " of the step's input ids is ", v < 0 ? "negative" : "past the table's end",
                       ": an embedding lookup takes ids in [0, ", n, ")",
                       v < 0 ? " (nn.Embedding refuses negative ids too)" : ""));
    }
    if (v < -n || v >= n) {
      return ctx.Error(
          absl::StrCat("index ", v, " at position ", i, " is out of range [", -n, ", ", n, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status Gather(KernelContext& ctx) {
  const Tensor& data = ctx.in(0);
  const Tensor& idx = ctx.in(1);
  const int axis = NormAxis(ctx.attrs().Int("axis", 0), data.rank());
  int64_t outer, n, inner;
  GatherView(data.dims(), axis, &outer, &n, &inner);
  RETURN_IF_ERROR(CheckIndices(ctx, idx, n, ctx.attrs().Int("ids_from_data", 0) != 0));
  ASSIGN_OR_RETURN(Tensor * out, ctx.Output(0));
  const int64_t esize = DTypeSize(data.dtype());
  const int64_t k = idx.numel();
  const char* src = static_cast<const char*>(data.raw());
  char* dst = static_cast<char*>(out->raw());
  ParallelFor(outer * k, std::max<int64_t>(1, kGrain / std::max<int64_t>(inner, 1)),
              [&](int64_t b, int64_t e) {
                for (int64_t t = b; t < e; ++t) {
                  const int64_t o = t / k, j = t % k;
                  int64_t row = idx.i64()[j];
                  if (row < 0) row += n;
                  std::memcpy(dst + t * inner * esize, src + (o * n + row) * inner * esize,
                              inner * esize);
                }
              });
  return absl::OkStatus();
}

absl::Status GatherGrad(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& idx = ctx.in(1);
  ASSIGN_OR_RETURN(Tensor * dx, ctx.Output(0));
  dx->SetZero();
  const int axis = NormAxis(ctx.attrs().Int("axis", 0), dx->rank());
  int64_t outer, n, inner;
  GatherView(dx->dims(), axis, &outer, &n, &inner);
  RETURN_IF_ERROR(CheckIndices(ctx, idx, n));
  const int64_t k = idx.numel();
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < k; ++j) {
      int64_t row = idx.i64()[j];
      if (row < 0) row += n;
      const float* g = dy.f32() + (o * k + j) * inner;
      float* d = dx->f32() + (o * n + row) * inner;
      for (int64_t i = 0; i < inner; ++i) d[i] += g[i];
    }
  }
  return absl::OkStatus();
}

absl::Status Pad(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  ASSIGN_OR_RETURN(Tensor * out, ctx.Output(0));
  const float value = static_cast<float>(ctx.attrs().Float("value", 0.0));
  for (int64_t i = 0; i < out->numel(); ++i) out->f32()[i] = value;
  const std::vector<int64_t> pads = ctx.attrs().Ints("pads");
  ops::SliceSpec s;
  s.start.assign(pads.begin(), pads.begin() + x.rank());
  s.step.assign(x.rank(), 1);
  s.count = x.dims();
  // Writes x into the interior of out (SliceCopy accumulates into zeros
  // when copying from the slice; out holds `value`, so subtract it first).
  std::vector<float> shifted(x.f32(), x.f32() + x.numel());
  for (float& v : shifted) v -= value;
  SliceCopy(s, out->dims(), out->f32(), shifted.data(), false);
  return absl::OkStatus();
}

QUILT_REGISTER_KERNEL("cpu", "Pad", Pad);
QUILT_REGISTER_KERNEL("cpu", "Reshape", View);
QUILT_REGISTER_KERNEL("cpu", "Flatten", View);
QUILT_REGISTER_KERNEL("cpu", "Squeeze", View);
QUILT_REGISTER_KERNEL("cpu", "Unsqueeze", View);
QUILT_REGISTER_KERNEL("cpu", "Transpose", Transpose);
QUILT_REGISTER_KERNEL("cpu", "Concat", Concat);
QUILT_REGISTER_KERNEL("cpu", "Split", Split);
QUILT_REGISTER_KERNEL("cpu", "Slice", Slice);
QUILT_REGISTER_KERNEL("cpu", "SliceGrad", SliceGrad);
QUILT_REGISTER_KERNEL("cpu", "Gather", Gather);
QUILT_REGISTER_KERNEL("cpu", "GatherGrad", GatherGrad);

}  // namespace
}  // namespace quilt::cpu
