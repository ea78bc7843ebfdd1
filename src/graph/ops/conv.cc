// 2-D convolution and its gradient ops.
#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/graph/ops/conv_attrs.h"
#include "src/graph/ops/op_util.h"

namespace quilt::ops {
namespace {

absl::Status CheckSpatialFixed(InferContext& ctx, const Shape& s) {
  for (int i = 1; i < s.rank(); ++i) {
    if (s.dim(i).batch) return ctx.Error("only dim 0 may carry the batch");
  }
  return absl::OkStatus();
}

// The output of a Conv of `x` with weight `w` under the op's attributes:
// the one check of Conv and of its gradient ops (whose kernels loop over
// the groups and windows these shapes and attributes give).
absl::StatusOr<Shape> ConvOutput(InferContext& ctx, const Shape& x, const Shape& w) {
  if (x.rank() != 4 || w.rank() != 4) return ctx.Error("only 2-D convolution (rank-4 X and W)");
  RETURN_IF_ERROR(CheckSpatialFixed(ctx, x));
  if (w.HasBatch()) return ctx.Error("the weight cannot carry the batch");
  absl::StatusOr<Window2D> win = ParseWindow(ctx.attrs(), w.dim(2).value, w.dim(3).value);
  if (!win.ok()) return ctx.Error(std::string(win.status().message()));
  if (win->kh != w.dim(2).value || win->kw != w.dim(3).value) {
    return ctx.Error("kernel_shape does not match the weight");
  }
  const int64_t c = x.dim(1).value, m = w.dim(0).value;
  if (win->group < 1 || c % win->group != 0 || m % win->group != 0 ||
      w.dim(1).value * win->group != c) {
    return ctx.Error(absl::StrCat("input channels ", c, ", weight ", w.ToString(), " and group ",
                                  win->group, " do not agree"));
  }
  const int64_t ho = win->OutH(x.dim(2).value), wo = win->OutW(x.dim(3).value);
  if (ho < 1 || wo < 1) return ctx.Error("the window is larger than the padded input");
  return Shape({x.dim(0), Dim::Fixed(m), Dim::Fixed(ho), Dim::Fixed(wo)});
}

// That `dy` is what a Conv of `x` with `w` makes (gradient ops).
absl::Status CheckConvGradient(InferContext& ctx, const Shape& dy, const Shape& x, const Shape& w) {
  ASSIGN_OR_RETURN(Shape y, ConvOutput(ctx, x, w));
  if (y != dy) {
    return ctx.Error(absl::StrCat("the gradient ", dy.ToString(), " is not the shape ",
                                  y.ToString(), " of a convolution of ", x.ToString(), " with ",
                                  w.ToString()));
  }
  return absl::OkStatus();
}

double ConvFlops(const std::vector<int64_t>& out, const std::vector<int64_t>& w) {
  // 2 × N·M·Ho·Wo × (C/g)·kh·kw
  double n = 2.0;
  for (int64_t d : out) n *= static_cast<double>(d);
  return n * static_cast<double>(w[1] * w[2] * w[3]);
}

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "Conv";
  s.doc =
      "2-D convolution (NCHW): X[N,C,H,W], W[M,C/group,kh,kw], optional bias[M]. "
      "Attributes strides, pads [t,l,b,r], dilations, group.";
  s.min_inputs = 2;
  s.max_inputs = 3;
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    ASSIGN_OR_RETURN(Shape y, ConvOutput(ctx, ctx.shape(0), ctx.shape(1)));
    const int64_t m = ctx.shape(1).dim(0).value;
    if (ctx.has_input(2) && (ctx.shape(2).rank() != 1 || ctx.shape(2).dim(0) != Dim::Fixed(m))) {
      return ctx.Error(absl::StrCat("bias must be [", m, "]"));
    }
    ctx.set_output(0, ctx.dtype(0), y);
    return absl::OkStatus();
  };
  s.cost = [](const CostContext& c) {
    return OpCost{ConvFlops(c.out_dims[0], c.in_dims[1]), c.IoBytes()};
  };
  s.grad = [](GradContext& g) -> absl::Status {
    ASSIGN_OR_RETURN(Shape xs, ShapeOf(g, g.x(0)));
    ASSIGN_OR_RETURN(Shape ws, ShapeOf(g, g.x(1)));
    if (g.needs_dx(0)) {
      Attrs a = g.op().attrs;
      EncodeShape(&a, "input_shape", xs);
      ASSIGN_OR_RETURN(std::string dx, g.b().Add("ConvGradInput", {g.dy(0), g.x(1)}, std::move(a),
                                                 g.op().name + "_grad_x"));
      g.set_dx(0, dx);
    }
    if (g.needs_dx(1)) {
      Attrs a = g.op().attrs;
      EncodeShape(&a, "weight_shape", ws);
      ASSIGN_OR_RETURN(std::string dw, g.b().Add("ConvGradWeight", {g.dy(0), g.x(0)}, std::move(a),
                                                 g.op().name + "_grad_w"));
      g.set_dx(1, dw);
    }
    if (g.op().inputs.size() > 2 && g.needs_dx(2)) {
      Attrs a;
      a.SetInts("axes", {0, 2, 3});
      a.SetInt("keepdims", 0);
      ASSIGN_OR_RETURN(std::string db,
                       g.b().Add("ReduceSum", {g.dy(0)}, std::move(a), g.op().name + "_grad_b"));
      g.set_dx(2, db);
    }
    return absl::OkStatus();
  };
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "ConvGradInput";
  s.doc = "Gradient of Conv with respect to X. Inputs dY, W; attribute input_shape.";
  s.min_inputs = s.max_inputs = 2;
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    absl::StatusOr<Shape> in = DecodeShape(ctx.attrs(), "input_shape");
    if (!in.ok()) return ctx.Error(std::string(in.status().message()));
    if (in->rank() != 4 || ctx.shape(0).rank() != 4) return ctx.Error("expects rank-4 tensors");
    RETURN_IF_ERROR(CheckConvGradient(ctx, ctx.shape(0), *in, ctx.shape(1)));
    ctx.set_output(0, ctx.dtype(0), *in);
    return absl::OkStatus();
  };
  s.cost = [](const CostContext& c) {
    return OpCost{ConvFlops(c.in_dims[0], c.in_dims[1]), c.IoBytes()};
  };
  // Linear in dY and in W (a transposed convolution trains through it):
  // its adjoint in dY is the convolution with W, in W the weight gradient
  // of that convolution.
  s.grad = [](GradContext& g) -> absl::Status {
    if (g.needs_dx(0)) {
      ASSIGN_OR_RETURN(std::string dx, g.b().Add("Conv", {g.dy(0), g.x(1)}, g.op().attrs,
                                                 g.op().name + "_grad_dy"));
      g.set_dx(0, dx);
    }
    if (g.needs_dx(1)) {
      ASSIGN_OR_RETURN(Shape ws, ShapeOf(g, g.x(1)));
      Attrs a = g.op().attrs;
      EncodeShape(&a, "weight_shape", ws);
      ASSIGN_OR_RETURN(std::string dw, g.b().Add("ConvGradWeight", {g.x(0), g.dy(0)}, std::move(a),
                                                 g.op().name + "_grad_w"));
      g.set_dx(1, dw);
    }
    return absl::OkStatus();
  };
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "ConvGradWeight";
  s.doc = "Gradient of Conv with respect to W. Inputs dY, X; attribute weight_shape.";
  s.min_inputs = s.max_inputs = 2;
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    absl::StatusOr<Shape> w = DecodeShape(ctx.attrs(), "weight_shape");
    if (!w.ok()) return ctx.Error(std::string(w.status().message()));
    if (w->rank() != 4 || ctx.shape(0).rank() != 4) return ctx.Error("expects rank-4 tensors");
    RETURN_IF_ERROR(CheckConvGradient(ctx, ctx.shape(0), ctx.shape(1), *w));
    ctx.set_output(0, ctx.dtype(0), *w);
    return absl::OkStatus();
  };
  s.cost = [](const CostContext& c) {
    return OpCost{ConvFlops(c.in_dims[0], c.out_dims[0]), c.IoBytes()};
  };
  return s;
}());

}  // namespace
}  // namespace quilt::ops
