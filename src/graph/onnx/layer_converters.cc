// ONNX converters of activations built from or beside Quilt's element-wise
// ops, and of windowed layers: 1-D and 2-D convolutions and pooling (a
// 1-D window runs as a 2-D one over [N, C, 1, L]) and Resize (nearest by
// whole factors, bilinear).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/graph/onnx/converter_parts.h"

namespace quilt::onnx_import {
namespace {

// A convolution's or pooling's window, 2-D. A 1-D one (Conv1d, MaxPool1d,
// AvgPool1d: X [N, C, L]) runs as a 2-D one over [N, C, 1, L]: its
// attributes get a leading 1 (pads 0).
struct Window {
  std::vector<int64_t> kernel, strides, dilations, pads;
};

std::vector<int64_t> Lift(std::vector<int64_t> v, bool one_d) {
  if (v.empty()) return {1, 1};
  if (one_d && v.size() == 1) return {1, v[0]};
  return v;
}

// `x`: the (2-D) input; `kernel`: the window, before lifting.
absl::StatusOr<Window> WindowOf(ImportContext& ctx, const Node& node, const std::string& x,
                                std::vector<int64_t> kernel, bool one_d) {
  Window w;
  w.kernel = Lift(std::move(kernel), one_d);
  w.strides = Lift(AttrInts(node, "strides"), one_d);
  w.dilations = Lift(AttrInts(node, "dilations"), one_d);
  if (w.kernel.size() != 2 || w.strides.size() != 2 || w.dilations.size() != 2) {
    return absl::InvalidArgumentError("only 1-D and 2-D windows are supported");
  }
  std::vector<int64_t> pads = AttrInts(node, "pads");
  if (one_d && pads.size() == 2) pads = {0, pads[0], 0, pads[1]};
  const std::string auto_pad = AttrString(node, "auto_pad", "NOTSET");
  if (auto_pad == "NOTSET") {
    w.pads = pads.empty() ? std::vector<int64_t>{0, 0, 0, 0} : pads;
    return w;
  }
  w.pads.assign(4, 0);
  if (auto_pad == "VALID") return w;
  ASSIGN_OR_RETURN(TensorType t, ctx.TypeOf(x));
  for (int i = 0; i < 2; ++i) {
    const int64_t in = t.shape.dim(2 + i).value, s = w.strides[i];
    const int64_t out = (in + s - 1) / s;
    const int64_t total =
        std::max<int64_t>(0, (out - 1) * s + (w.kernel[i] - 1) * w.dilations[i] + 1 - in);
    const int64_t small = total / 2, big = total - small;
    w.pads[i] = auto_pad == "SAME_UPPER" ? small : big;
    w.pads[i + 2] = auto_pad == "SAME_UPPER" ? big : small;
  }
  return w;
}

// Inserts (Unsqueeze) or removes (Squeeze) dim 2.
absl::StatusOr<std::string> Dim2(ImportContext& ctx, const std::string& type, const std::string& t,
                                 const std::string& hint) {
  Attrs a;
  a.SetInts("axes", {2});
  return ctx.b().Add(type, {t}, std::move(a), hint);
}

// Upsample (opsets 7–9) and Resize of opset 10: scales are input 1, and
// the coordinates are asymmetric with nearest rounding down (what
// Resize 11+ calls "asymmetric" and "floor").
bool LegacyResize(const ImportContext& ctx, const Node& node) {
  return node.op_type() == "Upsample" || ctx.opset() < 11;
}

int ScalesInput(const ImportContext& ctx, const Node& node) {
  return LegacyResize(ctx, node) ? 1 : 2;
}

std::string Coordinates(const ImportContext& ctx, const Node& node) {
  return AttrString(node, "coordinate_transformation_mode",
                    LegacyResize(ctx, node) ? "asymmetric" : "half_pixel");
}

// Where a Resize (or Upsample) of [N,C,H,W] `in` goes: H and W out, and
// their scales (out / in when given sizes; floor(in · scale) out when given
// scales, as ONNX defines it). Errors: INVALID_ARGUMENT unless constant
// sizes or scales that keep N and C.
struct ResizeTarget {
  int64_t out[2];
  double scale[2];
};
absl::StatusOr<ResizeTarget> TargetOf(ImportContext& ctx, const Node& node, const Shape& in) {
  ResizeTarget r;
  if (const Tensor* z = ctx.ConstantInput(node, 3); z != nullptr && z->numel() == 4) {
    // Sizes: the batch's entry may be the import's batch; N and C stay.
    for (int i = 0; i < 2; ++i) {
      r.out[i] = z->i64()[2 + i];
      r.scale[i] = static_cast<double>(r.out[i]) / static_cast<double>(in.dim(2 + i).value);
    }
    return r;
  }
  const Tensor* s = ctx.ConstantInput(node, ScalesInput(ctx, node));
  if (s == nullptr || s->numel() == 0) {
    return absl::InvalidArgumentError(node.op_type() + " needs constant scales or sizes");
  }
  if (s->numel() != 4 || s->f32()[0] != 1 || s->f32()[1] != 1) {
    return absl::InvalidArgumentError(node.op_type() + " may scale only H and W of [N,C,H,W]");
  }
  for (int i = 0; i < 2; ++i) {
    r.scale[i] = s->f32()[2 + i];
    r.out[i] =
        static_cast<int64_t>(std::floor(static_cast<double>(in.dim(2 + i).value) * r.scale[i]));
  }
  return r;
}

// Bilinear Resize (F.interpolate(mode="bilinear"), either corner
// alignment) of [N,C,H,W] to a constant size or by constant scales.
absl::Status ResizeLinear(ImportContext& ctx, const Node& node) {
  const std::string coords = Coordinates(ctx, node);
  std::string quilt_coords;
  if (coords == "half_pixel" || coords == "pytorch_half_pixel") quilt_coords = "half_pixel";
  if (coords == "align_corners" || coords == "asymmetric") quilt_coords = coords;
  if (quilt_coords.empty()) {
    return absl::InvalidArgumentError("Resize (linear) with coordinate_transformation_mode '" +
                                      coords + "' is not supported");
  }
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  ASSIGN_OR_RETURN(TensorType t, ctx.TypeOf(x));
  if (t.shape.rank() != 4) {
    return absl::InvalidArgumentError("bilinear Resize is supported on [N,C,H,W] inputs only");
  }
  ASSIGN_OR_RETURN(const ResizeTarget target, TargetOf(ctx, node, t.shape));
  const int64_t* out = target.out;
  Attrs a;
  a.SetInt("out_h", out[0]);
  a.SetInt("out_w", out[1]);
  a.SetString("coords", quilt_coords);
  return ctx.Emit(node, "ResizeBilinear", {x}, std::move(a));
}

}  // namespace

absl::Status LeakyRelu(ImportContext& ctx, const Node& node) {
  Attrs a;
  a.SetFloat("alpha", AttrFloat(node, "alpha", 0.01f));
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  return ctx.Emit(node, "LeakyRelu", {x}, std::move(a));
}

// HardSigmoid: clip(alpha·x + beta, 0, 1); HardSwish: x · hardsigmoid(x)
// with alpha 1/6 and beta 1/2 (nn.Hardsigmoid, nn.Hardswish).
absl::Status HardSigmoidLike(ImportContext& ctx, const Node& node) {
  const bool swish = node.op_type() == "HardSwish";
  const float alpha = swish ? 1.0f / 6 : AttrFloat(node, "alpha", 0.2f);
  const float beta = swish ? 0.5f : AttrFloat(node, "beta", 0.5f);
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  ASSIGN_OR_RETURN(std::string a, ScalarConstant(ctx, node.name() + "/alpha", alpha));
  ASSIGN_OR_RETURN(std::string b, ScalarConstant(ctx, node.name() + "/beta", beta));
  ASSIGN_OR_RETURN(std::string ax, ctx.b().Add("Mul", {x, a}, {}, node.name() + "/scaled"));
  ASSIGN_OR_RETURN(std::string axb, ctx.b().Add("Add", {ax, b}, {}, node.name() + "/shifted"));
  Attrs bounds;
  bounds.SetFloat("min", 0);
  bounds.SetFloat("max", 1);
  if (!swish) return ctx.Emit(node, "Clip", {axb}, std::move(bounds));
  ASSIGN_OR_RETURN(std::string gate,
                   ctx.b().Add("Clip", {axb}, std::move(bounds), node.name() + "/gate"));
  return ctx.Emit(node, "Mul", {x, gate}, {});
}

// Max and Min of any number of inputs (torch.maximum, minimum; a clamp by
// a tensor), two at a time: w·a + (1 − w)·b with w = 1 where a wins, ½
// where they tie (where PyTorch splits the gradient evenly), from masks
// nothing trains through: exact for finite values (a constant's ±inf is
// the largest finite float, as 0·inf would be NaN).
absl::Status MaxMin(ImportContext& ctx, const Node& node) {
  const bool max = node.op_type() == "Max";
  const std::string at = node.name().empty() ? node.op_type() : node.name();
  if (node.input_size() == 0) return absl::InvalidArgumentError("no inputs");
  // Of constants (shape arithmetic): folded.
  std::vector<const Tensor*> c;
  for (int i = 0; i < node.input_size(); ++i) {
    const Tensor* t = ctx.ConstantInput(node, i);
    if (t == nullptr || ctx.IsParameterInitializer(node, i) ||
        (t->dtype() != DType::kI64 && t->dtype() != DType::kF32) ||
        (!c.empty() && t->dtype() != c[0]->dtype())) {
      break;
    }
    c.push_back(t);
  }
  std::vector<std::vector<int64_t>> dims;
  for (const Tensor* t : c) dims.push_back(t->dims());
  absl::StatusOr<Broadcast> bc = BroadcastDims(dims);
  if (!c.empty() && static_cast<int>(c.size()) == node.input_size() && bc.ok()) {
    ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(c[0]->dtype(), bc->dims));
    for (int64_t e = 0; e < out.numel(); ++e) {
      for (size_t k = 0; k < c.size(); ++k) {
        const Tensor* t = c[k];
        const int64_t at = bc->from[k][e];
        if (t->dtype() == DType::kI64) {
          const int64_t v = t->i64()[at];
          if (k == 0 || (max ? v > out.i64()[e] : v < out.i64()[e])) out.i64()[e] = v;
        } else {
          const float v = t->f32()[at];
          if (k == 0 || (max ? v > out.f32()[e] : v < out.f32()[e])) out.f32()[e] = v;
        }
      }
    }
    ctx.SetConstant(node.output(0), std::move(out));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::string acc, FiniteData(ctx, node, 0));
  if (node.input_size() == 1) return ctx.Emit(node, "Identity", {acc}, {});
  ASSIGN_OR_RETURN(std::string half, ScalarConstant(ctx, at + "/half", 0.5f));
  ASSIGN_OR_RETURN(std::string one, ScalarConstant(ctx, at + "/one", 1));
  for (int i = 1; i < node.input_size(); ++i) {
    ASSIGN_OR_RETURN(std::string b, FiniteData(ctx, node, i));
    const std::string p = absl::StrCat(at, "/", i, "/");
    auto op = [&](const std::string& t, std::vector<std::string> ins, const std::string& hint,
                  Attrs a = {}) { return ctx.b().Add(t, std::move(ins), std::move(a), p + hint); };
    Attrs wins, ties;
    wins.SetString("mode", max ? "gt" : "lt");
    ties.SetString("mode", "eq");
    ASSIGN_OR_RETURN(std::string w1, op("CompareMask", {acc, b}, "wins", std::move(wins)));
    ASSIGN_OR_RETURN(std::string t, op("CompareMask", {acc, b}, "ties", std::move(ties)));
    ASSIGN_OR_RETURN(std::string th, op("Mul", {t, half}, "half_ties"));
    ASSIGN_OR_RETURN(std::string w, op("Add", {w1, th}, "weight"));
    ASSIGN_OR_RETURN(std::string wa, op("Mul", {w, acc}, "from_a"));
    ASSIGN_OR_RETURN(std::string rest, op("Sub", {one, w}, "rest"));
    ASSIGN_OR_RETURN(std::string wb, op("Mul", {rest, b}, "from_b"));
    if (i + 1 == node.input_size()) return ctx.Emit(node, "Add", {wa, wb}, {});
    ASSIGN_OR_RETURN(acc, op("Add", {wa, wb}, "out"));
  }
  return absl::OkStatus();
}

namespace {

// softplus(x) = relu(x) + log(1 + exp(-|x|)), stably, as its two terms;
// relu and |x| from a mask of x > 0 (no gradient), so that the slope at 0
// is PyTorch's σ(0) = ½.
absl::StatusOr<std::pair<std::string, std::string>> SoftplusParts(ImportContext& ctx,
                                                                  const std::string& x,
                                                                  const std::string& at) {
  auto op = [&](const std::string& t, std::vector<std::string> ins, const std::string& hint,
                Attrs a = {}) {
    return ctx.b().Add(t, std::move(ins), std::move(a), at + "/" + hint);
  };
  ASSIGN_OR_RETURN(std::string zero, ScalarConstant(ctx, at + "/zero", 0));
  Attrs gt;
  gt.SetString("mode", "gt");
  ASSIGN_OR_RETURN(std::string m, op("CompareMask", {x, zero}, "positive", std::move(gt)));
  ASSIGN_OR_RETURN(std::string pos, op("Mul", {x, m}, "pos"));
  ASSIGN_OR_RETURN(std::string two, ScalarConstant(ctx, at + "/two", 2));
  ASSIGN_OR_RETURN(std::string one_m, ScalarConstant(ctx, at + "/one_for_sign", 1));
  ASSIGN_OR_RETURN(std::string m2, op("Mul", {m, two}, "two_m"));
  ASSIGN_OR_RETURN(std::string sign, op("Sub", {m2, one_m}, "sign"));
  ASSIGN_OR_RETURN(std::string mag, op("Mul", {x, sign}, "abs"));
  ASSIGN_OR_RETURN(std::string neg, op("Neg", {mag}, "neg_abs"));
  ASSIGN_OR_RETURN(std::string e, op("Exp", {neg}, "exp"));
  ASSIGN_OR_RETURN(std::string one, ScalarConstant(ctx, at + "/one", 1));
  ASSIGN_OR_RETURN(std::string e1, op("Add", {e, one}, "exp_plus_one"));
  ASSIGN_OR_RETURN(std::string l, op("Log", {e1}, "log"));
  return std::make_pair(pos, l);
}

// Whether `tensor` is a float32 graph constant holding the single value 1.
bool IsConstantOne(const Graph& g, const std::string& tensor) {
  auto c = g.constants.find(tensor);
  return c != g.constants.end() && c->second.dtype() == DType::kF32 && c->second.numel() == 1 &&
         c->second.f32()[0] == 1.0f;
}

}  // namespace

absl::Status Log(ImportContext& ctx, const Node& node) {
  if (FoldUnary(ctx, node)) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  const Graph& g = ctx.graph();
  const std::map<std::string, int> producers = g.Producers();
  // The op that writes a tensor (nullptr for inputs, parameters, constants).
  auto producer_of = [&](const std::string& t) -> const Op* {
    auto it = producers.find(t);
    return it == producers.end() ? nullptr : &g.ops[it->second];
  };
  const Op* p = producer_of(x);
  std::string z;
  bool of_one_minus = false;
  if (p != nullptr && p->type == "Sigmoid") {
    z = p->inputs[0];
  } else if (p != nullptr && p->type == "Sub" && p->inputs.size() == 2 &&
             IsConstantOne(g, p->inputs[0])) {
    const Op* s = producer_of(p->inputs[1]);
    if (s != nullptr && s->type == "Sigmoid") {
      z = s->inputs[0];
      of_one_minus = true;
    }
  }
  if (z.empty()) return ctx.Emit(node, "Log", {x}, {});
  // log σ(z) = −softplus(−z); log(1 − σ(z)) = log σ(−z) = −softplus(z).
  const std::string at = (node.name().empty() ? std::string("Log") : node.name()) + "/stable";
  std::string arg = z;
  if (!of_one_minus) {
    ASSIGN_OR_RETURN(arg, ctx.b().Add("Neg", {z}, {}, at + "/neg_z"));
  }
  ASSIGN_OR_RETURN(auto parts, SoftplusParts(ctx, arg, at));
  ASSIGN_OR_RETURN(std::string sp,
                   ctx.b().Add("Add", {parts.first, parts.second}, {}, at + "/softplus"));
  return ctx.Emit(node, "Neg", {sp}, {});
}

// Activations built from others (a stable softplus: relu(x) +
// log(1 + exp(-|x|)); exp of min(x, 0) where only x <= 0 is kept):
// Softplus, Mish (x·tanh(softplus x)), Elu, Selu, Celu and PRelu
// (relu(x) + slope·min(x, 0), the slope a parameter broadcast over x);
// relu and |x| as x times a mask of x > 0, so that the slopes at 0 are
// PyTorch's.
absl::Status Composite(ImportContext& ctx, const Node& node) {
  const std::string& type = node.op_type();
  const std::string at = node.name().empty() ? type : node.name();
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  auto op = [&](const std::string& t, std::vector<std::string> ins, const std::string& hint,
                Attrs a = {}) {
    return ctx.b().Add(t, std::move(ins), std::move(a), at + "/" + hint);
  };
  auto scalar = [&](const std::string& what, float v) {
    return ScalarConstant(ctx, at + "/" + what, v);
  };
  // x > 0 as 0s and 1s (no gradient): relu(x) = x·m and |x| = x·(2m - 1)
  // take PyTorch's slopes at 0 (softplus' σ(0) = ½, PReLU's slope).
  auto positive = [&]() -> absl::StatusOr<std::string> {
    ASSIGN_OR_RETURN(std::string zero, scalar("zero", 0));
    Attrs gt;
    gt.SetString("mode", "gt");
    return op("CompareMask", {x, zero}, "positive", std::move(gt));
  };
  if (type == "Softplus" || type == "Mish") {
    ASSIGN_OR_RETURN(auto parts, SoftplusParts(ctx, x, at));
    const auto& [pos, l] = parts;
    if (type == "Softplus") return ctx.Emit(node, "Add", {pos, l}, {});
    ASSIGN_OR_RETURN(std::string sp, op("Add", {pos, l}, "softplus"));
    ASSIGN_OR_RETURN(std::string t, op("Tanh", {sp}, "tanh"));
    return ctx.Emit(node, "Mul", {x, t}, {});
  }
  if (type == "PRelu") {
    // x·m + slope·(x - x·m).
    ASSIGN_OR_RETURN(std::string slope, ctx.Data(node, 1));
    ASSIGN_OR_RETURN(std::string m, positive());
    ASSIGN_OR_RETURN(std::string pos, op("Mul", {x, m}, "pos"));
    ASSIGN_OR_RETURN(std::string neg, op("Sub", {x, pos}, "neg_part"));
    ASSIGN_OR_RETURN(std::string scaled, op("Mul", {slope, neg}, "scaled"));
    return ctx.Emit(node, "Add", {pos, scaled}, {});
  }
  // Elu, Selu, Celu: scale · (max(x, 0) + min(alpha·(exp(x / a) - 1), 0)),
  // with a = alpha for Celu and 1 otherwise.
  const bool selu = type == "Selu", celu = type == "Celu";
  const float alpha = AttrFloat(node, "alpha", selu ? 1.67326319f : 1.0f);
  const float gamma = selu ? AttrFloat(node, "gamma", 1.05070102f) : 1.0f;
  ASSIGN_OR_RETURN(std::string pos, op("Relu", {x}, "pos"));
  Attrs upto0;
  upto0.SetFloat("max", 0);
  ASSIGN_OR_RETURN(std::string low, op("Clip", {x}, "nonpositive", std::move(upto0)));
  std::string arg = low;
  if (celu && alpha != 1.0f) {
    ASSIGN_OR_RETURN(std::string inv, scalar("inv_alpha", 1.0f / alpha));
    ASSIGN_OR_RETURN(arg, op("Mul", {low, inv}, "scaled_x"));
  }
  ASSIGN_OR_RETURN(std::string e, op("Exp", {arg}, "exp"));
  ASSIGN_OR_RETURN(std::string one, scalar("one", 1));
  ASSIGN_OR_RETURN(std::string em1, op("Sub", {e, one}, "expm1"));
  ASSIGN_OR_RETURN(std::string a, scalar("alpha", alpha));
  ASSIGN_OR_RETURN(std::string neg, op("Mul", {a, em1}, "negative_part"));
  if (!selu) return ctx.Emit(node, "Add", {pos, neg}, {});
  ASSIGN_OR_RETURN(std::string sum, op("Add", {pos, neg}, "elu"));
  ASSIGN_OR_RETURN(std::string g, scalar("gamma", gamma));
  return ctx.Emit(node, "Mul", {g, sum}, {});
}

// Clip's bounds are inputs 1 and 2 (each optional), constants; attributes
// before opset 11.
absl::Status Clip(ImportContext& ctx, const Node& node) {
  Attrs a;
  const char* names[] = {"", "min", "max"};
  for (int i : {1, 2}) {
    if (FindAttr(node, names[i]) != nullptr) a.SetFloat(names[i], AttrFloat(node, names[i], 0));
    if (!ctx.HasInput(node, i)) continue;
    const Tensor* c = ctx.ConstantInput(node, i);
    if (c == nullptr || c->numel() != 1 || ctx.IsParameterInitializer(node, i)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Clip's ", names[i], " must be a constant scalar"));
    }
    a.SetFloat(names[i], c->dtype() == DType::kF32 ? c->f32()[0] : c->i64()[0]);
  }
  const float lo = a.Float("min", -std::numeric_limits<float>::infinity());
  const float hi = a.Float("max", std::numeric_limits<float>::infinity());
  if (const Tensor* c = ctx.ConstantInput(node, 0);
      c != nullptr && !ctx.IsParameterInitializer(node, 0) &&
      (c->dtype() == DType::kF32 || c->dtype() == DType::kI64)) {
    // Of a constant (a clipped distance matrix from positions): folded.
    Tensor out = c->Clone();
    for (int64_t i = 0; i < out.numel(); ++i) {
      if (c->dtype() == DType::kF32) {
        out.f32()[i] = std::min(std::max(c->f32()[i], lo), hi);
      } else {
        const double v =
            std::min(std::max(static_cast<double>(c->i64()[i]), static_cast<double>(lo)),
                     static_cast<double>(hi));
        out.i64()[i] = static_cast<int64_t>(v);
      }
    }
    ctx.SetConstant(node.output(0), std::move(out));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  ASSIGN_OR_RETURN(TensorType xt, ctx.TypeOf(x));
  if (xt.dtype == DType::kI64) return EmitInFloat(ctx, node, "Clip", {x}, std::move(a));
  return ctx.Emit(node, "Clip", {x}, std::move(a));
}

absl::Status Conv(ImportContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  ASSIGN_OR_RETURN(std::string w, ctx.Data(node, 1));
  ASSIGN_OR_RETURN(TensorType wt, ctx.TypeOf(w));
  const bool one_d = wt.shape.rank() == 3;
  if (wt.shape.rank() != 4 && !one_d) {
    return absl::InvalidArgumentError("only 1-D and 2-D convolutions are supported");
  }
  std::vector<int64_t> kernel = AttrInts(node, "kernel_shape");
  if (kernel.empty()) {
    for (int i = 2; i < wt.shape.rank(); ++i) kernel.push_back(wt.shape.dim(i).value);
  }
  if (one_d) {
    ASSIGN_OR_RETURN(x, Dim2(ctx, "Unsqueeze", x, node.name() + "/x2d"));
    ASSIGN_OR_RETURN(w, Dim2(ctx, "Unsqueeze", w, node.name() + "/w2d"));
  }
  ASSIGN_OR_RETURN(Window win, WindowOf(ctx, node, x, kernel, one_d));
  Attrs a;
  a.SetInts("kernel_shape", win.kernel);
  a.SetInts("strides", win.strides);
  a.SetInts("dilations", win.dilations);
  a.SetInts("pads", win.pads);
  a.SetInt("group", AttrInt(node, "group", 1));
  std::vector<std::string> ins = {x, w};
  if (ctx.HasInput(node, 2)) {
    ASSIGN_OR_RETURN(std::string b, ctx.Data(node, 2));
    ins.push_back(b);
  }
  if (!one_d) return ctx.Emit(node, "Conv", ins, std::move(a));
  ASSIGN_OR_RETURN(std::string y, ctx.b().Add("Conv", ins, std::move(a), node.name() + "/2d"));
  Attrs axes;
  axes.SetInts("axes", {2});
  return ctx.Emit(node, "Squeeze", {y}, std::move(axes));
}

// ConvTranspose (nn.ConvTranspose2d) is the input gradient of the
// convolution whose weight it has ([C_in, C_out / group, kh, kw]): a
// ConvGradInput of X with W, to the output size ONNX defines, then the
// bias over channels. A 1-D one (nn.ConvTranspose1d) runs as a 2-D one
// over [N, C, 1, L], as Conv does.
absl::Status ConvTranspose(ImportContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  ASSIGN_OR_RETURN(std::string w, ctx.Data(node, 1));
  ASSIGN_OR_RETURN(TensorType xt, ctx.TypeOf(x));
  ASSIGN_OR_RETURN(TensorType wt, ctx.TypeOf(w));
  const bool one_d = xt.shape.rank() == 3 && wt.shape.rank() == 3;
  if (one_d) {
    ASSIGN_OR_RETURN(x, Dim2(ctx, "Unsqueeze", x, node.name() + "/x2d"));
    ASSIGN_OR_RETURN(w, Dim2(ctx, "Unsqueeze", w, node.name() + "/w2d"));
    ASSIGN_OR_RETURN(xt, ctx.TypeOf(x));
    ASSIGN_OR_RETURN(wt, ctx.TypeOf(w));
  }
  if (xt.shape.rank() != 4 || wt.shape.rank() != 4) {
    return absl::InvalidArgumentError("only 1-D and 2-D transposed convolutions are supported");
  }
  const std::string auto_pad = AttrString(node, "auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID") {
    return absl::InvalidArgumentError("ConvTranspose with auto_pad " + auto_pad +
                                      " is not supported (explicit pads are)");
  }
  const int64_t group = AttrInt(node, "group", 1);
  const std::vector<int64_t> kernel = {wt.shape.dim(2).value, wt.shape.dim(3).value};
  std::vector<int64_t> strides = Lift(AttrInts(node, "strides"), one_d);
  std::vector<int64_t> dil = Lift(AttrInts(node, "dilations"), one_d);
  std::vector<int64_t> pads = AttrInts(node, "pads"), extra = AttrInts(node, "output_padding");
  std::vector<int64_t> given = AttrInts(node, "output_shape");
  if (one_d && pads.size() == 2) pads = {0, pads[0], 0, pads[1]};
  if (one_d && extra.size() == 1) extra = {0, extra[0]};
  if (one_d && given.size() == 1) given = {1, given[0]};
  if (pads.empty() || auto_pad == "VALID") pads = {0, 0, 0, 0};
  if (extra.empty()) extra = {0, 0};
  if (strides.size() != 2 || dil.size() != 2 || pads.size() != 4 || extra.size() != 2) {
    return absl::InvalidArgumentError(
        "ConvTranspose: strides, dilations, pads or output_padding "
        "do not describe a 2-D window");
  }
  std::vector<int64_t> out(2);
  for (int i = 0; i < 2; ++i) {
    out[i] = given.size() >= 2 ? given[given.size() - 2 + i]
                               : strides[i] * (xt.shape.dim(2 + i).value - 1) + extra[i] +
                                     (kernel[i] - 1) * dil[i] + 1 - pads[i] - pads[i + 2];
    if (extra[i] < 0 || extra[i] >= strides[i]) {
      return absl::InvalidArgumentError(
          "ConvTranspose: an output_padding not smaller than the stride is not supported");
    }
    if (out[i] < 1) return absl::InvalidArgumentError("ConvTranspose: the output would be empty");
  }
  Attrs a;
  a.SetInts("kernel_shape", kernel);
  a.SetInts("strides", strides);
  a.SetInts("dilations", dil);
  a.SetInts("pads", pads);
  a.SetInt("group", group);
  const int64_t channels = wt.shape.dim(1).value * group;
  EncodeShape(
      &a, "input_shape",
      Shape({xt.shape.dim(0), Dim::Fixed(channels), Dim::Fixed(out[0]), Dim::Fixed(out[1])}));
  if (!ctx.HasInput(node, 2) && !one_d) {
    return ctx.Emit(node, "ConvGradInput", {x, w}, std::move(a));
  }
  ASSIGN_OR_RETURN(std::string y,
                   ctx.b().Add("ConvGradInput", {x, w}, std::move(a), node.name() + "/unbiased"));
  if (ctx.HasInput(node, 2)) {
    ASSIGN_OR_RETURN(std::string b, ctx.Data(node, 2));
    ASSIGN_OR_RETURN(std::string b3, ReshapeTo(ctx, b, {channels, 1, 1}, node.name() + "/bias"));
    if (!one_d) return ctx.Emit(node, "Add", {y, b3}, {});
    ASSIGN_OR_RETURN(y, ctx.b().Add("Add", {y, b3}, {}, node.name() + "/biased"));
  }
  Attrs axes;
  axes.SetInts("axes", {2});
  return ctx.Emit(node, "Squeeze", {y}, std::move(axes));
}

absl::Status Pool(ImportContext& ctx, const Node& node) {
  if (node.output_size() > 1 && !node.output(1).empty()) {
    return absl::InvalidArgumentError("MaxPool's Indices output is not supported");
  }
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  const std::vector<int64_t> kernel = AttrInts(node, "kernel_shape");
  const bool one_d = kernel.size() == 1;
  if (kernel.size() != 2 && !one_d) {
    return absl::InvalidArgumentError("only 1-D and 2-D pooling is supported");
  }
  if (one_d) {
    ASSIGN_OR_RETURN(x, Dim2(ctx, "Unsqueeze", x, node.name() + "/x2d"));
  }
  ASSIGN_OR_RETURN(Window win, WindowOf(ctx, node, x, kernel, one_d));
  Attrs a;
  a.SetInts("kernel_shape", win.kernel);
  a.SetInts("strides", win.strides);
  if (!AttrInts(node, "dilations").empty()) a.SetInts("dilations", win.dilations);
  a.SetInts("pads", win.pads);
  a.SetInt("ceil_mode", AttrInt(node, "ceil_mode", 0));
  if (node.op_type() == "AveragePool") {
    a.SetInt("count_include_pad", AttrInt(node, "count_include_pad", 0));
  }
  if (!one_d) return ctx.Emit(node, node.op_type(), {x}, std::move(a), 1, 1);
  ASSIGN_OR_RETURN(std::vector<std::string> y,
                   ctx.b().AddOp(node.op_type(), {x}, std::move(a), 1, node.name() + "/2d"));
  Attrs axes;
  axes.SetInts("axes", {2});
  return ctx.Emit(node, "Squeeze", {y[0]}, std::move(axes), 1, 1);
}

absl::Status Resize(ImportContext& ctx, const Node& node) {
  const std::string mode = AttrString(node, "mode", "nearest");
  // Opset 18's options, where they change the result.
  if (AttrInt(node, "antialias", 0) != 0) {
    return absl::InvalidArgumentError("Resize with antialias is not supported");
  }
  if (!AttrInts(node, "axes").empty()) {
    return absl::InvalidArgumentError("Resize over listed axes is not supported");
  }
  if (const std::string policy = AttrString(node, "keep_aspect_ratio_policy", "stretch");
      policy != "stretch") {
    return absl::InvalidArgumentError("Resize keep_aspect_ratio_policy '" + policy +
                                      "' is not supported");
  }
  if (mode == "linear" || mode == "bilinear") return ResizeLinear(ctx, node);
  if (mode != "nearest") {
    return absl::InvalidArgumentError(node.op_type() + " mode '" + mode +
                                      "' is not supported (nearest and bilinear are)");
  }
  const std::string coords = Coordinates(ctx, node);
  const std::string rounding =
      AttrString(node, "nearest_mode", LegacyResize(ctx, node) ? "floor" : "round_prefer_floor");
  const bool floor_of_ratio =
      (coords == "asymmetric" && rounding == "floor") ||
      ((coords == "half_pixel" || coords == "pytorch_half_pixel") &&
       (rounding == "round_prefer_floor" || rounding == "round_prefer_ceil"));
  if (!floor_of_ratio) {
    return absl::InvalidArgumentError("Resize with coordinate_transformation_mode '" + coords +
                                      "' and nearest_mode '" + rounding + "' is not supported");
  }
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  ASSIGN_OR_RETURN(TensorType t, ctx.TypeOf(x));
  if (t.shape.rank() != 4) {
    return absl::InvalidArgumentError("Resize is supported on [N,C,H,W] inputs only");
  }
  ASSIGN_OR_RETURN(const ResizeTarget target, TargetOf(ctx, node, t.shape));
  const double* scales = target.scale;
  if (scales[0] <= 1 && scales[1] <= 1 && (scales[0] < 1 || scales[1] < 1)) {
    // Down by whole factors k (F.interpolate(scale_factor=1/k)): every
    // k-th row and column from the one the coordinates and rounding pick
    // (0 when asymmetric; half_pixel: k·i + (k − 1)/2, a half rounded as
    // nearest_mode says), a strided Slice.
    Attrs a;
    std::vector<int64_t> starts, ends, axes, steps;
    for (int i = 0; i < 2; ++i) {
      const double inv = 1.0 / scales[i];
      const int64_t k = std::llround(inv);
      if (k < 1 || std::fabs(inv - static_cast<double>(k)) > 1e-6) {
        return absl::InvalidArgumentError(
            absl::StrCat("Resize by ", scales[i],
                         " is not supported (whole factors up, and down by 1/k for whole k, are)"));
      }
      const int64_t out = target.out[i];
      if (out < 1) return absl::InvalidArgumentError("Resize: the output would be empty");
      int64_t first = 0;
      if (coords != "asymmetric" && !(coords == "pytorch_half_pixel" && out == 1)) {
        first = k % 2 == 1 ? (k - 1) / 2 : (rounding == "round_prefer_ceil" ? k / 2 : k / 2 - 1);
      }
      starts.push_back(first);
      ends.push_back(first + (out - 1) * k + 1);
      axes.push_back(2 + i);
      steps.push_back(k);
    }
    a.SetInts("starts", starts);
    a.SetInts("ends", ends);
    a.SetInts("axes", axes);
    a.SetInts("steps", steps);
    return ctx.Emit(node, "Slice", {x}, std::move(a));
  }
  std::vector<int64_t> whole;
  for (int i = 0; i < 2; ++i) {
    if (scales[i] < 1 || scales[i] != std::floor(scales[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("Resize by ", scales[i],
                       " is not supported (whole factors up, and down by 1/k for whole k, are)"));
    }
    whole.push_back(static_cast<int64_t>(scales[i]));
  }
  Attrs a;
  a.SetInts("scales", whole);
  return ctx.Emit(node, "Upsample", {x}, std::move(a));
}

}  // namespace quilt::onnx_import
