// CPU kernels of 2-D convolution (im2col + SGEMM per image and group) and of
// its gradients (col2im for the input, accumulated SGEMMs for the weight).
// Grouped convolutions run their groups in parallel; others split each GEMM.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <vector>

#include "src/common/status.h"
#include "src/graph/ops/conv_attrs.h"
#include "src/runtime/kernels/cpu/gemm.h"
#include "src/runtime/kernels/cpu/loops.h"
#include "src/runtime/kernels/kernel.h"
#include "src/runtime/parallel.h"

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
// (The same whatever the thread count: the weight gradient sums the chunks
// in turn, and so is the same on every machine.)
int64_t ImagesPerChunk(const ConvGeom& g) {
  const int64_t per_image = std::max<int64_t>(1, g.ckk * g.ho * g.wo);
  return std::max<int64_t>(1, std::min<int64_t>(g.n, (int64_t{8} << 20) / per_image));
}

// One group's share of a chunk of images: scratch `col` [ckk, nc·P] and
// `buf` [mg, nc·P]; `split`: its GEMMs and copies may use the compute
// threads (false inside a ParallelFor over groups).
struct GroupWork {
  int64_t n0, nc, grp;
  float* col;
  float* buf;
  bool split;
};

// Runs `body` for every chunk of images and every group. A convolution of
// one group runs them in turn, each GEMM split across the compute threads;
// a grouped one (depthwise: one group per channel, each GEMM tiny) runs
// its groups side by side, each on one thread with scratch of its own.
// Errors: RESOURCE_EXHAUSTED when the scratch memory cannot be had.
absl::Status EachGroup(const ConvGeom& g, const std::function<void(const GroupWork&)>& body) {
  const int64_t plane = g.ho * g.wo;
  const int64_t chunk = ImagesPerChunk(g);
  const int64_t scratch = (g.ckk + g.mg) * chunk * plane;  // floats per runner
  const int threads = ComputeThreads();
  // Runners side by side, their scratch 128 MiB in all at most; only when
  // there are groups enough for the threads, or each group's GEMM is too
  // small to split (Sgemm runs those on one thread anyway).
  const int64_t runners = std::max<int64_t>(
      1, std::min<int64_t>(
             {threads, g.win.group, (int64_t{32} << 20) / std::max<int64_t>(1, scratch)}));
  const double group_flops = 2.0 * static_cast<double>(g.mg) * static_cast<double>(g.ckk) *
                             static_cast<double>(chunk * plane);
  if (runners < 2 || (g.win.group < threads && group_flops >= 4e6)) {
    Tensor col_t, buf_t;
    ASSIGN_OR_RETURN(float* col, Scratch(&col_t, g.ckk * chunk * plane));
    ASSIGN_OR_RETURN(float* buf, Scratch(&buf_t, g.mg * chunk * plane));
    for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
      for (int64_t grp = 0; grp < g.win.group; ++grp) {
        body({n0, std::min(chunk, g.n - n0), grp, col, buf, /*split=*/true});
      }
    }
    return absl::OkStatus();
  }
  std::atomic<bool> out_of_memory{false};
  ParallelFor(runners, 1, [&](int64_t first, int64_t end) {
    for (int64_t r = first; r < end; ++r) {
      Tensor col_t, buf_t;
      absl::StatusOr<float*> col = Scratch(&col_t, g.ckk * chunk * plane);
      absl::StatusOr<float*> buf = Scratch(&buf_t, g.mg * chunk * plane);
      if (!col.ok() || !buf.ok()) {
        out_of_memory = true;
        return;
      }
      for (int64_t grp = r; grp < g.win.group; grp += runners) {
        for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
          body({n0, std::min(chunk, g.n - n0), grp, *col, *buf, /*split=*/false});
        }
      }
    }
  });
  if (out_of_memory) {
    return absl::ResourceExhaustedError("cannot allocate a grouped convolution's scratch memory");
  }
  return absl::OkStatus();
}

// `fn(i)` for each image i of the chunk, on the compute threads if `split`.
void EachImage(const GroupWork& w, const std::function<void(int64_t)>& fn) {
  if (!w.split) {
    for (int64_t i = 0; i < w.nc; ++i) fn(i);
    return;
  }
  ParallelFor(w.nc, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) fn(i);
  });
}

void Gemm(const GroupWork& w, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
          const float* b, float beta, float* c) {
  if (w.split) {
    Sgemm(ta, tb, m, n, k, 1.0f, a, b, beta, c);
  } else {
    SgemmOnThisThread(ta, tb, m, n, k, 1.0f, a, b, beta, c);
  }
}

// w.col[:, i·P:(i+1)·P] = im2col of image n0+i, group grp (P = ho·wo).
void Im2ColChunk(const Tensor& x, const ConvGeom& g, const GroupWork& w) {
  const int64_t plane = g.ho * g.wo;
  EachImage(w, [&](int64_t i) {
    Im2Col(x.f32() + ((w.n0 + i) * g.c + w.grp * g.cg) * g.h * g.w, g, w.col + i * plane,
           w.nc * plane);
  });
}

absl::Status Conv(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& wt = ctx.in(1);
  ASSIGN_OR_RETURN(ConvGeom g, Geometry(ctx, x.dims(), wt.dims()));
  ASSIGN_OR_RETURN(Tensor * out, ctx.Output(0));
  const int64_t plane = g.ho * g.wo;
  RETURN_IF_ERROR(EachGroup(g, [&](const GroupWork& w) {
    Im2ColChunk(x, g, w);
    // buf [mg, nc·P] = W_g [mg, ckk] · col [ckk, nc·P]
    Gemm(w, false, false, g.mg, w.nc * plane, g.ckk, wt.f32() + w.grp * g.mg * g.ckk, w.col, 0.0f,
         w.buf);
    for (int64_t i = 0; i < w.nc; ++i) {
      for (int64_t m = 0; m < g.mg; ++m) {
        std::memcpy(out->f32() + ((w.n0 + i) * g.m + w.grp * g.mg + m) * plane,
                    w.buf + m * w.nc * plane + i * plane, sizeof(float) * plane);
      }
    }
  }));
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

// w.buf = dy of images n0..n0+nc, group grp, as [mg, nc·P].
void GatherDy(const Tensor& dy, const ConvGeom& g, const GroupWork& w) {
  const int64_t plane = g.ho * g.wo;
  for (int64_t i = 0; i < w.nc; ++i) {
    for (int64_t m = 0; m < g.mg; ++m) {
      std::memcpy(w.buf + m * w.nc * plane + i * plane,
                  dy.f32() + ((w.n0 + i) * g.m + w.grp * g.mg + m) * plane, sizeof(float) * plane);
    }
  }
}

absl::Status ConvGradInput(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& wt = ctx.in(1);
  ASSIGN_OR_RETURN(Tensor * dx, ctx.Output(0));
  ASSIGN_OR_RETURN(ConvGeom g, Geometry(ctx, dx->dims(), wt.dims()));
  dx->SetZero();
  const int64_t plane = g.ho * g.wo;
  return EachGroup(g, [&](const GroupWork& w) {
    GatherDy(dy, g, w);
    // col [ckk, nc·P] = W_gᵀ · dy
    Gemm(w, true, false, g.ckk, w.nc * plane, g.mg, wt.f32() + w.grp * g.mg * g.ckk, w.buf, 0.0f,
         w.col);
    EachImage(w, [&](int64_t i) {
      Col2Im(w.col + i * plane, g, dx->f32() + ((w.n0 + i) * g.c + w.grp * g.cg) * g.h * g.w,
             w.nc * plane);
    });
  });
}

absl::Status ConvGradWeight(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& x = ctx.in(1);
  ASSIGN_OR_RETURN(Tensor * dw, ctx.Output(0));
  ASSIGN_OR_RETURN(ConvGeom g, Geometry(ctx, x.dims(), dw->dims()));
  dw->SetZero();
  const int64_t plane = g.ho * g.wo;
  return EachGroup(g, [&](const GroupWork& w) {
    Im2ColChunk(x, g, w);
    GatherDy(dy, g, w);
    // dW_g [mg, ckk] += dy [mg, nc·P] · colᵀ
    Gemm(w, false, true, g.mg, g.ckk, w.nc * plane, w.buf, w.col, 1.0f,
         dw->f32() + w.grp * g.mg * g.ckk);
  });
}

QUILT_REGISTER_KERNEL("cpu", "Conv", Conv);
QUILT_REGISTER_KERNEL("cpu", "ConvGradInput", ConvGradInput);
QUILT_REGISTER_KERNEL("cpu", "ConvGradWeight", ConvGradWeight);

}  // namespace
}  // namespace quilt::cpu
