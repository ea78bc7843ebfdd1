// CPU kernels of reductions, their gradient, and dropout. Reductions over
// the batch dimension divide by the *global* count (see KernelContext), so
// replicas' partial results sum to the full-batch result.
#include <cstring>
#include <limits>
#include <vector>

#include "src/common/status.h"
#include "src/graph/graph_builder.h"
#include "src/runtime/counter_random.h"
#include "src/runtime/kernels/cpu/loops.h"
#include "src/runtime/kernels/kernel.h"

namespace quilt::cpu {
namespace {

std::vector<bool> Reduced(const Attrs& attrs, int rank) {
  std::vector<bool> r(rank, false);
  const std::vector<int64_t> axes = attrs.Ints("axes");
  if (axes.empty()) {
    if (attrs.Int("noop_with_empty_axes", 0) == 0) r.assign(rank, true);
    return r;
  }
  for (int64_t a : axes) r[a < 0 ? a + rank : a] = true;
  return r;
}

// Element count of the reduced axes, the batch axis counted globally.
double ReducedCount(const KernelContext& ctx, const std::vector<int64_t>& dims,
                    const std::vector<bool>& reduced, const Shape& shape) {
  double count = 1;
  const int batch_axis = shape.BatchAxis();
  for (size_t i = 0; i < dims.size(); ++i) {
    if (!reduced[i]) continue;
    count *= static_cast<double>(dims[i]);
    if (static_cast<int>(i) == batch_axis && ctx.local_batch > 0) {
      count = count * static_cast<double>(ctx.global_batch) / static_cast<double>(ctx.local_batch);
    }
  }
  return count;
}

template <bool kMean>
absl::Status Reduce(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const std::vector<bool> reduced = Reduced(ctx.attrs(), x.rank());
  ASSIGN_OR_RETURN(Tensor * out, ctx.Output(0));
  std::vector<int64_t> keep_dims = x.dims();
  for (int i = 0; i < x.rank(); ++i) {
    if (reduced[i]) keep_dims[i] = 1;
  }
  const std::vector<int64_t> so = BroadcastStrides(keep_dims, x.dims());
  std::vector<double> acc(out->numel(), 0.0);
  const int r = x.rank();
  const int64_t inner = r == 0 ? 1 : x.dim(r - 1);
  const int64_t rows = inner == 0 ? 0 : x.numel() / inner;
  const int64_t si = r == 0 ? 0 : so[r - 1];
  for (int64_t row = 0; row < rows; ++row) {
    int64_t off = 0, rem = row;
    for (int d = r - 2; d >= 0; --d) {
      off += (rem % x.dim(d)) * so[d];
      rem /= x.dim(d);
    }
    const float* px = x.f32() + row * inner;
    double* pa = acc.data() + off;
    if (si) {
      for (int64_t i = 0; i < inner; ++i) pa[i] += px[i];
    } else {
      double s = 0;
      for (int64_t i = 0; i < inner; ++i) s += px[i];
      pa[0] += s;
    }
  }
  const double scale = kMean ? 1.0 / ReducedCount(ctx, x.dims(), reduced, ctx.in_shape(0)) : 1.0;
  for (int64_t i = 0; i < out->numel(); ++i) out->f32()[i] = static_cast<float>(acc[i] * scale);
  return absl::OkStatus();
}

// Calls f(i, o) for each element i of a tensor of `dims` (row-major) with o
// the flat index of its output element under `reduced` (keepdims or not:
// the same flat layout).
template <typename F>
void ForEachReducedElement(const std::vector<int64_t>& dims, const std::vector<bool>& reduced,
                           F f) {
  std::vector<int64_t> keep_dims = dims;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (reduced[i]) keep_dims[i] = 1;
  }
  const std::vector<int64_t> so = BroadcastStrides(keep_dims, dims);
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<int64_t> idx(dims.size(), 0);
  int64_t o = 0;
  for (int64_t i = 0; i < n; ++i) {
    f(i, o);
    for (int k = static_cast<int>(dims.size()) - 1; k >= 0; --k) {
      o += so[k];
      if (++idx[k] < dims[k]) break;
      o -= so[k] * idx[k];
      idx[k] = 0;
    }
  }
}

absl::Status ReduceMax(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  ASSIGN_OR_RETURN(Tensor * out, ctx.Output(0));
  float* m = out->f32();
  for (int64_t i = 0; i < out->numel(); ++i) m[i] = -std::numeric_limits<float>::infinity();
  ForEachReducedElement(x.dims(), Reduced(ctx.attrs(), x.rank()), [&](int64_t i, int64_t o) {
    const float v = x.f32()[i];
    if (v > m[o] || v != v)
      m[o] = v != v || m[o] != m[o] ? std::numeric_limits<float>::quiet_NaN() : v;
  });
  return absl::OkStatus();
}

absl::Status ReduceMaxGrad(KernelContext& ctx) {
  const Tensor &dy = ctx.in(0), &x = ctx.in(1), &y = ctx.in(2);
  ASSIGN_OR_RETURN(Tensor * dx, ctx.Output(0));
  const std::vector<bool> reduced = Reduced(ctx.attrs(), x.rank());
  std::vector<int> ties(static_cast<size_t>(y.numel()), 0);
  ForEachReducedElement(x.dims(), reduced, [&](int64_t i, int64_t o) {
    ties[static_cast<size_t>(o)] += x.f32()[i] == y.f32()[o] ? 1 : 0;
  });
  ForEachReducedElement(x.dims(), reduced, [&](int64_t i, int64_t o) {
    dx->f32()[i] = x.f32()[i] == y.f32()[o] ? dy.f32()[o] / static_cast<float>(ties[o]) : 0.0f;
  });
  return absl::OkStatus();
}

absl::Status ReduceGrad(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  ASSIGN_OR_RETURN(Tensor * dx, ctx.Output(0));
  // The axes as shape inference read them (negative ones from the end;
  // their range checked there).
  const std::vector<bool> reduced = Reduced(ctx.attrs(), dx->rank());
  std::vector<int64_t> keep_dims = dx->dims();
  for (int i = 0; i < dx->rank(); ++i) {
    if (reduced[i]) keep_dims[i] = 1;
  }
  float scale = 1.0f;
  if (ctx.attrs().Int("mean", 0) != 0) {
    ASSIGN_OR_RETURN(Shape shape, DecodeShape(ctx.attrs(), "input_shape"));
    scale = static_cast<float>(1.0 / ReducedCount(ctx, dx->dims(), reduced, shape));
  }
  std::vector<float> one(1, scale);
  BroadcastBinary(dy.f32(), keep_dims, one.data(), {}, dx->f32(), dx->dims(),
                  [](float g, float s) { return g * s; });
  return absl::OkStatus();
}

uint64_t HashName(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

absl::Status Dropout(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const float p = static_cast<float>(ctx.attrs().Float("ratio", 0.5));
  const float keep_scale = 1.0f / (1.0f - p);
  ASSIGN_OR_RETURN(Tensor * y, ctx.Output(0));
  Tensor* mask = nullptr;
  if (ctx.num_outputs() > 1) {
    ASSIGN_OR_RETURN(mask, ctx.Output(1));
  }
  const uint64_t key = Mix(ctx.seed ^ Mix(HashName(ctx.op().name) ^ Mix(ctx.step)));
  // Global element index: the batch coordinate offset by this replica's
  // position in the global batch.
  const Shape& shape = ctx.in_shape(0);
  const int axis = shape.BatchAxis();
  int64_t outer = 1, len = 1, inner = 1, mult = 1;
  if (axis >= 0) {
    mult = shape.dim(axis).value;
    len = x.dim(axis);
    for (int i = 0; i < x.rank(); ++i) {
      if (i < axis) outer *= x.dim(i);
      if (i > axis) inner *= x.dim(i);
    }
  }
  const int64_t global_len = ctx.global_batch * mult, offset = ctx.batch_offset * mult;
  ParallelFor(x.numel(), kGrain, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t g = t;
      if (axis >= 0) {
        const int64_t o = t / (len * inner), j = (t / inner) % len, i = t % inner;
        g = (o * global_len + offset + j) * inner + i;
      }
      const float u = CounterUniformMixed(key, static_cast<uint64_t>(g));
      const float m = u >= p ? keep_scale : 0.0f;
      y->f32()[t] = x.f32()[t] * m;
      if (mask) mask->f32()[t] = m;
    }
  });
  return absl::OkStatus();
}

QUILT_REGISTER_KERNEL("cpu", "ReduceSum", Reduce<false>);
QUILT_REGISTER_KERNEL("cpu", "ReduceMean", Reduce<true>);
QUILT_REGISTER_KERNEL("cpu", "ReduceGrad", ReduceGrad);
QUILT_REGISTER_KERNEL("cpu", "ReduceMax", ReduceMax);
QUILT_REGISTER_KERNEL("cpu", "ReduceMaxGrad", ReduceMaxGrad);
QUILT_REGISTER_KERNEL("cpu", "Dropout", Dropout);

}  // namespace
}  // namespace quilt::cpu
