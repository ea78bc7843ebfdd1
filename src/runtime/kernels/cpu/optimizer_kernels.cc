// CPU kernels of the optimizer updates, following PyTorch's single-tensor
// SGD and Adam (bias corrections in double, element math in float).
#include <cmath>

#include "src/common/status.h"
#include "src/runtime/kernels/cpu/loops.h"
#include "src/runtime/kernels/kernel.h"

namespace quilt::cpu {
namespace {

absl::Status SgdUpdate(KernelContext& ctx) {
  const float lr = static_cast<float>(ctx.attrs().Float("lr", 0.01));
  const float mom = static_cast<float>(ctx.attrs().Float("momentum", 0));
  const float wd = static_cast<float>(ctx.attrs().Float("weight_decay", 0));
  const bool nesterov = ctx.attrs().Int("nesterov", 0) != 0;
  const float* p = ctx.in(0).f32();
  const float* g = ctx.in(1).f32();
  const bool has_v = ctx.num_inputs() > 2;
  const float* v = has_v ? ctx.in(2).f32() : nullptr;
  ASSIGN_OR_RETURN(Tensor * po, ctx.Output(0));
  float* vo = nullptr;
  if (has_v) {
    ASSIGN_OR_RETURN(Tensor * t, ctx.Output(1));
    vo = t->f32();
  }
  const int64_t n = ctx.in(0).numel();
  ParallelFor(n, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float d = g[i];
      if (wd != 0) d += wd * p[i];
      if (has_v) {
        const float buf = mom * v[i] + d;
        vo[i] = buf;
        d = nesterov ? d + mom * buf : buf;
      }
      po->f32()[i] = p[i] - lr * d;
    }
  });
  return absl::OkStatus();
}

absl::Status AdamUpdate(KernelContext& ctx) {
  const double lr = ctx.attrs().Float("lr", 1e-3);
  const double b1 = ctx.attrs().Float("beta1", 0.9), b2 = ctx.attrs().Float("beta2", 0.999);
  const float eps = static_cast<float>(ctx.attrs().Float("epsilon", 1e-8));
  const float wd = static_cast<float>(ctx.attrs().Float("weight_decay", 0));
  const double t = static_cast<double>(ctx.step);
  const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
  const float step_size = static_cast<float>(lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float fb1 = static_cast<float>(b1), fb2 = static_cast<float>(b2);
  const float* p = ctx.in(0).f32();
  const float* g = ctx.in(1).f32();
  const float* m = ctx.in(2).f32();
  const float* v = ctx.in(3).f32();
  Tensor *po, *mo, *vo;
  ASSIGN_OR_RETURN(po, ctx.Output(0));
  ASSIGN_OR_RETURN(mo, ctx.Output(1));
  ASSIGN_OR_RETURN(vo, ctx.Output(2));
  const int64_t n = ctx.in(0).numel();
  ParallelFor(n, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float d = g[i];
      if (wd != 0) d += wd * p[i];
      const float mi = fb1 * m[i] + (1 - fb1) * d;
      const float vi = fb2 * v[i] + (1 - fb2) * d * d;
      mo->f32()[i] = mi;
      vo->f32()[i] = vi;
      const float denom = std::sqrt(vi) / bc2_sqrt + eps;
      po->f32()[i] = p[i] - step_size * mi / denom;
    }
  });
  return absl::OkStatus();
}

QUILT_REGISTER_KERNEL("cpu", "SgdUpdate", SgdUpdate);
QUILT_REGISTER_KERNEL("cpu", "AdamUpdate", AdamUpdate);

}  // namespace
}  // namespace quilt::cpu
