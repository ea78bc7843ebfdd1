#include "src/graph/zoo/layers.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "src/common/status.h"

namespace quilt::zoo {

uint64_t Layers::SeedFor(const std::string& name) const {
  uint64_t h = 1469598103934665603ULL ^ seed_;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ULL;
  return h;
}

InitializerSpec Layers::Uniform(double bound, const std::string& name) const {
  InitializerSpec s;
  s.kind = InitializerSpec::Kind::kUniform;
  s.low = -bound;
  s.high = bound;
  s.seed = SeedFor(name);
  return s;
}

absl::StatusOr<std::string> Layers::Param(const std::string& name, std::vector<int64_t> dims,
                                          InitializerSpec init) {
  if (init.seed == 0) init.seed = SeedFor(name);
  return b_.AddParameter(name, Shape::Fixed(dims), init);
}

absl::StatusOr<std::string> Layers::Input(const std::string& name, DType dtype,
                                          std::vector<int64_t> per_sample_dims) {
  std::vector<Dim> dims = {Dim::Batch()};
  for (int64_t d : per_sample_dims) dims.push_back(Dim::Fixed(d));
  return b_.AddInput(name, dtype, Shape(std::move(dims)));
}

absl::StatusOr<std::string> Layers::Op(const std::string& type, std::vector<std::string> in,
                                       Attrs attrs, const std::string& hint) {
  return b_.Add(type, std::move(in), std::move(attrs), hint);
}

absl::StatusOr<std::string> Layers::Linear(const std::string& name, const std::string& x,
                                           int64_t in, int64_t out, bool bias) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  ASSIGN_OR_RETURN(std::string w, b_.AddParameter(name + ".weight", Shape::Fixed({in, out}),
                                                  Uniform(bound, name + ".weight")));
  ASSIGN_OR_RETURN(std::string y, b_.Add("MatMul", {x, w}, {}, name));
  if (!bias) return y;
  ASSIGN_OR_RETURN(std::string bv, b_.AddParameter(name + ".bias", Shape::Fixed({out}),
                                                   Uniform(bound, name + ".bias")));
  return b_.Add("Add", {y, bv}, {}, name + "_bias");
}

absl::StatusOr<std::string> Layers::Conv(const std::string& name, const std::string& x, int64_t in,
                                         int64_t out, int64_t kh, int64_t kw, int64_t stride,
                                         std::vector<int64_t> pads, bool bias, int64_t group) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in / group * kh * kw));
  ASSIGN_OR_RETURN(std::string w,
                   b_.AddParameter(name + ".weight", Shape::Fixed({out, in / group, kh, kw}),
                                   Uniform(bound, name + ".weight")));
  std::vector<std::string> ins = {x, w};
  if (bias) {
    ASSIGN_OR_RETURN(std::string bv, b_.AddParameter(name + ".bias", Shape::Fixed({out}),
                                                     Uniform(bound, name + ".bias")));
    ins.push_back(bv);
  }
  Attrs a;
  a.SetInts("kernel_shape", {kh, kw});
  a.SetInts("strides", {stride, stride});
  a.SetInts("pads", pads);
  a.SetInt("group", group);
  return b_.Add("Conv", ins, std::move(a), name);
}

absl::StatusOr<std::string> Layers::BatchNorm(const std::string& name, const std::string& x,
                                              int64_t c) {
  InitializerSpec ones, zeros;
  ones.kind = InitializerSpec::Kind::kOnes;
  zeros.kind = InitializerSpec::Kind::kZeros;
  ASSIGN_OR_RETURN(std::string scale, b_.AddParameter(name + ".weight", Shape::Fixed({c}), ones));
  ASSIGN_OR_RETURN(std::string bias, b_.AddParameter(name + ".bias", Shape::Fixed({c}), zeros));
  ASSIGN_OR_RETURN(std::string rm,
                   b_.AddParameter(name + ".running_mean", Shape::Fixed({c}), zeros));
  ASSIGN_OR_RETURN(std::string rv, b_.AddParameter(name + ".running_var", Shape::Fixed({c}), ones));
  for (ParameterSpec& p : b_.graph().parameters) {
    if (p.tensor == rm || p.tensor == rv) p.frozen = true;
  }
  Attrs a;
  a.SetFloat("epsilon", 1e-5);
  a.SetFloat("momentum", 0.9);
  a.SetInt("shifted", 1);  // statistics about the running mean
  ASSIGN_OR_RETURN(std::vector<std::string> stats,
                   b_.AddOp("BatchNormStats", {x, rm}, {}, 2, name + ".stats"));
  ASSIGN_OR_RETURN(std::vector<std::string> outs,
                   b_.AddOp("BatchNormApply", {x, stats[0], stats[1], scale, bias, rm, rv},
                            std::move(a), 3, name));
  return outs[0];
}

absl::StatusOr<std::string> Layers::LayerNorm(const std::string& name, const std::string& x,
                                              int64_t dim) {
  InitializerSpec ones, zeros;
  ones.kind = InitializerSpec::Kind::kOnes;
  zeros.kind = InitializerSpec::Kind::kZeros;
  ASSIGN_OR_RETURN(std::string scale, b_.AddParameter(name + ".weight", Shape::Fixed({dim}), ones));
  ASSIGN_OR_RETURN(std::string bias, b_.AddParameter(name + ".bias", Shape::Fixed({dim}), zeros));
  Attrs a;
  a.SetInt("axis", -1);
  a.SetFloat("epsilon", 1e-5);
  ASSIGN_OR_RETURN(std::vector<std::string> outs,
                   b_.AddOp("LayerNormalization", {x, scale, bias}, std::move(a), 3, name));
  return outs[0];
}

absl::StatusOr<std::string> Layers::Embedding(const std::string& name, const std::string& ids,
                                              int64_t vocab, int64_t dim) {
  InitializerSpec n;
  n.kind = InitializerSpec::Kind::kNormal;
  n.stddev = 0.02;
  ASSIGN_OR_RETURN(std::string w, Param(name + ".weight", {vocab, dim}, n));
  return b_.Add("Gather", {w, ids}, {}, name);
}

absl::StatusOr<std::string> Layers::Gelu(const std::string& x, bool tanh) {
  Attrs a;
  if (tanh) a.SetString("approximate", "tanh");
  return b_.Add("Gelu", {x}, std::move(a));
}

absl::StatusOr<std::string> Layers::MaxPool(const std::string& x, int64_t k, int64_t s,
                                            std::vector<int64_t> pads) {
  Attrs a;
  a.SetInts("kernel_shape", {k, k});
  a.SetInts("strides", {s, s});
  a.SetInts("pads", pads);
  return b_.Add("MaxPool", {x}, std::move(a));
}

absl::StatusOr<std::string> Layers::AvgPool(const std::string& x, int64_t k, int64_t s,
                                            std::vector<int64_t> pads) {
  Attrs a;
  a.SetInts("kernel_shape", {k, k});
  a.SetInts("strides", {s, s});
  a.SetInts("pads", pads);
  return b_.Add("AveragePool", {x}, std::move(a));
}

absl::StatusOr<std::string> Layers::Reshape(const std::string& x, std::vector<int64_t> shape) {
  Attrs a;
  a.SetInts("shape", std::move(shape));
  return b_.Add("Reshape", {x}, std::move(a));
}

absl::StatusOr<std::string> Layers::Transpose(const std::string& x, std::vector<int64_t> perm) {
  Attrs a;
  a.SetInts("perm", std::move(perm));
  return b_.Add("Transpose", {x}, std::move(a));
}

absl::StatusOr<std::string> Layers::Attention(const std::string& name, const std::string& q_in,
                                              const std::string& kv_in, int64_t d, int64_t heads,
                                              int64_t s_q, int64_t s_kv, const std::string& mask) {
  const int64_t dh = d / heads;
  auto heads_first = [&](const std::string& x, int64_t s) -> absl::StatusOr<std::string> {
    ASSIGN_OR_RETURN(std::string r, Reshape(x, {0, s, heads, dh}));
    return Transpose(r, {0, 2, 1, 3});  // [B, H, S, Dh]
  };
  ASSIGN_OR_RETURN(std::string q, Linear(name + ".q", q_in, d, d));
  ASSIGN_OR_RETURN(std::string k, Linear(name + ".k", kv_in, d, d));
  ASSIGN_OR_RETURN(std::string v, Linear(name + ".v", kv_in, d, d));
  ASSIGN_OR_RETURN(q, heads_first(q, s_q));
  ASSIGN_OR_RETURN(k, heads_first(k, s_kv));
  ASSIGN_OR_RETURN(v, heads_first(v, s_kv));
  Attrs tb;
  tb.SetInt("trans_b", 1);
  ASSIGN_OR_RETURN(std::string scores, b_.Add("MatMul", {q, k}, std::move(tb), name + ".scores"));
  ASSIGN_OR_RETURN(
      std::string scale,
      b_.AddConstant(name + ".scale",
                     Tensor::ScalarF32(static_cast<float>(1.0 / std::sqrt(double(dh))))));
  ASSIGN_OR_RETURN(scores, b_.Add("Mul", {scores, scale}));
  if (!mask.empty()) {
    ASSIGN_OR_RETURN(scores, b_.Add("Add", {scores, mask}));
  }
  Attrs sm;
  sm.SetInt("axis", -1);
  ASSIGN_OR_RETURN(std::string probs, b_.Add("Softmax", {scores}, std::move(sm)));
  ASSIGN_OR_RETURN(std::string ctx, b_.Add("MatMul", {probs, v}, {}, name + ".context"));
  ASSIGN_OR_RETURN(ctx, Transpose(ctx, {0, 2, 1, 3}));
  ASSIGN_OR_RETURN(ctx, Reshape(ctx, {0, s_q, d}));
  return Linear(name + ".out", ctx, d, d);
}

absl::StatusOr<std::string> Layers::CausalMask(int64_t s) {
  std::vector<float> mask(s * s, 0.0f);
  for (int64_t i = 0; i < s; ++i) {
    for (int64_t j = i + 1; j < s; ++j) mask[i * s + j] = -1e9f;
  }
  return b_.AddConstant("causal_mask", Tensor::FromF32({s, s}, mask));
}

}  // namespace quilt::zoo
