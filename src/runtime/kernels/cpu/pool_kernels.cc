// CPU kernels of 2-D pooling ops and their gradients.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "src/common/status.h"
#include "src/graph/ops/conv_attrs.h"
#include "src/runtime/kernels/cpu/loops.h"
#include "src/runtime/kernels/kernel.h"

namespace quilt::cpu {
namespace {

using ops::Window2D;

// Calls f(plane index, oy, ox, window bounds) for every output position.
template <typename F>
void ForEachWindow(int64_t planes, int64_t h, int64_t w, const Window2D& k, F f) {
  const int64_t ho = k.OutH(h), wo = k.OutW(w);
  ParallelFor(planes, 1, [&](int64_t pb, int64_t pe) {
    for (int64_t p = pb; p < pe; ++p) {
      for (int64_t oy = 0; oy < ho; ++oy) {
        for (int64_t ox = 0; ox < wo; ++ox) {
          const int64_t y0 = oy * k.sh - k.pt, x0 = ox * k.sw - k.pl;
          f(p, oy * wo + ox, y0, x0);
        }
      }
    }
  });
}

// 2×2 windows with stride 2 and no padding (the common case), each inside
// the h × w input (with ceil_mode an odd size adds a window that hangs
// over the edge: the general path bounds it).
bool Is2x2(const Window2D& k, int64_t h, int64_t w, int64_t ho, int64_t wo) {
  return k.kh == 2 && k.kw == 2 && k.sh == 2 && k.sw == 2 && k.pt == 0 && k.pl == 0 && k.pb == 0 &&
         k.pr == 0 && k.dh == 1 && k.dw == 1 && 2 * ho <= h && 2 * wo <= w;
}

absl::Status MaxPool(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  ASSIGN_OR_RETURN(Window2D k, ops::ParseWindow(ctx.attrs()));
  ASSIGN_OR_RETURN(Tensor * out, ctx.Output(0));
  const int64_t h = x.dim(2), w = x.dim(3), plane_out = out->dim(2) * out->dim(3);
  if (Is2x2(k, h, w, out->dim(2), out->dim(3))) {
    const int64_t ho = out->dim(2), wo = out->dim(3);
    ParallelFor(x.dim(0) * x.dim(1), 4, [&](int64_t pb, int64_t pe) {
      for (int64_t p = pb; p < pe; ++p) {
        const float* src = x.f32() + p * h * w;
        float* dst = out->f32() + p * plane_out;
        for (int64_t oy = 0; oy < ho; ++oy) {
          const float* r0 = src + 2 * oy * w;
          const float* r1 = r0 + w;
          for (int64_t ox = 0; ox < wo; ++ox) {
            // PyTorch's order: first maximum wins, NaN propagates.
            float best = r0[2 * ox];
            for (float v : {r0[2 * ox + 1], r1[2 * ox], r1[2 * ox + 1]}) {
              best = ((v > best) | (v != v)) ? v : best;
            }
            dst[oy * wo + ox] = best;
          }
        }
      }
    });
    return absl::OkStatus();
  }
  ForEachWindow(x.dim(0) * x.dim(1), h, w, k, [&](int64_t p, int64_t o, int64_t y0, int64_t x0) {
    const float* src = x.f32() + p * h * w;
    float best = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < k.kh; ++i) {
      const int64_t iy = y0 + i * k.dh;
      if (iy < 0 || iy >= h) continue;
      for (int64_t j = 0; j < k.kw; ++j) {
        const int64_t ix = x0 + j * k.dw;
        if (ix < 0 || ix >= w) continue;
        const float v = src[iy * w + ix];
        if (v > best || std::isnan(v)) best = v;
      }
    }
    out->f32()[p * plane_out + o] = best;
  });
  return absl::OkStatus();
}

absl::Status MaxPoolGrad(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& x = ctx.in(1);
  ASSIGN_OR_RETURN(Window2D k, ops::ParseWindow(ctx.attrs()));
  ASSIGN_OR_RETURN(Tensor * dx, ctx.Output(0));
  const int64_t h = x.dim(2), w = x.dim(3), plane_out = dy.dim(2) * dy.dim(3);
  const bool fast = Is2x2(k, h, w, dy.dim(2), dy.dim(3));
  if (!(fast && h == 2 * dy.dim(2) && w == 2 * dy.dim(3))) dx->SetZero();
  if (fast && h == 2 * dy.dim(2) && w == 2 * dy.dim(3)) {
    // Windows tile the input exactly: write every element once.
    const int64_t ho = dy.dim(2), wo = dy.dim(3);
    ParallelFor(x.dim(0) * x.dim(1), 4, [&](int64_t pb, int64_t pe) {
      for (int64_t p = pb; p < pe; ++p) {
        const float* src = x.f32() + p * h * w;
        float* dst = dx->f32() + p * h * w;
        const float* g = dy.f32() + p * plane_out;
        for (int64_t oy = 0; oy < ho; ++oy) {
          for (int64_t ox = 0; ox < wo; ++ox) {
            // Branch-free argmax (first maximum wins, a NaN takes over).
            const int64_t base = 2 * oy * w + 2 * ox;
            const float v0 = src[base], v1 = src[base + 1], v2 = src[base + w],
                        v3 = src[base + w + 1];
            float best = v0;
            int at = 0;
            const bool t1 = (v1 > best) | (v1 != v1);
            at = t1 ? 1 : at;
            best = t1 ? v1 : best;
            const bool t2 = (v2 > best) | (v2 != v2);
            at = t2 ? 2 : at;
            best = t2 ? v2 : best;
            const bool t3 = (v3 > best) | (v3 != v3);
            at = t3 ? 3 : at;
            const float gv = g[oy * wo + ox];
            dst[base] = at == 0 ? gv : 0.0f;
            dst[base + 1] = at == 1 ? gv : 0.0f;
            dst[base + w] = at == 2 ? gv : 0.0f;
            dst[base + w + 1] = at == 3 ? gv : 0.0f;
          }
        }
      }
    });
    return absl::OkStatus();
  }
  if (fast) {
    const int64_t ho = dy.dim(2), wo = dy.dim(3);
    ParallelFor(x.dim(0) * x.dim(1), 4, [&](int64_t pb, int64_t pe) {
      for (int64_t p = pb; p < pe; ++p) {
        const float* src = x.f32() + p * h * w;
        float* dst = dx->f32() + p * h * w;
        const float* g = dy.f32() + p * plane_out;
        for (int64_t oy = 0; oy < ho; ++oy) {
          for (int64_t ox = 0; ox < wo; ++ox) {
            const int64_t base = 2 * oy * w + 2 * ox;
            int64_t at = base;
            float best = src[base];
            for (int64_t off : {base + 1, base + w, base + w + 1}) {
              if (src[off] > best || std::isnan(src[off])) {
                best = src[off];
                at = off;
              }
            }
            dst[at] += g[oy * wo + ox];
          }
        }
      }
    });
    return absl::OkStatus();
  }
  // Planes are independent, so ParallelFor over planes never races.
  ForEachWindow(x.dim(0) * x.dim(1), h, w, k, [&](int64_t p, int64_t o, int64_t y0, int64_t x0) {
    const float* src = x.f32() + p * h * w;
    float best = -std::numeric_limits<float>::infinity();
    int64_t at = -1;
    for (int64_t i = 0; i < k.kh; ++i) {
      const int64_t iy = y0 + i * k.dh;
      if (iy < 0 || iy >= h) continue;
      for (int64_t j = 0; j < k.kw; ++j) {
        const int64_t ix = x0 + j * k.dw;
        if (ix < 0 || ix >= w) continue;
        const float v = src[iy * w + ix];
        if (v > best || std::isnan(v) || at < 0) {
          best = v;
          at = iy * w + ix;
        }
      }
    }
    if (at >= 0) dx->f32()[p * h * w + at] += dy.f32()[p * plane_out + o];
  });
  return absl::OkStatus();
}

// Number of elements averaged by the window at (y0, x0).
int64_t AvgCount(const Window2D& k, int64_t h, int64_t w, int64_t y0, int64_t x0) {
  if (k.count_include_pad) {
    // Padded positions count, but not the ceil-mode overhang past the padding.
    const int64_t y1 = std::min(y0 + k.kh, h + k.pb), x1 = std::min(x0 + k.kw, w + k.pr);
    return (y1 - y0) * (x1 - x0);
  }
  const int64_t ys = std::max<int64_t>(y0, 0), xs = std::max<int64_t>(x0, 0);
  const int64_t ye = std::min(y0 + k.kh, h), xe = std::min(x0 + k.kw, w);
  return std::max<int64_t>(0, ye - ys) * std::max<int64_t>(0, xe - xs);
}

absl::Status AveragePool(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  ASSIGN_OR_RETURN(Window2D k, ops::ParseWindow(ctx.attrs()));
  ASSIGN_OR_RETURN(Tensor * out, ctx.Output(0));
  const int64_t h = x.dim(2), w = x.dim(3), plane_out = out->dim(2) * out->dim(3);
  ForEachWindow(x.dim(0) * x.dim(1), h, w, k, [&](int64_t p, int64_t o, int64_t y0, int64_t x0) {
    const float* src = x.f32() + p * h * w;
    float s = 0;
    for (int64_t iy = std::max<int64_t>(y0, 0); iy < std::min(y0 + k.kh, h); ++iy) {
      for (int64_t ix = std::max<int64_t>(x0, 0); ix < std::min(x0 + k.kw, w); ++ix) {
        s += src[iy * w + ix];
      }
    }
    const int64_t n = AvgCount(k, h, w, y0, x0);
    out->f32()[p * plane_out + o] = n > 0 ? s / static_cast<float>(n) : 0.0f;
  });
  return absl::OkStatus();
}

absl::Status AveragePoolGrad(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  ASSIGN_OR_RETURN(Window2D k, ops::ParseWindow(ctx.attrs()));
  ASSIGN_OR_RETURN(Tensor * dx, ctx.Output(0));
  dx->SetZero();
  const int64_t h = dx->dim(2), w = dx->dim(3), plane_out = dy.dim(2) * dy.dim(3);
  ForEachWindow(dx->dim(0) * dx->dim(1), h, w, k,
                [&](int64_t p, int64_t o, int64_t y0, int64_t x0) {
                  const int64_t n = AvgCount(k, h, w, y0, x0);
                  if (n == 0) return;
                  const float g = dy.f32()[p * plane_out + o] / static_cast<float>(n);
                  float* dst = dx->f32() + p * h * w;
                  for (int64_t iy = std::max<int64_t>(y0, 0); iy < std::min(y0 + k.kh, h); ++iy) {
                    for (int64_t ix = std::max<int64_t>(x0, 0); ix < std::min(x0 + k.kw, w); ++ix) {
                      dst[iy * w + ix] += g;
                    }
                  }
                });
  return absl::OkStatus();
}

absl::Status GlobalAveragePool(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  ASSIGN_OR_RETURN(Tensor * out, ctx.Output(0));
  const int64_t planes = x.dim(0) * x.dim(1), size = x.numel() / std::max<int64_t>(planes, 1);
  ParallelFor(planes, 64, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const float* src = x.f32() + p * size;
      double s = 0;
      for (int64_t i = 0; i < size; ++i) s += src[i];
      out->f32()[p] = static_cast<float>(s / static_cast<double>(size));
    }
  });
  return absl::OkStatus();
}

absl::Status GlobalAveragePoolGrad(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  ASSIGN_OR_RETURN(Tensor * dx, ctx.Output(0));
  const int64_t planes = dy.numel(), size = dx->numel() / std::max<int64_t>(planes, 1);
  ParallelFor(planes, 64, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const float g = dy.f32()[p] / static_cast<float>(size);
      float* dst = dx->f32() + p * size;
      for (int64_t i = 0; i < size; ++i) dst[i] = g;
    }
  });
  return absl::OkStatus();
}

// Upsample (nearest, whole scales) and its gradient over [N,C,H,W].
std::pair<int64_t, int64_t> Scales(const KernelContext& ctx) {
  const std::vector<int64_t> s = ctx.attrs().Ints("scales", {1, 1});
  return {s[0], s[1]};
}

absl::Status Upsample(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  ASSIGN_OR_RETURN(Tensor * y, ctx.Output(0));
  const auto [sh, sw] = Scales(ctx);
  const int64_t planes = x.dim(0) * x.dim(1), h = x.dim(2), w = x.dim(3);
  ParallelFor(planes, 1, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const float* src = x.f32() + p * h * w;
      float* dst = y->f32() + p * h * sh * w * sw;
      for (int64_t oy = 0; oy < h * sh; ++oy) {
        const float* row = src + (oy / sh) * w;
        for (int64_t ox = 0; ox < w * sw; ++ox) *dst++ = row[ox / sw];
      }
    }
  });
  return absl::OkStatus();
}

absl::Status UpsampleGrad(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  ASSIGN_OR_RETURN(Tensor * dx, ctx.Output(0));
  const auto [sh, sw] = Scales(ctx);
  const int64_t planes = dx->dim(0) * dx->dim(1), h = dx->dim(2), w = dx->dim(3);
  ParallelFor(planes, 1, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const float* src = dy.f32() + p * h * sh * w * sw;
      float* dst = dx->f32() + p * h * w;
      std::fill(dst, dst + h * w, 0.0f);
      for (int64_t oy = 0; oy < h * sh; ++oy) {
        float* row = dst + (oy / sh) * w;
        for (int64_t ox = 0; ox < w * sw; ++ox) row[ox / sw] += *src++;
      }
    }
  });
  return absl::OkStatus();
}

QUILT_REGISTER_KERNEL("cpu", "Upsample", Upsample);
QUILT_REGISTER_KERNEL("cpu", "UpsampleGrad", UpsampleGrad);
QUILT_REGISTER_KERNEL("cpu", "MaxPool", MaxPool);
QUILT_REGISTER_KERNEL("cpu", "MaxPoolGrad", MaxPoolGrad);
QUILT_REGISTER_KERNEL("cpu", "AveragePool", AveragePool);
QUILT_REGISTER_KERNEL("cpu", "AveragePoolGrad", AveragePoolGrad);
QUILT_REGISTER_KERNEL("cpu", "GlobalAveragePool", GlobalAveragePool);
QUILT_REGISTER_KERNEL("cpu", "GlobalAveragePoolGrad", GlobalAveragePoolGrad);

}  // namespace
}  // namespace quilt::cpu
