// ONNX LSTM, GRU and RNN (nn.LSTM, nn.GRU, nn.RNN with tanh or relu: one
// or two directions, the layers exported one node each) unrolled over
// their fixed sequence length into Quilt ops: the input projection of
// every step at once (a MatMul of X [T, B, I]), then per step the
// recurrent MatMul, the gates (Split, Sigmoid, Tanh) and the state update.
// Gate orders are ONNX's (LSTM: i, o, f, c; GRU: z, r, h, with the reset
// gate applied after the recurrent product: linear_before_reset = 1, as
// PyTorch exports). Refused: variable sequence lengths, peepholes,
// clipping, other activations, layout 1.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/graph/onnx/converter_parts.h"

namespace quilt::onnx_import {
namespace {

class Unroller {
 public:
  Unroller(ImportContext& ctx, const Node& node)
      : ctx_(ctx), at_(node.name().empty() ? node.op_type() : node.name()) {}

  absl::StatusOr<std::string> Op(const std::string& type, std::vector<std::string> ins,
                                 Attrs a = {}) {
    return ctx_.b().Add(type, std::move(ins), std::move(a), absl::StrCat(at_, "/", type, n_++));
  }
  // x[from:to] along `axis`, that axis dropped when `squeeze`.
  absl::StatusOr<std::string> Take(const std::string& x, int64_t axis, int64_t from, int64_t to,
                                   bool squeeze) {
    Attrs a;
    a.SetInts("starts", {from});
    a.SetInts("ends", {to});
    a.SetInts("axes", {axis});
    ASSIGN_OR_RETURN(std::string s, Op("Slice", {x}, std::move(a)));
    if (!squeeze) return s;
    Attrs q;
    q.SetInts("axes", {axis});
    return Op("Squeeze", {s}, std::move(q));
  }
  absl::StatusOr<std::string> Unsqueeze(const std::string& x, int64_t axis) {
    Attrs a;
    a.SetInts("axes", {axis});
    return Op("Unsqueeze", {x}, std::move(a));
  }
  absl::StatusOr<std::string> Concat(std::vector<std::string> xs, int64_t axis) {
    if (xs.size() == 1) return xs[0];
    Attrs a;
    a.SetInt("axis", axis);
    return Op("Concat", std::move(xs), std::move(a));
  }
  absl::StatusOr<std::vector<std::string>> Split(const std::string& x, int parts) {
    Attrs a;
    a.SetInt("axis", -1);
    return ctx_.b().AddOp("Split", {x}, std::move(a), parts, absl::StrCat(at_, "/Split", n_++));
  }
  absl::StatusOr<std::string> Transposed(const std::string& w) {
    Attrs a;
    a.SetInts("perm", {1, 0});
    return Op("Transpose", {w}, std::move(a));
  }

 private:
  ImportContext& ctx_;
  std::string at_;
  int n_ = 0;
};

}  // namespace

// An RNN's activation: every direction's the same, Tanh (the default) or
// Relu (nn.RNN's nonlinearity). Errors: INVALID_ARGUMENT for others.
absl::StatusOr<std::string> RnnActivation(const Node& node) {
  const onnx::AttributeProto* a = FindAttr(node, "activations");
  if (a == nullptr || a->strings_size() == 0) return std::string("Tanh");
  const std::string first = a->strings(0);
  for (const std::string& s : a->strings()) {
    if (s != first || (s != "Tanh" && s != "Relu")) {
      return absl::InvalidArgumentError(
          "RNN activations other than Tanh or Relu (the same in both directions) are not "
          "supported");
    }
  }
  return first;
}

absl::Status Recurrent(ImportContext& ctx, const Node& node) {
  const bool lstm = node.op_type() == "LSTM";
  const bool rnn = node.op_type() == "RNN";
  const int gates = lstm ? 4 : rnn ? 1 : 3;
  std::string activation;
  if (rnn) {
    ASSIGN_OR_RETURN(activation, RnnActivation(node));
  }
  const int64_t hidden = AttrInt(node, "hidden_size", 0);
  const std::string direction = AttrString(node, "direction", "forward");
  if (hidden <= 0) return absl::InvalidArgumentError("hidden_size must be positive");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional") {
    return absl::InvalidArgumentError("unknown direction '" + direction + "'");
  }
  if (FindAttr(node, "clip") != nullptr || AttrInt(node, "layout", 0) != 0 ||
      AttrInt(node, "input_forget", 0) != 0 || (!rnn && FindAttr(node, "activations") != nullptr)) {
    return absl::InvalidArgumentError(
        "clip, layout 1, input_forget and activations other than the defaults are not supported");
  }
  if (!lstm && !rnn && AttrInt(node, "linear_before_reset", 0) != 1) {
    return absl::InvalidArgumentError(
        "GRU with linear_before_reset = 0 is not supported (PyTorch exports 1)");
  }
  if (ctx.HasInput(node, 4)) {
    return absl::InvalidArgumentError(
        "sequence_lens (sequences of different lengths, packed) is not supported");
  }
  if (lstm && ctx.HasInput(node, 7)) {
    return absl::InvalidArgumentError("LSTM peepholes are not supported");
  }
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  ASSIGN_OR_RETURN(TensorType xt, ctx.TypeOf(x));
  if (xt.shape.rank() != 3 || xt.shape.dim(0).batch) {
    return absl::InvalidArgumentError("X must be [sequence, batch, features]");
  }
  const int64_t steps = xt.shape.dim(0).value;
  ASSIGN_OR_RETURN(std::string w, ctx.Data(node, 1));
  ASSIGN_OR_RETURN(std::string r, ctx.Data(node, 2));
  std::string bias, h0, c0;
  if (ctx.HasInput(node, 3)) {
    ASSIGN_OR_RETURN(bias, ctx.Data(node, 3));
  }
  // An initial state of zeros is no initial state (a fixed-batch export
  // bakes its batch into a [1, batch, H] constant of zeros).
  auto zeros = [&](int i) {
    const Tensor* c = ctx.ConstantInput(node, i);
    return c != nullptr && c->dtype() == DType::kF32 && !ctx.IsParameterInitializer(node, i) &&
           std::all_of(c->f32(), c->f32() + c->numel(), [](float v) { return v == 0.0f; });
  };
  if (ctx.HasInput(node, 5) && !zeros(5)) {
    ASSIGN_OR_RETURN(h0, ctx.Data(node, 5));
  }
  if (lstm && ctx.HasInput(node, 6) && !zeros(6)) {
    ASSIGN_OR_RETURN(c0, ctx.Data(node, 6));
  }
  const int64_t gh = gates * hidden;
  Unroller u(ctx, node);
  const int dirs = direction == "bidirectional" ? 2 : 1;
  std::vector<std::string> ys, last_h, last_c;
  for (int d = 0; d < dirs; ++d) {
    const bool backward = direction == "reverse" || d == 1;
    ASSIGN_OR_RETURN(std::string wd, u.Take(w, 0, d, d + 1, true));
    ASSIGN_OR_RETURN(std::string wt, u.Transposed(wd));
    ASSIGN_OR_RETURN(std::string rd, u.Take(r, 0, d, d + 1, true));
    ASSIGN_OR_RETURN(std::string rt, u.Transposed(rd));
    ASSIGN_OR_RETURN(std::string xw, u.Op("MatMul", {x, wt}));
    std::string rb;  // the recurrent bias (GRU: kept apart for the reset gate)
    if (!bias.empty()) {
      ASSIGN_OR_RETURN(std::string bd, u.Take(bias, 0, d, d + 1, true));
      ASSIGN_OR_RETURN(std::string wb, u.Take(bd, 0, 0, gh, false));
      ASSIGN_OR_RETURN(rb, u.Take(bd, 0, gh, 2 * gh, false));
      ASSIGN_OR_RETURN(xw, u.Op("Add", {xw, wb}));
      if (lstm || rnn) {
        ASSIGN_OR_RETURN(xw, u.Op("Add", {xw, rb}));
        rb.clear();
      }
    }
    std::string h, c;
    if (!h0.empty()) {
      ASSIGN_OR_RETURN(h, u.Take(h0, 0, d, d + 1, true));
    }
    if (!c0.empty()) {
      ASSIGN_OR_RETURN(c, u.Take(c0, 0, d, d + 1, true));
    }
    std::vector<std::string> outs(steps);
    for (int64_t k = 0; k < steps; ++k) {
      const int64_t t = backward ? steps - 1 - k : k;
      ASSIGN_OR_RETURN(std::string xs, u.Take(xw, 0, t, t + 1, true));  // [B, G·H]
      // x·Wᵀ + b + h·Rᵀ (LSTM and RNN: the biases are in the projection).
      std::string g = xs;
      if ((lstm || rnn) && !h.empty()) {
        ASSIGN_OR_RETURN(std::string hr, u.Op("MatMul", {h, rt}));
        ASSIGN_OR_RETURN(g, u.Op("Add", {xs, hr}));
      }
      if (rnn) {
        ASSIGN_OR_RETURN(h, u.Op(activation, {g}));
      } else if (lstm) {
        ASSIGN_OR_RETURN(std::vector<std::string> p, u.Split(g, 4));
        ASSIGN_OR_RETURN(std::string i, u.Op("Sigmoid", {p[0]}));
        ASSIGN_OR_RETURN(std::string o, u.Op("Sigmoid", {p[1]}));
        ASSIGN_OR_RETURN(std::string f, u.Op("Sigmoid", {p[2]}));
        ASSIGN_OR_RETURN(std::string cand, u.Op("Tanh", {p[3]}));
        ASSIGN_OR_RETURN(std::string ic, u.Op("Mul", {i, cand}));
        if (c.empty()) {
          c = ic;
        } else {
          ASSIGN_OR_RETURN(std::string fc, u.Op("Mul", {f, c}));
          ASSIGN_OR_RETURN(c, u.Op("Add", {fc, ic}));
        }
        ASSIGN_OR_RETURN(std::string tc, u.Op("Tanh", {c}));
        ASSIGN_OR_RETURN(h, u.Op("Mul", {o, tc}));
      } else {
        ASSIGN_OR_RETURN(std::vector<std::string> xp, u.Split(xs, 3));
        std::vector<std::string> hp(3);  // h·Rᵀ + Rb by gate ("" = 0)
        if (!h.empty()) {
          ASSIGN_OR_RETURN(std::string hr, u.Op("MatMul", {h, rt}));
          if (!rb.empty()) {
            ASSIGN_OR_RETURN(hr, u.Op("Add", {hr, rb}));
          }
          ASSIGN_OR_RETURN(hp, u.Split(hr, 3));
        } else if (!rb.empty()) {
          ASSIGN_OR_RETURN(hp, u.Split(rb, 3));
        }
        auto plus = [&](const std::string& a, const std::string& b) -> absl::StatusOr<std::string> {
          if (b.empty()) return a;
          return u.Op("Add", {a, b});
        };
        ASSIGN_OR_RETURN(std::string zs, plus(xp[0], hp[0]));
        ASSIGN_OR_RETURN(std::string z, u.Op("Sigmoid", {zs}));
        ASSIGN_OR_RETURN(std::string rs, plus(xp[1], hp[1]));
        ASSIGN_OR_RETURN(std::string rg, u.Op("Sigmoid", {rs}));
        std::string ns = xp[2];
        if (!hp[2].empty()) {
          ASSIGN_OR_RETURN(std::string reset, u.Op("Mul", {rg, hp[2]}));
          ASSIGN_OR_RETURN(ns, u.Op("Add", {xp[2], reset}));
        }
        ASSIGN_OR_RETURN(std::string n, u.Op("Tanh", {ns}));
        // h' = (1 - z)·n + z·h = n + z·(h - n)
        std::string diff;
        if (h.empty()) {
          ASSIGN_OR_RETURN(diff, u.Op("Neg", {n}));
        } else {
          ASSIGN_OR_RETURN(diff, u.Op("Sub", {h, n}));
        }
        ASSIGN_OR_RETURN(std::string zd, u.Op("Mul", {z, diff}));
        ASSIGN_OR_RETURN(h, u.Op("Add", {n, zd}));
      }
      ASSIGN_OR_RETURN(outs[t], u.Unsqueeze(h, 0));
    }
    ASSIGN_OR_RETURN(std::string yd, u.Concat(outs, 0));  // [T, B, H]
    ASSIGN_OR_RETURN(std::string y4, u.Unsqueeze(yd, 1));
    ys.push_back(y4);
    ASSIGN_OR_RETURN(std::string hl, u.Unsqueeze(h, 0));
    last_h.push_back(hl);
    if (lstm) {
      ASSIGN_OR_RETURN(std::string cl, u.Unsqueeze(c, 0));
      last_c.push_back(cl);
    }
  }
  std::vector<std::string> results(3);
  ASSIGN_OR_RETURN(results[0], u.Concat(ys, 1));  // [T, dirs, B, H]
  ASSIGN_OR_RETURN(results[1], u.Concat(last_h, 0));
  if (lstm) {
    ASSIGN_OR_RETURN(results[2], u.Concat(last_c, 0));
  }
  for (int i = 0; i < node.output_size() && i < 3; ++i) {
    if (!node.output(i).empty() && !results[i].empty()) ctx.SetTensor(node.output(i), results[i]);
  }
  return absl::OkStatus();
}

}  // namespace quilt::onnx_import
