// Element-wise ops: arithmetic with broadcasting, activations, and their
// gradient ops.
#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/graph/ops/op_util.h"

namespace quilt::ops {
namespace {

absl::Status InferBroadcastBinary(InferContext& ctx) {
  RETURN_IF_ERROR(RequireFloatInputs(ctx));
  absl::StatusOr<Shape> s = Broadcast(ctx.shape(0), ctx.shape(1));
  if (!s.ok()) return ctx.Error(std::string(s.status().message()));
  ctx.set_output(0, ctx.dtype(0), *s);
  return absl::OkStatus();
}

absl::Status InferFloatUnary(InferContext& ctx) {
  RETURN_IF_ERROR(RequireFloatInputs(ctx));
  return InferSameAsInput(ctx);
}

// Gradient ops (dy, t) → dx with dx shaped like dy.
absl::Status InferSameShapePair(InferContext& ctx) {
  RETURN_IF_ERROR(RequireFloatInputs(ctx));
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    if (ctx.shape(i) != ctx.shape(0)) {
      return ctx.Error(absl::StrCat("input ", i, " has shape ", ctx.shape(i).ToString(),
                                    ", expected ", ctx.shape(0).ToString()));
    }
  }
  return InferSameAsInput(ctx);
}

absl::StatusOr<Shape> InShape(GradContext& g, int i) { return ShapeOf(g, g.x(i)); }

OpSchema BinaryOp(const std::string& type, GradFn grad) {
  OpSchema s;
  s.type = type;
  // Linear in either operand while the other is whole (not for Pow).
  s.linear = type != "Pow";
  s.doc = type + " of two tensors with numpy broadcasting.";
  s.min_inputs = s.max_inputs = 2;
  s.infer = InferBroadcastBinary;
  s.grad = std::move(grad);
  return s;
}

OpSchema UnaryOp(const std::string& type, double flops, GradFn grad) {
  OpSchema s;
  s.type = type;
  s.doc = "Element-wise " + type + ".";
  s.infer = InferFloatUnary;
  s.cost = ElementwiseCost(flops);
  s.grad = std::move(grad);
  return s;
}

OpSchema GradOp(const std::string& type, double flops, int inputs = 2) {
  OpSchema s;
  s.type = type;
  s.doc = "Gradient op: element-wise, output shaped like input 0 (dy).";
  s.min_inputs = s.max_inputs = inputs;
  s.infer = InferSameShapePair;
  s.cost = ElementwiseCost(flops);
  return s;
}

// dx = op(dy, t) where t is input `ti` or output `to` of the forward op.
GradFn UnaryGrad(const std::string& grad_type, bool use_output, Attrs attrs = {}) {
  return [grad_type, use_output, attrs](GradContext& g) -> absl::Status {
    if (!g.needs_dx(0)) return absl::OkStatus();
    Attrs a = attrs;
    for (const auto& [k, v] : g.op().attrs.values()) a.Set(k, v);
    ASSIGN_OR_RETURN(std::string dx,
                     Binary(g, grad_type, g.dy(0), use_output ? g.y(0) : g.x(0), std::move(a)));
    g.set_dx(0, dx);
    return absl::OkStatus();
  };
}

QUILT_REGISTER_OP(BinaryOp("Add", [](GradContext& g) -> absl::Status {
  for (int i = 0; i < 2; ++i) {
    if (!g.needs_dx(i)) continue;
    ASSIGN_OR_RETURN(Shape s, InShape(g, i));
    ASSIGN_OR_RETURN(std::string dx, SumTo(g, g.dy(0), s));
    g.set_dx(i, dx);
  }
  return absl::OkStatus();
}));

QUILT_REGISTER_OP(BinaryOp("Sub", [](GradContext& g) -> absl::Status {
  if (g.needs_dx(0)) {
    ASSIGN_OR_RETURN(Shape s, InShape(g, 0));
    ASSIGN_OR_RETURN(std::string dx, SumTo(g, g.dy(0), s));
    g.set_dx(0, dx);
  }
  if (g.needs_dx(1)) {
    ASSIGN_OR_RETURN(Shape s, InShape(g, 1));
    ASSIGN_OR_RETURN(std::string neg, Unary(g, "Neg", g.dy(0)));
    ASSIGN_OR_RETURN(std::string dx, SumTo(g, neg, s));
    g.set_dx(1, dx);
  }
  return absl::OkStatus();
}));

QUILT_REGISTER_OP(BinaryOp("Mul", [](GradContext& g) -> absl::Status {
  for (int i = 0; i < 2; ++i) {
    if (!g.needs_dx(i)) continue;
    ASSIGN_OR_RETURN(Shape s, InShape(g, i));
    ASSIGN_OR_RETURN(std::string prod, Binary(g, "Mul", g.dy(0), g.x(1 - i)));
    ASSIGN_OR_RETURN(std::string dx, SumTo(g, prod, s));
    g.set_dx(i, dx);
  }
  return absl::OkStatus();
}));

QUILT_REGISTER_OP(BinaryOp("Div", [](GradContext& g) -> absl::Status {
  if (g.needs_dx(0)) {
    ASSIGN_OR_RETURN(Shape s, InShape(g, 0));
    ASSIGN_OR_RETURN(std::string q, Binary(g, "Div", g.dy(0), g.x(1)));
    ASSIGN_OR_RETURN(std::string dx, SumTo(g, q, s));
    g.set_dx(0, dx);
  }
  if (g.needs_dx(1)) {
    // d(a/b)/db = -y/b
    ASSIGN_OR_RETURN(Shape s, InShape(g, 1));
    ASSIGN_OR_RETURN(std::string p, Binary(g, "Mul", g.dy(0), g.y(0)));
    ASSIGN_OR_RETURN(std::string q, Binary(g, "Div", p, g.x(1)));
    ASSIGN_OR_RETURN(std::string n, Unary(g, "Neg", q));
    ASSIGN_OR_RETURN(std::string dx, SumTo(g, n, s));
    g.set_dx(1, dx);
  }
  return absl::OkStatus();
}));

QUILT_REGISTER_OP([] {
  OpSchema s = BinaryOp("Pow", [](GradContext& g) -> absl::Status {
    if (g.needs_dx(1)) {
      return g.Error("the gradient with respect to the exponent is not supported");
    }
    if (!g.needs_dx(0)) return absl::OkStatus();
    ASSIGN_OR_RETURN(Shape s, InShape(g, 0));
    ASSIGN_OR_RETURN(std::string d,
                     g.b().Add("PowGrad", {g.dy(0), g.x(0), g.x(1)}, {}, g.op().name + "_grad"));
    ASSIGN_OR_RETURN(std::string dx, SumTo(g, d, s));
    g.set_dx(0, dx);
    return absl::OkStatus();
  });
  s.cost = ElementwiseCost(10);
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "PowGrad";
  s.doc = "dy * e * x^(e-1), broadcast to dy's shape. Inputs: dy, x, e.";
  s.min_inputs = s.max_inputs = 3;
  s.cost = ElementwiseCost(12);
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    return InferSameAsInput(ctx);
  };
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "Sum";
  s.doc = "Element-wise sum of any number of tensors with broadcasting.";
  s.linear = true;
  s.min_inputs = 1;
  s.max_inputs = -1;
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    Shape out = ctx.shape(0);
    for (int i = 1; i < ctx.num_inputs(); ++i) {
      absl::StatusOr<Shape> b = Broadcast(out, ctx.shape(i));
      if (!b.ok()) return ctx.Error(std::string(b.status().message()));
      out = *b;
    }
    ctx.set_output(0, ctx.dtype(0), out);
    return absl::OkStatus();
  };
  s.grad = [](GradContext& g) -> absl::Status {
    for (size_t i = 0; i < g.op().inputs.size(); ++i) {
      if (!g.needs_dx(static_cast<int>(i))) continue;
      ASSIGN_OR_RETURN(Shape sh, InShape(g, static_cast<int>(i)));
      ASSIGN_OR_RETURN(std::string dx, SumTo(g, g.dy(0), sh));
      g.set_dx(static_cast<int>(i), dx);
    }
    return absl::OkStatus();
  };
  return s;
}());

// SumToShape and Expand: the output has attribute 'shape'; broadcasting
// the input with it gives the input (a sum over expanded dims) or the
// shape (an expansion).
absl::Status InferBroadcastToShape(InferContext& ctx, bool expand) {
  RETURN_IF_ERROR(RequireFloatInputs(ctx));
  absl::StatusOr<Shape> target = DecodeShape(ctx.attrs(), "shape");
  if (!target.ok()) return ctx.Error(std::string(target.status().message()));
  absl::StatusOr<Shape> b = Broadcast(ctx.shape(0), *target);
  if (!b.ok() || *b != (expand ? *target : ctx.shape(0))) {
    return ctx.Error(absl::StrCat("cannot ", expand ? "expand " : "sum ", ctx.shape(0).ToString(),
                                  " to ", target->ToString()));
  }
  ctx.set_output(0, ctx.dtype(0), *target);
  return absl::OkStatus();
}

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "SumToShape";
  s.linear = true;
  s.doc = "Sums the input over the dims that broadcasting expanded, giving attribute 'shape'.";
  s.infer = [](InferContext& ctx) { return InferBroadcastToShape(ctx, /*expand=*/false); };
  s.cost = [](const CostContext& c) {
    return OpCost{static_cast<double>(c.InNumel(0)), c.IoBytes()};
  };
  return s;
}());

QUILT_REGISTER_OP(UnaryOp("Relu", 1, UnaryGrad("ReluGrad", /*use_output=*/true)));
QUILT_REGISTER_OP(GradOp("ReluGrad", 1));
QUILT_REGISTER_OP(UnaryOp("Gelu", 20, UnaryGrad("GeluGrad", false)));
QUILT_REGISTER_OP(GradOp("GeluGrad", 30));
QUILT_REGISTER_OP(UnaryOp("Erf", 15, UnaryGrad("ErfGrad", false)));
QUILT_REGISTER_OP(GradOp("ErfGrad", 15));
QUILT_REGISTER_OP(UnaryOp("Tanh", 15, UnaryGrad("TanhGrad", true)));
QUILT_REGISTER_OP(GradOp("TanhGrad", 3));
QUILT_REGISTER_OP(UnaryOp("Sigmoid", 15, UnaryGrad("SigmoidGrad", true)));
QUILT_REGISTER_OP(GradOp("SigmoidGrad", 3));
QUILT_REGISTER_OP([] {
  OpSchema s = UnaryOp("LeakyRelu", 2, UnaryGrad("LeakyReluGrad", /*use_output=*/false));
  s.doc = "Element-wise x for x > 0, else alpha · x (attribute 'alpha', default 0.01).";
  return s;
}());
QUILT_REGISTER_OP(GradOp("LeakyReluGrad", 2));
QUILT_REGISTER_OP([] {
  OpSchema s = UnaryOp("Clip", 2, UnaryGrad("ClipGrad", /*use_output=*/false));
  s.doc =
      "Element-wise min(max(x, attribute 'min'), attribute 'max') (each optional: unbounded); "
      "the gradient passes where min <= x <= max.";
  return s;
}());
QUILT_REGISTER_OP(GradOp("ClipGrad", 2));
QUILT_REGISTER_OP(UnaryOp("Abs", 1, UnaryGrad("AbsGrad", /*use_output=*/false)));
QUILT_REGISTER_OP(GradOp("AbsGrad", 2));
QUILT_REGISTER_OP(UnaryOp("Sqrt", 4, UnaryGrad("SqrtGrad", true)));
QUILT_REGISTER_OP(GradOp("SqrtGrad", 2));

QUILT_REGISTER_OP(UnaryOp("Exp", 10, [](GradContext& g) -> absl::Status {
  if (!g.needs_dx(0)) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string dx, Binary(g, "Mul", g.dy(0), g.y(0)));
  g.set_dx(0, dx);
  return absl::OkStatus();
}));

QUILT_REGISTER_OP(UnaryOp("Log", 10, [](GradContext& g) -> absl::Status {
  if (!g.needs_dx(0)) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string dx, Binary(g, "Div", g.dy(0), g.x(0)));
  g.set_dx(0, dx);
  return absl::OkStatus();
}));

QUILT_REGISTER_OP([] {
  OpSchema s = UnaryOp("Neg", 1, nullptr);
  s.linear = true;
  s.grad = [](GradContext& g) -> absl::Status {
    if (!g.needs_dx(0)) return absl::OkStatus();
    ASSIGN_OR_RETURN(std::string dx, Unary(g, "Neg", g.dy(0)));
    g.set_dx(0, dx);
    return absl::OkStatus();
  };
  return s;
}());

// Its gradient is 0 wherever it exists, as PyTorch's: none flows back.
QUILT_REGISTER_OP([] {
  OpSchema s = UnaryOp("Floor", 1, nullptr);
  s.doc = "Element-wise floor (the largest integer not above x); no gradient flows back.";
  s.non_differentiable_inputs = {0};
  return s;
}());

// The value passes, no gradient does (an embedding's padding row: it
// trains through the tied output layer, not through the lookup).
QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "StopGradient";
  s.linear = true;
  s.doc = "Output = input; no gradient flows back through it.";
  s.non_differentiable_inputs = {0};
  s.infer = InferSameAsInput;
  s.cost = [](const CostContext& c) { return OpCost{0, c.IoBytes()}; };
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "Identity";
  s.linear = true;
  s.doc = "Output = input.";
  s.infer = InferSameAsInput;
  s.cost = [](const CostContext& c) { return OpCost{0, c.IoBytes()}; };
  s.grad = [](GradContext& g) -> absl::Status {
    if (g.needs_dx(0)) g.set_dx(0, g.dy(0));
    return absl::OkStatus();
  };
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "Cast";
  s.doc = "Converts the element type to attribute 'to' (\"f32\" or \"i64\").";
  s.infer = [](InferContext& ctx) -> absl::Status {
    const std::string to = ctx.attrs().String("to");
    DType d = to == "f32" ? DType::kF32 : to == "i64" ? DType::kI64 : DType::kInvalid;
    if (d == DType::kInvalid) return ctx.Error("attribute 'to' must be \"f32\" or \"i64\"");
    if (ctx.dtype(0) != DType::kF32 && ctx.dtype(0) != DType::kI64) {
      return ctx.Error(absl::StrCat("cannot cast from ", DTypeName(ctx.dtype(0))));
    }
    ctx.set_output(0, d, ctx.shape(0));
    return absl::OkStatus();
  };
  s.grad = [](GradContext& g) -> absl::Status {
    if (!g.needs_dx(0)) return absl::OkStatus();
    ASSIGN_OR_RETURN(TensorType in, g.b().TypeOf(g.x(0)));
    ASSIGN_OR_RETURN(TensorType out, g.b().TypeOf(g.y(0)));
    if (in.dtype != out.dtype) return g.Error("no gradient through a cast between types");
    g.set_dx(0, g.dy(0));
    return absl::OkStatus();
  };
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "Expand";
  s.linear = true;
  s.doc = "Broadcasts the input to attribute 'shape' (ONNX Expand with a constant shape).";
  s.infer = [](InferContext& ctx) { return InferBroadcastToShape(ctx, /*expand=*/true); };
  s.cost = [](const CostContext& c) { return OpCost{0, c.IoBytes()}; };
  s.grad = [](GradContext& g) -> absl::Status {
    if (!g.needs_dx(0)) return absl::OkStatus();
    ASSIGN_OR_RETURN(Shape sh, InShape(g, 0));
    ASSIGN_OR_RETURN(std::string dx, SumTo(g, g.dy(0), sh));
    g.set_dx(0, dx);
    return absl::OkStatus();
  };
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "BatchAffine";
  s.doc =
      "A value computed from the batch size (x.shape[0] used as data): element i is "
      "a[i]·B + c[i], B the global batch of the step; attributes a, c (floats), dtype "
      "(f32 or i64) and shape (no batch dim).";
  s.min_inputs = s.max_inputs = 0;
  s.infer = [](InferContext& ctx) -> absl::Status {
    absl::StatusOr<Shape> shape = DecodeShape(ctx.attrs(), "shape");
    if (!shape.ok()) return ctx.Error(std::string(shape.status().message()));
    if (shape->HasBatch()) return ctx.Error("the shape cannot hold the batch");
    const std::string dtype = ctx.attrs().String("dtype", "f32");
    if (dtype != "f32" && dtype != "i64") return ctx.Error("dtype must be f32 or i64");
    const size_t n = static_cast<size_t>(shape->NumElements(1));
    if (ctx.attrs().Floats("a").size() != n || ctx.attrs().Floats("c").size() != n) {
      return ctx.Error(absl::StrCat("a and c must hold ", n, " values"));
    }
    ctx.set_output(0, dtype == "f32" ? DType::kF32 : DType::kI64, *shape);
    return absl::OkStatus();
  };
  s.cost = [](const CostContext& c) { return OpCost{0, c.IoBytes()}; };
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "Zeros";
  s.doc = "A float tensor of zeros shaped by attribute 'shape'.";
  s.min_inputs = s.max_inputs = 0;
  s.infer = [](InferContext& ctx) -> absl::Status {
    absl::StatusOr<Shape> shape = DecodeShape(ctx.attrs(), "shape");
    if (!shape.ok()) return ctx.Error(std::string(shape.status().message()));
    ctx.set_output(0, DType::kF32, *shape);
    return absl::OkStatus();
  };
  s.cost = [](const CostContext& c) { return OpCost{0, c.IoBytes()}; };
  return s;
}());

}  // namespace
// Masks computed from data (a padding mask, ids == 0; x > 0): 1 where the
// comparison holds, 0 elsewhere, as floats; nothing trains through it.
QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "CompareMask";
  s.doc =
      "1 where A <mode> B holds, else 0, as float32, with numpy broadcasting; A and B both "
      "float32 or both int64. Attribute mode: eq, gt, lt, ge or le. No gradient.";
  s.min_inputs = s.max_inputs = 2;
  s.non_differentiable_inputs = {0, 1};
  s.infer = [](InferContext& ctx) -> absl::Status {
    if (ctx.dtype(0) != ctx.dtype(1) ||
        (ctx.dtype(0) != DType::kF32 && ctx.dtype(0) != DType::kI64)) {
      return ctx.Error("A and B must both be float32 or both int64");
    }
    const std::string mode = ctx.attrs().String("mode", "");
    if (mode != "eq" && mode != "gt" && mode != "lt" && mode != "ge" && mode != "le") {
      return ctx.Error("mode must be eq, gt, lt, ge or le, got '" + mode + "'");
    }
    absl::StatusOr<Shape> shape = Broadcast(ctx.shape(0), ctx.shape(1));
    if (!shape.ok()) return ctx.Error(std::string(shape.status().message()));
    ctx.set_output(0, DType::kF32, *shape);
    return absl::OkStatus();
  };
  s.cost = ElementwiseCost(1);
  return s;
}());

}  // namespace quilt::ops
