// Matrix products: MatMul (batched, numpy broadcasting of leading dims,
// optional transposes) and Gemm (ONNX: alpha·op(A)·op(B) + beta·C).
#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/graph/ops/op_util.h"

namespace quilt::ops {
namespace {

// Shapes of C = op(A)·op(B) over the last two dims, leading dims broadcast.
absl::StatusOr<Shape> MatMulShape(Shape a, Shape b, bool ta, bool tb) {
  const bool a_vec = a.rank() == 1, b_vec = b.rank() == 1;
  if (a.rank() == 0 || b.rank() == 0) return absl::InvalidArgumentError("scalars are not matrices");
  if (a_vec) a = Shape({Dim::Fixed(1), a.dim(0)});
  if (b_vec) b = Shape({b.dim(0), Dim::Fixed(1)});
  const Dim m = ta ? a.dim(a.rank() - 1) : a.dim(a.rank() - 2);
  const Dim ka = ta ? a.dim(a.rank() - 2) : a.dim(a.rank() - 1);
  const Dim kb = tb ? b.dim(b.rank() - 1) : b.dim(b.rank() - 2);
  const Dim n = tb ? b.dim(b.rank() - 2) : b.dim(b.rank() - 1);
  if (ka != kb) {
    return absl::InvalidArgumentError(absl::StrCat("inner dimensions differ: ", a.ToString(),
                                                   ta ? "ᵀ" : "", " · ", b.ToString(),
                                                   tb ? "ᵀ" : ""));
  }
  Shape lead_a(std::vector<Dim>(a.dims().begin(), a.dims().end() - 2));
  Shape lead_b(std::vector<Dim>(b.dims().begin(), b.dims().end() - 2));
  ASSIGN_OR_RETURN(Shape lead, Broadcast(lead_a, lead_b));
  std::vector<Dim> out = lead.dims();
  if (!a_vec) out.push_back(m);
  if (!b_vec) out.push_back(n);
  Shape s(std::move(out));
  int batch_dims = 0;
  for (const Dim& d : s.dims()) batch_dims += d.batch;
  if (batch_dims > 1) return absl::InvalidArgumentError("result would have two batch dimensions");
  return s;
}

double MatMulFlops(const CostContext& c, bool ta, bool tb) {
  // 2 × (output elements) × K.
  const auto& a = c.in_dims[0];
  if (a.empty()) return 0;
  int64_t k = a.size() == 1 ? a[0] : (ta ? a[a.size() - 2] : a[a.size() - 1]);
  (void)tb;
  return 2.0 * static_cast<double>(c.OutNumel(0)) * static_cast<double>(k);
}

absl::StatusOr<std::string> MM(GradContext& g, const std::string& a, const std::string& b, bool ta,
                               bool tb) {
  Attrs attrs;
  attrs.SetInt("trans_a", ta);
  attrs.SetInt("trans_b", tb);
  return g.b().Add("MatMul", {a, b}, std::move(attrs), g.op().name + "_grad");
}

absl::StatusOr<std::string> Flatten2D(GradContext& g, const std::string& x) {
  ASSIGN_OR_RETURN(Shape s, ShapeOf(g, x));
  if (s.rank() <= 2) return x;
  Attrs attrs;
  attrs.SetInts("shape", {-1, s.dim(s.rank() - 1).batch ? -1 : s.dim(s.rank() - 1).value});
  return g.b().Add("Reshape", {x}, std::move(attrs), g.op().name + "_flat");
}

absl::Status MatMulGrad(GradContext& g) {
  const bool ta = g.op().attrs.Int("trans_a") != 0;
  const bool tb = g.op().attrs.Int("trans_b") != 0;
  const std::string &a = g.x(0), &b = g.x(1), &dc = g.dy(0);
  ASSIGN_OR_RETURN(Shape sa, ShapeOf(g, a));
  ASSIGN_OR_RETURN(Shape sb, ShapeOf(g, b));
  if (sa.rank() < 2 || sb.rank() < 2) return g.Error("gradients of 1-D operands are not supported");
  // Common case: batched activations times a 2-D weight, no transposes on A:
  // the weight gradient is one 2-D product over the flattened leading dims.
  const bool flat_weight = sb.rank() == 2 && sa.rank() > 2 && !ta;
  if (g.needs_dx(0)) {
    std::string da;
    if (!ta && !tb) {
      ASSIGN_OR_RETURN(da, MM(g, dc, b, false, true));
    } else if (!ta && tb) {
      ASSIGN_OR_RETURN(da, MM(g, dc, b, false, false));
    } else if (ta && !tb) {
      ASSIGN_OR_RETURN(da, MM(g, b, dc, false, true));
    } else {
      ASSIGN_OR_RETURN(da, MM(g, b, dc, true, true));
    }
    ASSIGN_OR_RETURN(da, SumTo(g, da, sa));
    g.set_dx(0, da);
  }
  if (g.needs_dx(1)) {
    std::string db;
    if (flat_weight) {
      ASSIGN_OR_RETURN(std::string a2, Flatten2D(g, a));
      ASSIGN_OR_RETURN(std::string dc2, Flatten2D(g, dc));
      if (!tb) {
        ASSIGN_OR_RETURN(db, MM(g, a2, dc2, true, false));
      } else {
        ASSIGN_OR_RETURN(db, MM(g, dc2, a2, true, false));
      }
    } else {
      if (!ta && !tb) {
        ASSIGN_OR_RETURN(db, MM(g, a, dc, true, false));
      } else if (!ta && tb) {
        ASSIGN_OR_RETURN(db, MM(g, dc, a, true, false));
      } else if (ta && !tb) {
        ASSIGN_OR_RETURN(db, MM(g, a, dc, false, false));
      } else {
        ASSIGN_OR_RETURN(db, MM(g, dc, a, true, true));
      }
      ASSIGN_OR_RETURN(db, SumTo(g, db, sb));
    }
    g.set_dx(1, db);
  }
  return absl::OkStatus();
}

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "MatMul";
  s.linear = true;
  s.doc =
      "Matrix product over the last two dims, leading dims broadcast (numpy). "
      "Attributes trans_a, trans_b (0/1) transpose the operands.";
  s.min_inputs = s.max_inputs = 2;
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    absl::StatusOr<Shape> out =
        MatMulShape(ctx.shape(0), ctx.shape(1), ctx.attrs().Int("trans_a") != 0,
                    ctx.attrs().Int("trans_b") != 0);
    if (!out.ok()) return ctx.Error(std::string(out.status().message()));
    ctx.set_output(0, ctx.dtype(0), *out);
    return absl::OkStatus();
  };
  s.cost = [](const CostContext& c) {
    return OpCost{MatMulFlops(c, c.op.attrs.Int("trans_a") != 0, c.op.attrs.Int("trans_b") != 0),
                  c.IoBytes()};
  };
  s.grad = MatMulGrad;
  return s;
}());

absl::StatusOr<std::string> GemmOf(GradContext& g, const std::string& a, const std::string& b,
                                   bool ta, bool tb, double alpha) {
  Attrs attrs;
  attrs.SetInt("transA", ta);
  attrs.SetInt("transB", tb);
  attrs.SetFloat("alpha", alpha);
  return g.b().Add("Gemm", {a, b}, std::move(attrs), g.op().name + "_grad");
}

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "Gemm";
  s.linear = true;
  s.doc = "Y = alpha·op(A)·op(B) + beta·C for 2-D A and B (ONNX Gemm); C broadcasts.";
  s.min_inputs = 2;
  s.max_inputs = 3;
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    if (ctx.shape(0).rank() != 2 || ctx.shape(1).rank() != 2) {
      return ctx.Error("A and B must be 2-D");
    }
    absl::StatusOr<Shape> out = MatMulShape(
        ctx.shape(0), ctx.shape(1), ctx.attrs().Int("transA") != 0, ctx.attrs().Int("transB") != 0);
    if (!out.ok()) return ctx.Error(std::string(out.status().message()));
    if (ctx.has_input(2)) {
      absl::StatusOr<Shape> b = Broadcast(*out, ctx.shape(2));
      if (!b.ok() || *b != *out) {
        return ctx.Error(absl::StrCat("C of shape ", ctx.shape(2).ToString(),
                                      " does not broadcast to ", out->ToString()));
      }
    }
    ctx.set_output(0, ctx.dtype(0), *out);
    return absl::OkStatus();
  };
  s.cost = [](const CostContext& c) {
    return OpCost{MatMulFlops(c, c.op.attrs.Int("transA") != 0, c.op.attrs.Int("transB") != 0) +
                      static_cast<double>(c.OutNumel(0)),
                  c.IoBytes()};
  };
  s.grad = [](GradContext& g) -> absl::Status {
    const bool ta = g.op().attrs.Int("transA") != 0;
    const bool tb = g.op().attrs.Int("transB") != 0;
    const double alpha = g.op().attrs.Float("alpha", 1.0);
    const double beta = g.op().attrs.Float("beta", 1.0);
    const std::string &a = g.x(0), &b = g.x(1), &dy = g.dy(0);
    if (g.needs_dx(0)) {
      std::string da;
      if (!ta && !tb) {
        ASSIGN_OR_RETURN(da, GemmOf(g, dy, b, false, true, alpha));
      } else if (!ta && tb) {
        ASSIGN_OR_RETURN(da, GemmOf(g, dy, b, false, false, alpha));
      } else if (ta && !tb) {
        ASSIGN_OR_RETURN(da, GemmOf(g, b, dy, false, true, alpha));
      } else {
        ASSIGN_OR_RETURN(da, GemmOf(g, b, dy, true, true, alpha));
      }
      g.set_dx(0, da);
    }
    if (g.needs_dx(1)) {
      std::string db;
      if (!ta && !tb) {
        ASSIGN_OR_RETURN(db, GemmOf(g, a, dy, true, false, alpha));
      } else if (!ta && tb) {
        ASSIGN_OR_RETURN(db, GemmOf(g, dy, a, true, false, alpha));
      } else if (ta && !tb) {
        ASSIGN_OR_RETURN(db, GemmOf(g, a, dy, false, false, alpha));
      } else {
        ASSIGN_OR_RETURN(db, GemmOf(g, dy, a, true, true, alpha));
      }
      g.set_dx(1, db);
    }
    if (g.op().inputs.size() > 2 && g.needs_dx(2)) {
      ASSIGN_OR_RETURN(Shape sc, ShapeOf(g, g.x(2)));
      std::string src = dy;
      if (beta != 1.0) {
        ASSIGN_OR_RETURN(
            std::string k,
            g.b().AddConstant(g.op().name + "_beta", Tensor::ScalarF32(static_cast<float>(beta))));
        ASSIGN_OR_RETURN(src, Binary(g, "Mul", dy, k));
      }
      ASSIGN_OR_RETURN(std::string dc, SumTo(g, src, sc));
      g.set_dx(2, dc);
    }
    return absl::OkStatus();
  };
  return s;
}());

}  // namespace
}  // namespace quilt::ops
