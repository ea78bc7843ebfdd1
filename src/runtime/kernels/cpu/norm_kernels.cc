// CPU kernels of batch norm (training mode: statistics, then apply), layer norm, softmax and
// log-softmax, with their gradients. Statistics accumulate in double.
#include <cmath>
#include <cstring>
#include <vector>

#include "src/common/status.h"
#include "src/runtime/kernels/cpu/loops.h"
#include "src/runtime/kernels/kernel.h"

namespace quilt::cpu {
namespace {

// X[N,C,S...] as n × c × s, and the element count per channel over the
// global batch (local rows scaled to the global batch).
struct BnLayout {
  int64_t n, c, s;
  double global_count;
};

BnLayout LayoutOf(const KernelContext& ctx, const Tensor& x) {
  BnLayout l;
  l.n = x.dim(0);
  l.c = x.dim(1);
  l.s = x.numel() / std::max<int64_t>(l.n * l.c, 1);
  const double rows_per_sample =
      static_cast<double>(l.n) / static_cast<double>(std::max<int64_t>(1, ctx.local_batch));
  l.global_count =
      rows_per_sample * static_cast<double>(ctx.global_batch) * static_cast<double>(l.s);
  return l;
}

absl::Status BatchNormStats(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const BnLayout l = LayoutOf(ctx, x);
  if (l.global_count <= 1) {
    // (PyTorch refuses it too: every output would be the bias, whatever x.)
    return absl::InvalidArgumentError(
        "batch norm in training over one value per channel (a batch of 1 without spatial dims): "
        "use a batch of 2 or more");
  }
  const float* shift = ctx.has_input(1) ? ctx.in(1).f32() : nullptr;
  ASSIGN_OR_RETURN(Tensor * mean, ctx.Output(0));
  ASSIGN_OR_RETURN(Tensor * sqmean, ctx.Output(1));
  ParallelFor(l.c, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t ch = cb; ch < ce; ++ch) {
      const double k = shift != nullptr ? shift[ch] : 0.0;
      double sum = 0, sq = 0;
      for (int64_t i = 0; i < l.n; ++i) {
        const float* p = x.f32() + (i * l.c + ch) * l.s;
        for (int64_t j = 0; j < l.s; ++j) {
          const double v = p[j] - k;
          sum += v;
          sq += v * v;
        }
      }
      mean->f32()[ch] = static_cast<float>(sum / l.global_count);
      sqmean->f32()[ch] = static_cast<float>(sq / l.global_count);
    }
  });
  return absl::OkStatus();
}

absl::Status BatchNormStatsGrad(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const BnLayout l = LayoutOf(ctx, x);
  const float* dmean = ctx.has_input(1) ? ctx.in(1).f32() : nullptr;
  const float* dsq = ctx.has_input(2) ? ctx.in(2).f32() : nullptr;
  const float* shift = ctx.has_input(3) ? ctx.in(3).f32() : nullptr;
  ASSIGN_OR_RETURN(Tensor * dx, ctx.Output(0));
  const float inv = static_cast<float>(1.0 / l.global_count);
  ParallelFor(l.c, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t ch = cb; ch < ce; ++ch) {
      const float a = dmean ? dmean[ch] * inv : 0.0f;
      const float b = dsq ? 2.0f * dsq[ch] * inv : 0.0f;
      const float k = shift != nullptr ? shift[ch] : 0.0f;
      for (int64_t i = 0; i < l.n; ++i) {
        const float* p = x.f32() + (i * l.c + ch) * l.s;
        float* d = dx->f32() + (i * l.c + ch) * l.s;
        for (int64_t j = 0; j < l.s; ++j) d[j] = a + b * (p[j] - k);
      }
    }
  });
  return absl::OkStatus();
}

absl::Status BatchNormApply(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const float* mean = ctx.in(1).f32();
  const float* sqmean = ctx.in(2).f32();
  const float* scale = ctx.in(3).f32();
  const float* bias = ctx.in(4).f32();
  const float* rm = ctx.in(5).f32();
  const float* rv = ctx.in(6).f32();
  const double eps = ctx.attrs().Float("epsilon", 1e-5);
  const float momentum = static_cast<float>(ctx.attrs().Float("momentum", 0.9));
  const bool shifted = ctx.attrs().Int("shifted", 0) != 0;  // statistics about rm
  const BnLayout l = LayoutOf(ctx, x);
  Tensor* out[3];
  for (int i = 0; i < 3; ++i) {
    ASSIGN_OR_RETURN(out[i], ctx.Output(i));
  }
  ParallelFor(l.c, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t ch = cb; ch < ce; ++ch) {
      const double var =
          std::max(0.0, static_cast<double>(sqmean[ch]) - static_cast<double>(mean[ch]) * mean[ch]);
      const float invstd = static_cast<float>(1.0 / std::sqrt(var + eps));
      const float a = scale[ch] * invstd;
      // The batch mean; x minus it first (exact for x near it), then the
      // scale: a large mean is not multiplied out.
      const double batch_mean = (shifted ? static_cast<double>(rm[ch]) : 0.0) + mean[ch];
      const float c = static_cast<float>(batch_mean);
      const float b = bias[ch];
      for (int64_t i = 0; i < l.n; ++i) {
        const float* p = x.f32() + (i * l.c + ch) * l.s;
        float* y = out[0]->f32() + (i * l.c + ch) * l.s;
        for (int64_t j = 0; j < l.s; ++j) y[j] = (p[j] - c) * a + b;
      }
      const double count = l.global_count;
      const double unbiased = count > 1 ? var * count / (count - 1) : var;
      out[1]->f32()[ch] =
          static_cast<float>(momentum * static_cast<double>(rm[ch]) + (1 - momentum) * batch_mean);
      out[2]->f32()[ch] = momentum * rv[ch] + (1 - momentum) * static_cast<float>(unbiased);
    }
  });
  return absl::OkStatus();
}

absl::Status BatchNormApplyGrad(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& x = ctx.in(1);
  const float* mean = ctx.in(2).f32();
  const float* sqmean = ctx.in(3).f32();
  const float* scale = ctx.in(4).f32();
  const float* shift = ctx.has_input(5) ? ctx.in(5).f32() : nullptr;
  const double eps = ctx.attrs().Float("epsilon", 1e-5);
  const BnLayout l = LayoutOf(ctx, x);
  Tensor* out[5];
  for (int i = 0; i < 5; ++i) {
    ASSIGN_OR_RETURN(out[i], ctx.Output(i));
  }
  ParallelFor(l.c, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t ch = cb; ch < ce; ++ch) {
      const double m = mean[ch];
      const double var = std::max(0.0, static_cast<double>(sqmean[ch]) - m * m);
      const double invstd = 1.0 / std::sqrt(var + eps);
      const float sh = shift != nullptr ? shift[ch] : 0.0f;
      double sdy = 0, sdyxm = 0;
      for (int64_t i = 0; i < l.n; ++i) {
        const float* g = dy.f32() + (i * l.c + ch) * l.s;
        const float* p = x.f32() + (i * l.c + ch) * l.s;
        for (int64_t j = 0; j < l.s; ++j) {
          sdy += g[j];
          sdyxm += g[j] * (static_cast<double>(p[j] - sh) - m);
        }
      }
      const double gamma = scale[ch];
      const double dinvstd = gamma * sdyxm;
      const double i3 = invstd * invstd * invstd;
      out[1]->f32()[ch] = static_cast<float>(-gamma * invstd * sdy + dinvstd * m * i3);
      out[2]->f32()[ch] = static_cast<float>(-0.5 * dinvstd * i3);
      out[3]->f32()[ch] = static_cast<float>(sdyxm * invstd);
      out[4]->f32()[ch] = static_cast<float>(sdy);
      const float k = static_cast<float>(gamma * invstd);
      for (int64_t i = 0; i < l.n; ++i) {
        const float* g = dy.f32() + (i * l.c + ch) * l.s;
        float* d = out[0]->f32() + (i * l.c + ch) * l.s;
        for (int64_t j = 0; j < l.s; ++j) d[j] = k * g[j];
      }
    }
  });
  return absl::OkStatus();
}

// Rows × cols view of X for a norm over the dims from `axis`.
void RowsCols(const Tensor& x, int64_t axis_attr, int64_t* rows, int64_t* cols) {
  int axis = static_cast<int>(axis_attr < 0 ? axis_attr + x.rank() : axis_attr);
  *rows = 1;
  *cols = 1;
  for (int i = 0; i < x.rank(); ++i) (i < axis ? *rows : *cols) *= x.dim(i);
}

// `t` (broadcastable to the normalized dims of x) materialized as one row of
// cols floats; nullptr → fill.
std::vector<float> AsRow(const Tensor* t, const Tensor& x, int64_t cols, float fill) {
  std::vector<float> row(cols, fill);
  if (t != nullptr) {
    const std::vector<int64_t> norm(x.dims().end() - std::min<size_t>(t->rank(), x.rank()),
                                    x.dims().end());
    std::vector<int64_t> target = norm;
    // Leading normalized dims the scale does not cover repeat the row.
    int64_t covered = 1;
    for (int64_t d : norm) covered *= d;
    std::vector<float> zero(1, 0.0f);
    BroadcastBinary(t->f32(), t->dims(), zero.data(), {}, row.data(), target,
                    [](float a, float) { return a; });
    for (int64_t k = covered; k < cols; ++k) row[k] = row[k % covered];
  }
  return row;
}

absl::Status LayerNorm(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  int64_t rows, cols;
  RowsCols(x, ctx.attrs().Int("axis", -1), &rows, &cols);
  const double eps = ctx.attrs().Float("epsilon", 1e-5);
  const std::vector<float> scale = AsRow(&ctx.in(1), x, cols, 1.0f);
  const std::vector<float> bias = AsRow(ctx.has_input(2) ? &ctx.in(2) : nullptr, x, cols, 0.0f);
  ASSIGN_OR_RETURN(Tensor * y, ctx.Output(0));
  float* mean_out = nullptr;
  float* inv_out = nullptr;
  if (ctx.num_outputs() > 1) {
    ASSIGN_OR_RETURN(Tensor * m, ctx.Output(1));
    mean_out = m->f32();
  }
  if (ctx.num_outputs() > 2) {
    ASSIGN_OR_RETURN(Tensor * v, ctx.Output(2));
    inv_out = v->f32();
  }
  ParallelFor(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(cols, 1)),
              [&](int64_t rb, int64_t re) {
                for (int64_t r = rb; r < re; ++r) {
                  const float* p = x.f32() + r * cols;
                  double sum = 0;
                  for (int64_t j = 0; j < cols; ++j) sum += p[j];
                  const double mean = sum / static_cast<double>(cols);
                  double sq = 0;
                  for (int64_t j = 0; j < cols; ++j) sq += (p[j] - mean) * (p[j] - mean);
                  const float inv =
                      static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(cols) + eps));
                  const float m = static_cast<float>(mean);
                  float* q = y->f32() + r * cols;
                  for (int64_t j = 0; j < cols; ++j) q[j] = (p[j] - m) * inv * scale[j] + bias[j];
                  if (mean_out) mean_out[r] = m;
                  if (inv_out) inv_out[r] = inv;
                }
              });
  return absl::OkStatus();
}

absl::Status LayerNormGrad(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& x = ctx.in(1);
  int64_t rows, cols;
  RowsCols(x, ctx.attrs().Int("axis", -1), &rows, &cols);
  const std::vector<float> scale = AsRow(&ctx.in(2), x, cols, 1.0f);
  const float* mean = ctx.in(3).f32();
  const float* inv = ctx.in(4).f32();
  Tensor *dx, *dscale, *dbias;
  ASSIGN_OR_RETURN(dx, ctx.Output(0));
  ASSIGN_OR_RETURN(dscale, ctx.Output(1));
  ASSIGN_OR_RETURN(dbias, ctx.Output(2));
  ParallelFor(
      rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(cols, 1)), [&](int64_t rb, int64_t re) {
        for (int64_t r = rb; r < re; ++r) {
          const float* g = dy.f32() + r * cols;
          const float* p = x.f32() + r * cols;
          double sg = 0, sgx = 0;
          for (int64_t j = 0; j < cols; ++j) {
            const float xhat = (p[j] - mean[r]) * inv[r];
            const float gs = g[j] * scale[j];
            sg += gs;
            sgx += gs * xhat;
          }
          const float mg = static_cast<float>(sg / cols), mgx = static_cast<float>(sgx / cols);
          float* d = dx->f32() + r * cols;
          for (int64_t j = 0; j < cols; ++j) {
            const float xhat = (p[j] - mean[r]) * inv[r];
            d[j] = inv[r] * (g[j] * scale[j] - mg - xhat * mgx);
          }
        }
      });
  std::vector<double> ds(cols, 0.0), db(cols, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = dy.f32() + r * cols;
    const float* p = x.f32() + r * cols;
    for (int64_t j = 0; j < cols; ++j) {
      ds[j] += g[j] * ((p[j] - mean[r]) * inv[r]);
      db[j] += g[j];
    }
  }
  for (int64_t j = 0; j < cols; ++j) {
    dscale->f32()[j] = static_cast<float>(ds[j]);
    dbias->f32()[j] = static_cast<float>(db[j]);
  }
  return absl::OkStatus();
}

// [outer, len, inner] view for an op along `axis`.
void AxisView(const Tensor& x, int64_t axis_attr, int64_t* outer, int64_t* len, int64_t* inner) {
  const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + x.rank() : axis_attr);
  *outer = *inner = 1;
  *len = x.rank() == 0 ? 1 : x.dim(axis);
  for (int i = 0; i < x.rank(); ++i) {
    if (i < axis) *outer *= x.dim(i);
    if (i > axis) *inner *= x.dim(i);
  }
}

template <bool kLog>
absl::Status SoftmaxImpl(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  int64_t outer, len, inner;
  AxisView(x, ctx.attrs().Int("axis", -1), &outer, &len, &inner);
  ASSIGN_OR_RETURN(Tensor * y, ctx.Output(0));
  ParallelFor(outer * inner, std::max<int64_t>(1, kGrain / std::max<int64_t>(len, 1)),
              [&](int64_t b, int64_t e) {
                for (int64_t t = b; t < e; ++t) {
                  const int64_t o = t / inner, i = t % inner;
                  const float* p = x.f32() + o * len * inner + i;
                  float* q = y->f32() + o * len * inner + i;
                  float mx = -INFINITY;
                  for (int64_t j = 0; j < len; ++j) mx = std::max(mx, p[j * inner]);
                  double sum = 0;
                  for (int64_t j = 0; j < len; ++j) sum += std::exp(p[j * inner] - mx);
                  if (kLog) {
                    const float lse = mx + static_cast<float>(std::log(sum));
                    for (int64_t j = 0; j < len; ++j) q[j * inner] = p[j * inner] - lse;
                  } else {
                    const float inv = static_cast<float>(1.0 / sum);
                    for (int64_t j = 0; j < len; ++j)
                      q[j * inner] = std::exp(p[j * inner] - mx) * inv;
                  }
                }
              });
  return absl::OkStatus();
}

template <bool kLog>
absl::Status SoftmaxGradImpl(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& y = ctx.in(1);
  int64_t outer, len, inner;
  AxisView(y, ctx.attrs().Int("axis", -1), &outer, &len, &inner);
  ASSIGN_OR_RETURN(Tensor * dx, ctx.Output(0));
  ParallelFor(outer * inner, std::max<int64_t>(1, kGrain / std::max<int64_t>(len, 1)),
              [&](int64_t b, int64_t e) {
                for (int64_t t = b; t < e; ++t) {
                  const int64_t o = t / inner, i = t % inner;
                  const int64_t base = o * len * inner + i;
                  const float* g = dy.f32() + base;
                  const float* p = y.f32() + base;
                  float* d = dx->f32() + base;
                  double s = 0;
                  if (kLog) {
                    for (int64_t j = 0; j < len; ++j) s += g[j * inner];
                    for (int64_t j = 0; j < len; ++j) {
                      d[j * inner] = g[j * inner] - std::exp(p[j * inner]) * static_cast<float>(s);
                    }
                  } else {
                    for (int64_t j = 0; j < len; ++j) s += g[j * inner] * p[j * inner];
                    for (int64_t j = 0; j < len; ++j) {
                      d[j * inner] = p[j * inner] * (g[j * inner] - static_cast<float>(s));
                    }
                  }
                }
              });
  return absl::OkStatus();
}

QUILT_REGISTER_KERNEL("cpu", "BatchNormStats", BatchNormStats);
QUILT_REGISTER_KERNEL("cpu", "BatchNormStatsGrad", BatchNormStatsGrad);
QUILT_REGISTER_KERNEL("cpu", "BatchNormApply", BatchNormApply);
QUILT_REGISTER_KERNEL("cpu", "BatchNormApplyGrad", BatchNormApplyGrad);
QUILT_REGISTER_KERNEL("cpu", "LayerNormalization", LayerNorm);
QUILT_REGISTER_KERNEL("cpu", "LayerNormGrad", LayerNormGrad);
QUILT_REGISTER_KERNEL("cpu", "Softmax", SoftmaxImpl<false>);
QUILT_REGISTER_KERNEL("cpu", "SoftmaxGrad", SoftmaxGradImpl<false>);
QUILT_REGISTER_KERNEL("cpu", "LogSoftmax", SoftmaxImpl<true>);
QUILT_REGISTER_KERNEL("cpu", "LogSoftmaxGrad", SoftmaxGradImpl<true>);

}  // namespace
}  // namespace quilt::cpu
