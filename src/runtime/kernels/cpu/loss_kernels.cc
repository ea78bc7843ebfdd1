// CPU kernels of the losses and their gradients, and OneHot. The mean divides by the
// global element count: local count × global batch / local batch.
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/runtime/kernels/cpu/loops.h"
#include "src/runtime/kernels/kernel.h"

namespace quilt::cpu {
namespace {

double GlobalScale(const KernelContext& ctx, bool batched) {
  if (!batched || ctx.local_batch <= 0) return 1.0;
  return static_cast<double>(ctx.global_batch) / static_cast<double>(ctx.local_batch);
}

struct SceView {
  int64_t outer, classes, inner;
};

SceView View(const KernelContext& ctx, const Tensor& scores) {
  int64_t axis = ctx.attrs().Int("class_axis", 1);
  if (axis < 0) axis += scores.rank();
  SceView v{1, scores.dim(static_cast<int>(axis)), 1};
  for (int i = 0; i < scores.rank(); ++i) {
    if (i < axis) v.outer *= scores.dim(i);
    if (i > axis) v.inner *= scores.dim(i);
  }
  return v;
}

// Validates labels and returns the divisor of the mean (or 1 for "sum").
absl::StatusOr<double> SceDivisor(KernelContext& ctx, int label_input, const SceView& v,
                                  bool batched) {
  const Tensor& labels = ctx.in(label_input);
  const bool has_ignore = ctx.attrs().Has("ignore_index");
  const int64_t ignore = ctx.attrs().Int("ignore_index", -1);
  int64_t count = 0;
  for (int64_t i = 0; i < labels.numel(); ++i) {
    const int64_t l = labels.i64()[i];
    if (has_ignore && l == ignore) continue;
    if (l < 0 || l >= v.classes) {
      return ctx.Error(absl::StrCat("label ", l, " at position ",
                                    StepPosition(ctx, labels, ctx.in_shape(label_input), i),
                                    " is not a class in [0, ", v.classes, ")"));
    }
    ++count;
  }
  if (ctx.attrs().String("reduction", "mean") == "sum") return 1.0;
  return std::max<double>(1.0, static_cast<double>(count) * GlobalScale(ctx, batched));
}

absl::Status Sce(KernelContext& ctx) {
  const Tensor& scores = ctx.in(0);
  const Tensor& labels = ctx.in(1);
  const SceView v = View(ctx, scores);
  ASSIGN_OR_RETURN(double divisor, SceDivisor(ctx, 1, v, ctx.in_shape(0).HasBatch()));
  const bool has_ignore = ctx.attrs().Has("ignore_index");
  const int64_t ignore = ctx.attrs().Int("ignore_index", -1);
  ASSIGN_OR_RETURN(Tensor * loss, ctx.Output(0));
  Tensor* logp = nullptr;
  if (ctx.num_outputs() > 1) {
    ASSIGN_OR_RETURN(logp, ctx.Output(1));
  }
  double total = 0;
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      const float* s = scores.f32() + o * v.classes * v.inner + i;
      float mx = -INFINITY;
      for (int64_t c = 0; c < v.classes; ++c) mx = std::max(mx, s[c * v.inner]);
      double sum = 0;
      for (int64_t c = 0; c < v.classes; ++c) sum += std::exp(s[c * v.inner] - mx);
      const double lse = mx + std::log(sum);
      if (logp) {
        float* q = logp->f32() + o * v.classes * v.inner + i;
        for (int64_t c = 0; c < v.classes; ++c)
          q[c * v.inner] = static_cast<float>(s[c * v.inner] - lse);
      }
      const int64_t l = labels.i64()[o * v.inner + i];
      if (has_ignore && l == ignore) continue;
      total += lse - s[l * v.inner];
    }
  }
  loss->f32()[0] = static_cast<float>(total / divisor);
  return absl::OkStatus();
}

absl::Status SceGrad(KernelContext& ctx) {
  const float dloss = ctx.in(0).f32()[0];
  const Tensor& scores = ctx.in(1);
  const Tensor& labels = ctx.in(2);
  const SceView v = View(ctx, scores);
  ASSIGN_OR_RETURN(double divisor, SceDivisor(ctx, 2, v, ctx.in_shape(1).HasBatch()));
  const bool has_ignore = ctx.attrs().Has("ignore_index");
  const int64_t ignore = ctx.attrs().Int("ignore_index", -1);
  ASSIGN_OR_RETURN(Tensor * ds, ctx.Output(0));
  const float k = static_cast<float>(dloss / divisor);
  ParallelFor(v.outer * v.inner, 64, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / v.inner, i = t % v.inner;
      const float* s = scores.f32() + o * v.classes * v.inner + i;
      float* d = ds->f32() + o * v.classes * v.inner + i;
      const int64_t l = labels.i64()[t];
      if (has_ignore && l == ignore) {
        for (int64_t c = 0; c < v.classes; ++c) d[c * v.inner] = 0;
        continue;
      }
      float mx = -INFINITY;
      for (int64_t c = 0; c < v.classes; ++c) mx = std::max(mx, s[c * v.inner]);
      double sum = 0;
      for (int64_t c = 0; c < v.classes; ++c) sum += std::exp(s[c * v.inner] - mx);
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t c = 0; c < v.classes; ++c) {
        const float p = std::exp(s[c * v.inner] - mx) * inv;
        d[c * v.inner] = k * (p - (c == l ? 1.0f : 0.0f));
      }
    }
  });
  return absl::OkStatus();
}

absl::Status Mse(KernelContext& ctx) {
  const Tensor& p = ctx.in(0);
  const Tensor& t = ctx.in(1);
  double s = 0;
  for (int64_t i = 0; i < p.numel(); ++i) {
    const double d = static_cast<double>(p.f32()[i]) - t.f32()[i];
    s += d * d;
  }
  ASSIGN_OR_RETURN(Tensor * loss, ctx.Output(0));
  const double n = static_cast<double>(p.numel()) * GlobalScale(ctx, ctx.in_shape(0).HasBatch());
  loss->f32()[0] = static_cast<float>(s / std::max(n, 1.0));
  return absl::OkStatus();
}

absl::Status MseGrad(KernelContext& ctx) {
  const float dloss = ctx.in(0).f32()[0];
  const Tensor& p = ctx.in(1);
  const Tensor& t = ctx.in(2);
  ASSIGN_OR_RETURN(Tensor * dp, ctx.Output(0));
  const double n = static_cast<double>(p.numel()) * GlobalScale(ctx, ctx.in_shape(1).HasBatch());
  const float k = static_cast<float>(2.0 * dloss / std::max(n, 1.0));
  MapBinary(p.f32(), t.f32(), dp->f32(), p.numel(), [k](float a, float b) { return k * (a - b); });
  return absl::OkStatus();
}

absl::Status OneHot(KernelContext& ctx) {
  const Tensor& labels = ctx.in(0);
  const int64_t classes = ctx.attrs().Int("classes", 0);
  int64_t axis = ctx.attrs().Int("axis", -1);
  if (axis < 0) axis += labels.rank() + 1;
  const bool has_ignore = ctx.attrs().Has("ignore_index");
  const int64_t ignore = ctx.attrs().Int("ignore_index", -1);
  const bool wrap = ctx.attrs().Int("wrap_negative", 0) != 0;
  // Labels as [outer, inner] around the inserted class dim.
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < labels.rank(); ++i) (i < axis ? outer : inner) *= labels.dim(i);
  ASSIGN_OR_RETURN(Tensor * out, ctx.Output(0));
  std::fill(out->f32(), out->f32() + out->numel(), 0.0f);
  for (int64_t t = 0; t < labels.numel(); ++t) {
    int64_t l = labels.i64()[t];
    if (has_ignore && l == ignore) continue;
    if (wrap && l < 0 && l >= -classes) l += classes;
    if (l < 0 || l >= classes) {
      return ctx.Error(absl::StrCat("label ", labels.i64()[t], " at position ",
                                    StepPosition(ctx, labels, ctx.in_shape(0), t),
                                    " is not a class in [0, ", classes, ")"));
    }
    const int64_t o = t / inner, i = t % inner;
    out->f32()[(o * classes + l) * inner + i] = 1.0f;
  }
  return absl::OkStatus();
}

QUILT_REGISTER_KERNEL("cpu", "SoftmaxCrossEntropyLoss", Sce);
QUILT_REGISTER_KERNEL("cpu", "OneHot", OneHot);
QUILT_REGISTER_KERNEL("cpu", "SoftmaxCrossEntropyLossGrad", SceGrad);
QUILT_REGISTER_KERNEL("cpu", "MseLoss", Mse);
QUILT_REGISTER_KERNEL("cpu", "MseLossGrad", MseGrad);

}  // namespace
}  // namespace quilt::cpu
