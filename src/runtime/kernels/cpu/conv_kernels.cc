// CPU kernels of 2-D convolution (im2col + SGEMM per image and group) and of
// its gradients (col2im for the input, accumulated SGEMMs for the weight).
#include <cblas-openblas.h>

#include <cstring>
#include <vector>

#include "src/common/status.h"
#include "src/graph/ops/conv_attrs.h"
#include "src/runtime/kernels/cpu/loops.h"
#include "src/runtime/kernels/kernel.h"

namespace quilt::cpu {
namespace {

using ops::Window2D;

struct ConvGeom {
  int64_t n, c, h, w;     // input
  int64_t m, ho, wo;      // output channels and extent
  int64_t cg, mg;         // channels per group (in, out)
  int64_t ckk;            // cg·kh·kw
  Window2D win;
};

absl::StatusOr<ConvGeom> Geometry(const KernelContext& ctx, const std::vector<int64_t>& x,
                                  const std::vector<int64_t>& wt) {
  ASSIGN_OR_RETURN(Window2D win, ops::ParseWindow(ctx.attrs(), wt[2], wt[3]));
  ConvGeom g;
  g.win = win;
  g.n = x[0];
  g.c = x[1];
  g.h = x[2];
  g.w = x[3];
  g.m = wt[0];
  g.ho = win.OutH(g.h);
  g.wo = win.OutW(g.w);
  g.cg = g.c / win.group;
  g.mg = g.m / win.group;
  g.ckk = g.cg * win.kh * win.kw;
  return g;
}

// col[(ci·kh + i)·kw + j][oy·wo + ox] = x[ci][oy·sh - pt + i·dh][ox·sw - pl + j·dw].
void Im2Col(const float* x, const ConvGeom& g, float* col) {
  const Window2D& k = g.win;
  const int64_t plane = g.ho * g.wo;
  for (int64_t ci = 0; ci < g.cg; ++ci) {
    for (int64_t i = 0; i < k.kh; ++i) {
      for (int64_t j = 0; j < k.kw; ++j) {
        float* row = col + ((ci * k.kh + i) * k.kw + j) * plane;
        for (int64_t oy = 0; oy < g.ho; ++oy) {
          const int64_t iy = oy * k.sh - k.pt + i * k.dh;
          float* dst = row + oy * g.wo;
          if (iy < 0 || iy >= g.h) {
            std::memset(dst, 0, sizeof(float) * g.wo);
            continue;
          }
          const float* src = x + (ci * g.h + iy) * g.w;
          for (int64_t ox = 0; ox < g.wo; ++ox) {
            const int64_t ix = ox * k.sw - k.pl + j * k.dw;
            dst[ox] = (ix >= 0 && ix < g.w) ? src[ix] : 0.0f;
          }
        }
      }
    }
  }
}

// The adjoint of Im2Col: accumulates col into x (x must be zeroed first).
void Col2Im(const float* col, const ConvGeom& g, float* x) {
  const Window2D& k = g.win;
  const int64_t plane = g.ho * g.wo;
  for (int64_t ci = 0; ci < g.cg; ++ci) {
    for (int64_t i = 0; i < k.kh; ++i) {
      for (int64_t j = 0; j < k.kw; ++j) {
        const float* row = col + ((ci * k.kh + i) * k.kw + j) * plane;
        for (int64_t oy = 0; oy < g.ho; ++oy) {
          const int64_t iy = oy * k.sh - k.pt + i * k.dh;
          if (iy < 0 || iy >= g.h) continue;
          float* dst = x + (ci * g.h + iy) * g.w;
          const float* src = row + oy * g.wo;
          for (int64_t ox = 0; ox < g.wo; ++ox) {
            const int64_t ix = ox * k.sw - k.pl + j * k.dw;
            if (ix >= 0 && ix < g.w) dst[ix] += src[ox];
          }
        }
      }
    }
  }
}

bool IsPointwise(const ConvGeom& g) {
  const Window2D& k = g.win;
  return k.kh == 1 && k.kw == 1 && k.sh == 1 && k.sw == 1 && k.pt == 0 && k.pl == 0 &&
         k.pb == 0 && k.pr == 0;
}

absl::Status Conv(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  ASSIGN_OR_RETURN(ConvGeom g, Geometry(ctx, x.dims(), w.dims()));
  ASSIGN_OR_RETURN(Tensor * out, ctx.Output(0));
  const int64_t plane = g.ho * g.wo;
  const bool pointwise = IsPointwise(g);
  std::vector<float> col(pointwise ? 0 : g.ckk * plane);
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t grp = 0; grp < g.win.group; ++grp) {
      const float* xin = x.f32() + (n * g.c + grp * g.cg) * g.h * g.w;
      const float* src = xin;
      if (!pointwise) {
        Im2Col(xin, g, col.data());
        src = col.data();
      }
      float* y = out->f32() + (n * g.m + grp * g.mg) * plane;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g.mg, plane, g.ckk, 1.0f,
                  w.f32() + grp * g.mg * g.ckk, g.ckk, src, plane, 0.0f, y, plane);
    }
  }
  if (ctx.has_input(2)) {
    const float* b = ctx.in(2).f32();
    ParallelFor(g.n * g.m, 16, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) {
        float* y = out->f32() + i * plane;
        const float v = b[i % g.m];
        for (int64_t p = 0; p < plane; ++p) y[p] += v;
      }
    });
  }
  return absl::OkStatus();
}

absl::Status ConvGradInput(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& w = ctx.in(1);
  ASSIGN_OR_RETURN(Tensor * dx, ctx.Output(0));
  ASSIGN_OR_RETURN(ConvGeom g, Geometry(ctx, dx->dims(), w.dims()));
  dx->SetZero();
  const int64_t plane = g.ho * g.wo;
  const bool pointwise = IsPointwise(g);
  std::vector<float> col(g.ckk * plane);
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t grp = 0; grp < g.win.group; ++grp) {
      const float* dyn = dy.f32() + (n * g.m + grp * g.mg) * plane;
      float* dxn = dx->f32() + (n * g.c + grp * g.cg) * g.h * g.w;
      // col = Wᵀ · dy
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, g.ckk, plane, g.mg, 1.0f,
                  w.f32() + grp * g.mg * g.ckk, g.ckk, dyn, plane, 0.0f,
                  pointwise ? dxn : col.data(), plane);
      if (!pointwise) Col2Im(col.data(), g, dxn);
    }
  }
  return absl::OkStatus();
}

absl::Status ConvGradWeight(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& x = ctx.in(1);
  ASSIGN_OR_RETURN(Tensor * dw, ctx.Output(0));
  ASSIGN_OR_RETURN(ConvGeom g, Geometry(ctx, x.dims(), dw->dims()));
  dw->SetZero();
  const int64_t plane = g.ho * g.wo;
  const bool pointwise = IsPointwise(g);
  std::vector<float> col(pointwise ? 0 : g.ckk * plane);
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t grp = 0; grp < g.win.group; ++grp) {
      const float* xin = x.f32() + (n * g.c + grp * g.cg) * g.h * g.w;
      const float* src = xin;
      if (!pointwise) {
        Im2Col(xin, g, col.data());
        src = col.data();
      }
      const float* dyn = dy.f32() + (n * g.m + grp * g.mg) * plane;
      // dW += dy · colᵀ
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g.mg, g.ckk, plane, 1.0f, dyn, plane,
                  src, plane, 1.0f, dw->f32() + grp * g.mg * g.ckk, g.ckk);
    }
  }
  return absl::OkStatus();
}

QUILT_REGISTER_KERNEL("cpu", "Conv", Conv);
QUILT_REGISTER_KERNEL("cpu", "ConvGradInput", ConvGradInput);
QUILT_REGISTER_KERNEL("cpu", "ConvGradWeight", ConvGradWeight);

}  // namespace
}  // namespace quilt::cpu
