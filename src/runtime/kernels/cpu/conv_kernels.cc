// CPU kernels of 2-D convolution (im2col + SGEMM per image and group) and of
// its gradients (col2im for the input, accumulated SGEMMs for the weight).
#include <algorithm>
#include <cstring>
#include <vector>

#include "src/common/status.h"
#include "src/graph/ops/conv_attrs.h"
#include "src/runtime/kernels/cpu/gemm.h"
#include "src/runtime/kernels/cpu/loops.h"
#include "src/runtime/kernels/kernel.h"

namespace quilt::cpu {
namespace {

using ops::Window2D;

struct ConvGeom {
  int64_t n, c, h, w;  // input
  int64_t m, ho, wo;   // output channels and extent
  int64_t cg, mg;      // channels per group (in, out)
  int64_t ckk;         // cg·kh·kw
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

// col[(ci·kh + i)·kw + j][oy·wo + ox] = x[ci][oy·sh - pt + i·dh][ox·sw - pl + j·dw],
// rows of col `stride` floats apart.
void Im2Col(const float* x, const ConvGeom& g, float* col, int64_t stride) {
  const Window2D& k = g.win;
  for (int64_t ci = 0; ci < g.cg; ++ci) {
    for (int64_t i = 0; i < k.kh; ++i) {
      for (int64_t j = 0; j < k.kw; ++j) {
        float* row = col + ((ci * k.kh + i) * k.kw + j) * stride;
        for (int64_t oy = 0; oy < g.ho; ++oy) {
          const int64_t iy = oy * k.sh - k.pt + i * k.dh;
          float* dst = row + oy * g.wo;
          if (iy < 0 || iy >= g.h) {
            std::memset(dst, 0, sizeof(float) * g.wo);
            continue;
          }
          const float* src = x + (ci * g.h + iy) * g.w;
          if (k.sw == 1) {
            // Contiguous: zeros left of the input, a copy, zeros right of it.
            const int64_t shift = j * k.dw - k.pl;  // ix = ox + shift
            const int64_t lo = std::min(g.wo, std::max<int64_t>(0, -shift));
            const int64_t hi = std::max(lo, std::min(g.wo, g.w - shift));
            for (int64_t ox = 0; ox < lo; ++ox) dst[ox] = 0.0f;
            if (hi > lo) std::memcpy(dst + lo, src + lo + shift, sizeof(float) * (hi - lo));
            for (int64_t ox = hi; ox < g.wo; ++ox) dst[ox] = 0.0f;
            continue;
          }
          for (int64_t ox = 0; ox < g.wo; ++ox) {
            const int64_t ix = ox * k.sw - k.pl + j * k.dw;
            dst[ox] = (ix >= 0 && ix < g.w) ? src[ix] : 0.0f;
          }
        }
      }
    }
  }
}

// The adjoint of Im2Col: accumulates col (rows `stride` apart) into x (x
// must be zeroed first).
void Col2Im(const float* col, const ConvGeom& g, float* x, int64_t stride) {
  const Window2D& k = g.win;
  for (int64_t ci = 0; ci < g.cg; ++ci) {
    for (int64_t i = 0; i < k.kh; ++i) {
      for (int64_t j = 0; j < k.kw; ++j) {
        const float* row = col + ((ci * k.kh + i) * k.kw + j) * stride;
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

// Uninitialized scratch memory from the tensor buffer pool (plain vectors
// would be zero-filled and, when large, freshly mapped on every call).
// Errors: RESOURCE_EXHAUSTED when the memory cannot be had.
absl::StatusOr<float*> Scratch(Tensor* holder, int64_t n) {
  ASSIGN_OR_RETURN(*holder, Tensor::Empty(DType::kF32, {n}));
  return holder->f32();
}

// Images per GEMM: the im2col buffer of a chunk stays under ~32 MiB, and
// small images are batched so each GEMM is large enough to run efficiently.
int64_t ImagesPerChunk(const ConvGeom& g) {
  const int64_t per_image = std::max<int64_t>(1, g.ckk * g.ho * g.wo);
  return std::max<int64_t>(1, std::min<int64_t>(g.n, (int64_t{8} << 20) / per_image));
}

// col[:, i·P:(i+1)·P] = im2col of image n0+i, group grp (P = ho·wo).
void Im2ColChunk(const Tensor& x, const ConvGeom& g, int64_t n0, int64_t nc, int64_t grp,
                 float* col) {
  const int64_t plane = g.ho * g.wo;
  ParallelFor(nc, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      Im2Col(x.f32() + ((n0 + i) * g.c + grp * g.cg) * g.h * g.w, g, col + i * plane, nc * plane);
    }
  });
}

absl::Status Conv(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  ASSIGN_OR_RETURN(ConvGeom g, Geometry(ctx, x.dims(), w.dims()));
  ASSIGN_OR_RETURN(Tensor * out, ctx.Output(0));
  const int64_t plane = g.ho * g.wo;
  const int64_t chunk = ImagesPerChunk(g);
  Tensor col_t, y_t;
  ASSIGN_OR_RETURN(float* col, Scratch(&col_t, g.ckk * chunk * plane));
  ASSIGN_OR_RETURN(float* y, Scratch(&y_t, g.mg * chunk * plane));
  for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
    const int64_t nc = std::min(chunk, g.n - n0);
    for (int64_t grp = 0; grp < g.win.group; ++grp) {
      Im2ColChunk(x, g, n0, nc, grp, col);
      // y [mg, nc·P] = W_g [mg, ckk] · col [ckk, nc·P]
      Sgemm(false, false, g.mg, nc * plane, g.ckk, 1.0f, w.f32() + grp * g.mg * g.ckk, col, 0.0f,
            y);
      for (int64_t i = 0; i < nc; ++i) {
        for (int64_t m = 0; m < g.mg; ++m) {
          std::memcpy(out->f32() + ((n0 + i) * g.m + grp * g.mg + m) * plane,
                      y + m * nc * plane + i * plane, sizeof(float) * plane);
        }
      }
    }
  }
  if (ctx.has_input(2)) {
    const float* b = ctx.in(2).f32();
    ParallelFor(g.n * g.m, 16, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) {
        float* yo = out->f32() + i * plane;
        const float v = b[i % g.m];
        for (int64_t p = 0; p < plane; ++p) yo[p] += v;
      }
    });
  }
  return absl::OkStatus();
}

// dy of images n0..n0+nc, group grp, as [mg, nc·P].
void GatherDy(const Tensor& dy, const ConvGeom& g, int64_t n0, int64_t nc, int64_t grp,
              float* buf) {
  const int64_t plane = g.ho * g.wo;
  for (int64_t i = 0; i < nc; ++i) {
    for (int64_t m = 0; m < g.mg; ++m) {
      std::memcpy(buf + m * nc * plane + i * plane,
                  dy.f32() + ((n0 + i) * g.m + grp * g.mg + m) * plane, sizeof(float) * plane);
    }
  }
}

absl::Status ConvGradInput(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& w = ctx.in(1);
  ASSIGN_OR_RETURN(Tensor * dx, ctx.Output(0));
  ASSIGN_OR_RETURN(ConvGeom g, Geometry(ctx, dx->dims(), w.dims()));
  dx->SetZero();
  const int64_t plane = g.ho * g.wo;
  const int64_t chunk = ImagesPerChunk(g);
  Tensor col_t, dyb_t;
  ASSIGN_OR_RETURN(float* col, Scratch(&col_t, g.ckk * chunk * plane));
  ASSIGN_OR_RETURN(float* dyb, Scratch(&dyb_t, g.mg * chunk * plane));
  for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
    const int64_t nc = std::min(chunk, g.n - n0);
    for (int64_t grp = 0; grp < g.win.group; ++grp) {
      GatherDy(dy, g, n0, nc, grp, dyb);
      // col [ckk, nc·P] = W_gᵀ · dy
      Sgemm(true, false, g.ckk, nc * plane, g.mg, 1.0f, w.f32() + grp * g.mg * g.ckk, dyb, 0.0f,
            col);
      ParallelFor(nc, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          Col2Im(col + i * plane, g, dx->f32() + ((n0 + i) * g.c + grp * g.cg) * g.h * g.w,
                 nc * plane);
        }
      });
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
  const int64_t chunk = ImagesPerChunk(g);
  Tensor col_t, dyb_t;
  ASSIGN_OR_RETURN(float* col, Scratch(&col_t, g.ckk * chunk * plane));
  ASSIGN_OR_RETURN(float* dyb, Scratch(&dyb_t, g.mg * chunk * plane));
  for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
    const int64_t nc = std::min(chunk, g.n - n0);
    for (int64_t grp = 0; grp < g.win.group; ++grp) {
      Im2ColChunk(x, g, n0, nc, grp, col);
      GatherDy(dy, g, n0, nc, grp, dyb);
      // dW_g [mg, ckk] += dy [mg, nc·P] · colᵀ
      Sgemm(false, true, g.mg, g.ckk, nc * plane, 1.0f, dyb, col, 1.0f,
            dw->f32() + grp * g.mg * g.ckk);
    }
  }
  return absl::OkStatus();
}

QUILT_REGISTER_KERNEL("cpu", "Conv", Conv);
QUILT_REGISTER_KERNEL("cpu", "ConvGradInput", ConvGradInput);
QUILT_REGISTER_KERNEL("cpu", "ConvGradWeight", ConvGradWeight);

}  // namespace
}  // namespace quilt::cpu
