// CPU kernels of element-wise ops and their gradients.
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "src/common/status.h"
#include "src/runtime/kernels/cpu/loops.h"
#include "src/runtime/kernels/kernel.h"

namespace quilt::cpu {
namespace {

constexpr float kSqrt1_2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;
constexpr float kSqrt2OverPi = 0.79788456080286535588f;

template <typename F>
absl::Status Binary(KernelContext& ctx, F f) {
  ASSIGN_OR_RETURN(Tensor * out, ctx.Output(0));
  BroadcastBinary(ctx.in(0).f32(), ctx.in(0).dims(), ctx.in(1).f32(), ctx.in(1).dims(), out->f32(),
                  out->dims(), f);
  return absl::OkStatus();
}

template <typename F>
absl::Status Unary(KernelContext& ctx, F f) {
  ASSIGN_OR_RETURN(Tensor * out, ctx.Output(0));
  MapUnary(ctx.in(0).f32(), out->f32(), out->numel(), f);
  return absl::OkStatus();
}

// dx = f(dy, t) element-wise (gradient ops).
template <typename F>
absl::Status GradPair(KernelContext& ctx, F f) {
  ASSIGN_OR_RETURN(Tensor * out, ctx.Output(0));
  MapBinary(ctx.in(0).f32(), ctx.in(1).f32(), out->f32(), out->numel(), f);
  return absl::OkStatus();
}

// 1 where the comparison (attribute mode) holds, broadcast, for float32
// or int64 inputs.
template <typename T>
bool Holds(const std::string& mode, T a, T b) {
  return mode == "eq"   ? a == b
         : mode == "gt" ? a > b
         : mode == "lt" ? a < b
         : mode == "ge" ? a >= b
                        : a <= b;
}

absl::Status CompareMask(KernelContext& ctx) {
  ASSIGN_OR_RETURN(Tensor * out, ctx.Output(0));
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  const std::string mode = ctx.attrs().String("mode", "eq");
  const std::vector<int64_t>& dout = out->dims();
  const std::vector<int64_t> sa = BroadcastStrides(a.dims(), dout);
  const std::vector<int64_t> sb = BroadcastStrides(b.dims(), dout);
  const bool ints = a.dtype() == DType::kI64;
  const int r = static_cast<int>(dout.size());
  std::vector<int64_t> idx(r, 0);
  for (int64_t i = 0; i < out->numel(); ++i) {
    int64_t oa = 0, ob = 0;
    for (int d = 0; d < r; ++d) {
      oa += idx[d] * sa[d];
      ob += idx[d] * sb[d];
    }
    const bool holds =
        ints ? Holds(mode, a.i64()[oa], b.i64()[ob]) : Holds(mode, a.f32()[oa], b.f32()[ob]);
    out->f32()[i] = holds ? 1.0f : 0.0f;
    for (int d = r - 1; d >= 0 && ++idx[d] == dout[d]; --d) idx[d] = 0;
  }
  return absl::OkStatus();
}

absl::Status Add(KernelContext& c) {
  return Binary(c, [](float a, float b) { return a + b; });
}
absl::Status Sub(KernelContext& c) {
  return Binary(c, [](float a, float b) { return a - b; });
}
absl::Status Mul(KernelContext& c) {
  return Binary(c, [](float a, float b) { return a * b; });
}
absl::Status Div(KernelContext& c) {
  return Binary(c, [](float a, float b) { return a / b; });
}
absl::Status Pow(KernelContext& c) {
  return Binary(c, [](float a, float b) { return b == 2.0f ? a * a : std::pow(a, b); });
}

absl::Status PowGrad(KernelContext& ctx) {
  // dy * e * x^(e-1); x and e broadcast to dy's shape.
  ASSIGN_OR_RETURN(Tensor * out, ctx.Output(0));
  BroadcastBinary(ctx.in(1).f32(), ctx.in(1).dims(), ctx.in(2).f32(), ctx.in(2).dims(), out->f32(),
                  out->dims(),
                  [](float x, float e) { return e == 2.0f ? 2.0f * x : e * std::pow(x, e - 1); });
  MapBinary(out->f32(), ctx.in(0).f32(), out->f32(), out->numel(),
            [](float d, float dy) { return d * dy; });
  return absl::OkStatus();
}

absl::Status Sum(KernelContext& ctx) {
  ASSIGN_OR_RETURN(Tensor * out, ctx.Output(0));
  const int64_t n = out->numel();
  if (ctx.in(0).dims() == out->dims()) {
    std::memcpy(out->f32(), ctx.in(0).f32(), n * sizeof(float));
  } else {
    std::vector<float> zero(1, 0.0f);
    BroadcastBinary(ctx.in(0).f32(), ctx.in(0).dims(), zero.data(), {}, out->f32(), out->dims(),
                    [](float a, float) { return a; });
  }
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    BroadcastBinary(out->f32(), out->dims(), ctx.in(i).f32(), ctx.in(i).dims(), out->f32(),
                    out->dims(), [](float a, float b) { return a + b; });
  }
  return absl::OkStatus();
}

absl::Status SumToShape(KernelContext& ctx) {
  ASSIGN_OR_RETURN(Tensor * out, ctx.Output(0));
  const Tensor& in = ctx.in(0);
  const std::vector<int64_t>& di = in.dims();
  const std::vector<int64_t> so = BroadcastStrides(out->dims(), di);
  const int64_t n_out = out->numel();
  std::vector<double> acc(n_out, 0.0);
  const int r = static_cast<int>(di.size());
  const int64_t inner = r == 0 ? 1 : di[r - 1];
  const int64_t rows = inner == 0 ? 0 : in.numel() / inner;
  const float* x = in.f32();
  const int64_t si = r == 0 ? 0 : so[r - 1];
  for (int64_t row = 0; row < rows; ++row) {
    int64_t off = 0, rem = row;
    for (int d = r - 2; d >= 0; --d) {
      off += (rem % di[d]) * so[d];
      rem /= di[d];
    }
    const float* px = x + row * inner;
    double* pa = acc.data() + off;
    if (si) {
      for (int64_t i = 0; i < inner; ++i) pa[i] += px[i];
    } else {
      double s = 0;
      for (int64_t i = 0; i < inner; ++i) s += px[i];
      pa[0] += s;
    }
  }
  float* o = out->f32();
  for (int64_t i = 0; i < n_out; ++i) o[i] = static_cast<float>(acc[i]);
  return absl::OkStatus();
}

absl::Status Relu(KernelContext& c) {
  // NaN stays NaN, as in PyTorch (a model fed non-finite data says so).
  return Unary(c, [](float x) { return x > 0 || x != x ? x : 0.0f; });
}
absl::Status ReluGrad(KernelContext& c) {
  return GradPair(c, [](float dy, float y) { return y > 0 ? dy : 0.0f; });
}

bool TanhApprox(const KernelContext& c) {
  return c.attrs().String("approximate", "none") == "tanh";
}

absl::Status Gelu(KernelContext& c) {
  if (TanhApprox(c)) {
    return Unary(c, [](float x) {
      return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
    });
  }
  return Unary(c, [](float x) { return 0.5f * x * (1.0f + std::erf(x * kSqrt1_2)); });
}

absl::Status GeluGrad(KernelContext& c) {
  if (TanhApprox(c)) {
    return GradPair(c, [](float dy, float x) {
      const float inner = kSqrt2OverPi * (x + 0.044715f * x * x * x);
      const float t = std::tanh(inner);
      const float d_inner = kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
      return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * d_inner);
    });
  }
  return GradPair(c, [](float dy, float x) {
    const float cdf = 0.5f * (1.0f + std::erf(x * kSqrt1_2));
    const float pdf = kInvSqrt2Pi * std::exp(-0.5f * x * x);
    return dy * (cdf + x * pdf);
  });
}

absl::Status Erf(KernelContext& c) {
  return Unary(c, [](float x) { return std::erf(x); });
}
absl::Status ErfGrad(KernelContext& c) {
  return GradPair(
      c, [](float dy, float x) { return dy * 1.12837916709551257390f * std::exp(-x * x); });
}
absl::Status Tanh(KernelContext& c) {
  return Unary(c, [](float x) { return std::tanh(x); });
}
absl::Status TanhGrad(KernelContext& c) {
  return GradPair(c, [](float dy, float y) { return dy * (1.0f - y * y); });
}
absl::Status Sigmoid(KernelContext& c) {
  return Unary(c, [](float x) { return 1.0f / (1.0f + std::exp(-x)); });
}
absl::Status SigmoidGrad(KernelContext& c) {
  return GradPair(c, [](float dy, float y) { return dy * y * (1.0f - y); });
}
absl::Status LeakyRelu(KernelContext& c) {
  const float alpha = static_cast<float>(c.attrs().Float("alpha", 0.01));
  return Unary(c, [alpha](float x) { return x > 0 || x != x ? x : alpha * x; });
}
absl::Status LeakyReluGrad(KernelContext& c) {
  const float alpha = static_cast<float>(c.attrs().Float("alpha", 0.01));
  return GradPair(c, [alpha](float dy, float x) { return x > 0 ? dy : alpha * dy; });
}
// Bounds: attributes 'min' and 'max', each absent when unbounded.
std::pair<float, float> ClipBounds(const KernelContext& c) {
  return {c.attrs().Has("min") ? static_cast<float>(c.attrs().Float("min"))
                               : -std::numeric_limits<float>::infinity(),
          c.attrs().Has("max") ? static_cast<float>(c.attrs().Float("max"))
                               : std::numeric_limits<float>::infinity()};
}
absl::Status Clip(KernelContext& c) {
  const auto [lo, hi] = ClipBounds(c);
  // NaN stays NaN.
  return Unary(c, [lo, hi](float x) { return x < lo ? lo : x > hi ? hi : x; });
}
absl::Status ClipGrad(KernelContext& c) {
  const auto [lo, hi] = ClipBounds(c);
  return GradPair(c, [lo, hi](float dy, float x) { return x >= lo && x <= hi ? dy : 0.0f; });
}
absl::Status Abs(KernelContext& c) {
  return Unary(c, [](float x) { return std::fabs(x); });
}
absl::Status AbsGrad(KernelContext& c) {
  return GradPair(c, [](float dy, float x) { return x > 0 ? dy : x < 0 ? -dy : 0.0f; });
}
absl::Status Floor(KernelContext& c) {
  return Unary(c, [](float x) { return std::floor(x); });
}
absl::Status Sqrt(KernelContext& c) {
  return Unary(c, [](float x) { return std::sqrt(x); });
}
// No gradient at sqrt(0), where the slope is infinite: sqrt is how exports
// compute norms (torch.norm, F.normalize, cosine similarity, std: the
// square root of a sum of squares), whose PyTorch gradients at a zero
// vector are 0; an infinite slope times the squares' zero gradient would be
// NaN.
absl::Status SqrtGrad(KernelContext& c) {
  return GradPair(
      c, [](float dy, float y) { return dy == 0.0f || y == 0.0f ? 0.0f : dy / (2.0f * y); });
}
absl::Status Exp(KernelContext& c) {
  return Unary(c, [](float x) { return std::exp(x); });
}
absl::Status Log(KernelContext& c) {
  return Unary(c, [](float x) { return std::log(x); });
}
absl::Status Neg(KernelContext& c) {
  return Unary(c, [](float x) { return -x; });
}

absl::Status Identity(KernelContext& c) { return c.SetOutput(0, c.in(0)); }

absl::Status Cast(KernelContext& ctx) {
  const Tensor& in = ctx.in(0);
  ASSIGN_OR_RETURN(Tensor * out, ctx.Output(0));
  if (in.dtype() == out->dtype()) {
    std::memcpy(out->raw(), in.raw(), in.bytes());
  } else if (in.dtype() == DType::kF32) {
    for (int64_t i = 0; i < in.numel(); ++i) out->i64()[i] = static_cast<int64_t>(in.f32()[i]);
  } else {
    for (int64_t i = 0; i < in.numel(); ++i) out->f32()[i] = static_cast<float>(in.i64()[i]);
  }
  return absl::OkStatus();
}

absl::Status Expand(KernelContext& ctx) {
  ASSIGN_OR_RETURN(Tensor * out, ctx.Output(0));
  const float zero = 0.0f;
  BroadcastBinary(ctx.in(0).f32(), ctx.in(0).dims(), &zero, {}, out->f32(), out->dims(),
                  [](float a, float) { return a; });
  return absl::OkStatus();
}

absl::Status Zeros(KernelContext& ctx) {
  ASSIGN_OR_RETURN(Tensor * out, ctx.Output(0));
  out->SetZero();
  return absl::OkStatus();
}

// a·B + c per element, B the step's global batch.
absl::Status BatchAffine(KernelContext& ctx) {
  ASSIGN_OR_RETURN(Tensor * out, ctx.Output(0));
  const std::vector<double> a = ctx.attrs().Floats("a"), c = ctx.attrs().Floats("c");
  if (static_cast<int64_t>(a.size()) != out->numel() || a.size() != c.size()) {
    return absl::InvalidArgumentError("BatchAffine: a and c do not match the output");
  }
  const double b = static_cast<double>(ctx.global_batch);
  for (int64_t i = 0; i < out->numel(); ++i) {
    const double v = a[i] * b + c[i];
    if (out->dtype() == DType::kI64) {
      out->i64()[i] = std::llround(v);
    } else {
      out->f32()[i] = static_cast<float>(v);
    }
  }
  return absl::OkStatus();
}

QUILT_REGISTER_KERNEL("cpu", "BatchAffine", BatchAffine);
QUILT_REGISTER_KERNEL("cpu", "Add", Add);
QUILT_REGISTER_KERNEL("cpu", "Sub", Sub);
QUILT_REGISTER_KERNEL("cpu", "Mul", Mul);
QUILT_REGISTER_KERNEL("cpu", "Div", Div);
QUILT_REGISTER_KERNEL("cpu", "Pow", Pow);
QUILT_REGISTER_KERNEL("cpu", "PowGrad", PowGrad);
QUILT_REGISTER_KERNEL("cpu", "Sum", Sum);
QUILT_REGISTER_KERNEL("cpu", "SumToShape", SumToShape);
QUILT_REGISTER_KERNEL("cpu", "Expand", Expand);
QUILT_REGISTER_KERNEL("cpu", "Relu", Relu);
QUILT_REGISTER_KERNEL("cpu", "ReluGrad", ReluGrad);
QUILT_REGISTER_KERNEL("cpu", "Gelu", Gelu);
QUILT_REGISTER_KERNEL("cpu", "GeluGrad", GeluGrad);
QUILT_REGISTER_KERNEL("cpu", "Erf", Erf);
QUILT_REGISTER_KERNEL("cpu", "ErfGrad", ErfGrad);
QUILT_REGISTER_KERNEL("cpu", "Tanh", Tanh);
QUILT_REGISTER_KERNEL("cpu", "TanhGrad", TanhGrad);
QUILT_REGISTER_KERNEL("cpu", "Sigmoid", Sigmoid);
QUILT_REGISTER_KERNEL("cpu", "SigmoidGrad", SigmoidGrad);
QUILT_REGISTER_KERNEL("cpu", "LeakyRelu", LeakyRelu);
QUILT_REGISTER_KERNEL("cpu", "LeakyReluGrad", LeakyReluGrad);
QUILT_REGISTER_KERNEL("cpu", "Clip", Clip);
QUILT_REGISTER_KERNEL("cpu", "ClipGrad", ClipGrad);
QUILT_REGISTER_KERNEL("cpu", "Abs", Abs);
QUILT_REGISTER_KERNEL("cpu", "Floor", Floor);
QUILT_REGISTER_KERNEL("cpu", "CompareMask", CompareMask);
QUILT_REGISTER_KERNEL("cpu", "AbsGrad", AbsGrad);
QUILT_REGISTER_KERNEL("cpu", "Sqrt", Sqrt);
QUILT_REGISTER_KERNEL("cpu", "SqrtGrad", SqrtGrad);
QUILT_REGISTER_KERNEL("cpu", "Exp", Exp);
QUILT_REGISTER_KERNEL("cpu", "Log", Log);
QUILT_REGISTER_KERNEL("cpu", "Neg", Neg);
QUILT_REGISTER_KERNEL("cpu", "Identity", Identity);
QUILT_REGISTER_KERNEL("cpu", "StopGradient", Identity);
QUILT_REGISTER_KERNEL("cpu", "Cast", Cast);
QUILT_REGISTER_KERNEL("cpu", "Zeros", Zeros);

}  // namespace
}  // namespace quilt::cpu
