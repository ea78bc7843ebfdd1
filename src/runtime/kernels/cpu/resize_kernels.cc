// CPU kernels of bilinear resizing (ResizeBilinear) and its gradient.
#include <algorithm>
#include <cmath>
#include <vector>

#include "src/common/status.h"
#include "src/runtime/kernels/cpu/loops.h"
#include "src/runtime/kernels/kernel.h"

namespace quilt::cpu {
namespace {

// Per output coordinate along one axis: the two input indices and the
// weight of the second.
struct Tap {
  int64_t lo = 0, hi = 0;
  float w = 0;
};

std::vector<Tap> Taps(int64_t in, int64_t out, const std::string& coords) {
  std::vector<Tap> taps(out);
  const double scale = static_cast<double>(out) / static_cast<double>(in);
  for (int64_t o = 0; o < out; ++o) {
    double src;
    if (coords == "align_corners") {
      src = out > 1 ? static_cast<double>(o) * static_cast<double>(in - 1) /
                          static_cast<double>(out - 1)
                    : 0.0;
    } else if (coords == "asymmetric") {
      src = static_cast<double>(o) / scale;
    } else {
      src = std::max(0.0, (static_cast<double>(o) + 0.5) / scale - 0.5);
    }
    src = std::min(src, static_cast<double>(in - 1));
    Tap& t = taps[o];
    t.lo = static_cast<int64_t>(std::floor(src));
    t.hi = std::min(t.lo + 1, in - 1);
    t.w = static_cast<float>(src - static_cast<double>(t.lo));
  }
  return taps;
}

absl::Status ResizeBilinear(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  ASSIGN_OR_RETURN(Tensor * y, ctx.Output(0));
  const std::string coords = ctx.attrs().String("coords", "half_pixel");
  const int64_t planes = x.dim(0) * x.dim(1), h = x.dim(2), w = x.dim(3);
  const int64_t oh = y->dim(2), ow = y->dim(3);
  const std::vector<Tap> ty = Taps(h, oh, coords), tx = Taps(w, ow, coords);
  ParallelFor(planes, 1, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const float* src = x.f32() + p * h * w;
      float* dst = y->f32() + p * oh * ow;
      for (int64_t oy = 0; oy < oh; ++oy) {
        const float* r0 = src + ty[oy].lo * w;
        const float* r1 = src + ty[oy].hi * w;
        const float wy = ty[oy].w;
        for (int64_t ox = 0; ox < ow; ++ox) {
          const Tap& t = tx[ox];
          const float top = r0[t.lo] + (r0[t.hi] - r0[t.lo]) * t.w;
          const float bottom = r1[t.lo] + (r1[t.hi] - r1[t.lo]) * t.w;
          *dst++ = top + (bottom - top) * wy;
        }
      }
    }
  });
  return absl::OkStatus();
}

absl::Status ResizeBilinearGrad(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  ASSIGN_OR_RETURN(Tensor * dx, ctx.Output(0));
  const std::string coords = ctx.attrs().String("coords", "half_pixel");
  const int64_t planes = dx->dim(0) * dx->dim(1), h = dx->dim(2), w = dx->dim(3);
  const int64_t oh = dy.dim(2), ow = dy.dim(3);
  const std::vector<Tap> ty = Taps(h, oh, coords), tx = Taps(w, ow, coords);
  ParallelFor(planes, 1, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const float* src = dy.f32() + p * oh * ow;
      float* dst = dx->f32() + p * h * w;
      std::fill(dst, dst + h * w, 0.0f);
      for (int64_t oy = 0; oy < oh; ++oy) {
        float* r0 = dst + ty[oy].lo * w;
        float* r1 = dst + ty[oy].hi * w;
        const float wy = ty[oy].w;
        for (int64_t ox = 0; ox < ow; ++ox) {
          const Tap& t = tx[ox];
          const float g = *src++;
          const float top = g * (1 - wy), bottom = g * wy;
          r0[t.lo] += top * (1 - t.w);
          r0[t.hi] += top * t.w;
          r1[t.lo] += bottom * (1 - t.w);
          r1[t.hi] += bottom * t.w;
        }
      }
    }
  });
  return absl::OkStatus();
}

QUILT_REGISTER_KERNEL("cpu", "ResizeBilinear", ResizeBilinear);
QUILT_REGISTER_KERNEL("cpu", "ResizeBilinearGrad", ResizeBilinearGrad);

}  // namespace
}  // namespace quilt::cpu
