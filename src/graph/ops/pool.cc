// 2-D pooling ops and their gradients.
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/graph/ops/conv_attrs.h"
#include "src/graph/ops/op_util.h"

namespace quilt::ops {
namespace {

absl::StatusOr<Shape> PoolOutput(InferContext& ctx, const Shape& x) {
  if (x.rank() != 4) return ctx.Error("only 2-D pooling (rank-4 input)");
  for (int i = 1; i < 4; ++i) {
    if (x.dim(i).batch) return ctx.Error("only dim 0 may carry the batch");
  }
  absl::StatusOr<Window2D> w = ParseWindow(ctx.attrs());
  if (!w.ok()) return ctx.Error(std::string(w.status().message()));
  if (w->pt >= w->kh || w->pb >= w->kh || w->pl >= w->kw || w->pr >= w->kw) {
    return ctx.Error("pads must be smaller than the kernel");
  }
  const int64_t ho = w->OutH(x.dim(2).value), wo = w->OutW(x.dim(3).value);
  if (ho < 1 || wo < 1) return ctx.Error("the window is larger than the padded input");
  return Shape({x.dim(0), x.dim(1), Dim::Fixed(ho), Dim::Fixed(wo)});
}

CostFn WindowCost() {
  return [](const CostContext& c) {
    const auto k = c.op.attrs.Ints("kernel_shape", {1, 1});
    return OpCost{static_cast<double>(c.OutNumel(0)) * static_cast<double>(k[0] * k[1]),
                  c.IoBytes()};
  };
}

OpSchema Pool(const std::string& type, const std::string& grad_type, bool grad_needs_x) {
  OpSchema s;
  s.type = type;
  s.doc = type + " over 2-D windows (NCHW). Attributes kernel_shape, strides, pads, ceil_mode" +
          (type == "AveragePool" ? ", count_include_pad." : ".");
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    ASSIGN_OR_RETURN(Shape out, PoolOutput(ctx, ctx.shape(0)));
    ctx.set_output(0, ctx.dtype(0), out);
    return absl::OkStatus();
  };
  s.cost = WindowCost();
  s.grad = [grad_type, grad_needs_x](GradContext& g) -> absl::Status {
    if (!g.needs_dx(0)) return absl::OkStatus();
    ASSIGN_OR_RETURN(Shape xs, ShapeOf(g, g.x(0)));
    Attrs a = g.op().attrs;
    EncodeShape(&a, "input_shape", xs);
    std::vector<std::string> in = {g.dy(0)};
    if (grad_needs_x) in.push_back(g.x(0));
    ASSIGN_OR_RETURN(std::string dx, g.b().Add(grad_type, in, std::move(a), g.op().name + "_grad"));
    g.set_dx(0, dx);
    return absl::OkStatus();
  };
  return s;
}

// The output of a global pooling of `x`: its spatial dims 1.
absl::StatusOr<Shape> GlobalPoolOutput(InferContext& ctx, const Shape& x) {
  if (x.rank() < 3) return ctx.Error("expects [N,C,spatial...]");
  std::vector<Dim> out = {x.dim(0), x.dim(1)};
  for (int i = 2; i < x.rank(); ++i) {
    if (x.dim(i).batch) return ctx.Error("spatial dims cannot carry the batch");
    out.push_back(Dim::Fixed(1));
  }
  return Shape(std::move(out));
}

// The gradient of a pooling op: dY (and X, where it reads it) must be what
// the pooling of attribute input_shape makes (and that shape): the kernels
// loop over the windows these give.
OpSchema PoolGrad(const std::string& type, int inputs, bool global) {
  OpSchema s;
  s.type = type;
  s.doc = "Gradient of a 2-D pooling op; output shaped by attribute input_shape.";
  s.min_inputs = s.max_inputs = inputs;
  s.infer = [global](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    absl::StatusOr<Shape> in = DecodeShape(ctx.attrs(), "input_shape");
    if (!in.ok()) return ctx.Error(std::string(in.status().message()));
    ASSIGN_OR_RETURN(Shape y, global ? GlobalPoolOutput(ctx, *in) : PoolOutput(ctx, *in));
    if (ctx.shape(0) != y) {
      return ctx.Error(absl::StrCat("the gradient ", ctx.shape(0).ToString(), " is not the shape ",
                                    y.ToString(), " of a pooling of ", in->ToString()));
    }
    if (ctx.num_inputs() > 1 && ctx.shape(1) != *in) {
      return ctx.Error(absl::StrCat("the input ", ctx.shape(1).ToString(), " is not ",
                                    in->ToString(), " (attribute input_shape)"));
    }
    ctx.set_output(0, ctx.dtype(0), *in);
    return absl::OkStatus();
  };
  s.cost = [](const CostContext& c) {
    const auto k = c.op.attrs.Ints("kernel_shape", {1, 1});
    return OpCost{static_cast<double>(c.InNumel(0)) * static_cast<double>(k[0] * k[1]),
                  c.IoBytes()};
  };
  return s;
}

// Scales of an Upsample: attribute scales [sh, sw], whole numbers >= 1.
absl::StatusOr<std::pair<int64_t, int64_t>> UpsampleScales(const Attrs& attrs) {
  const std::vector<int64_t> s = attrs.Ints("scales");
  if (s.size() != 2 || s[0] < 1 || s[1] < 1) {
    return absl::InvalidArgumentError("scales must be two whole numbers >= 1 (height, width)");
  }
  return std::make_pair(s[0], s[1]);
}

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "Upsample";
  s.doc =
      "Nearest-neighbour upsampling of [N,C,H,W] by whole attribute scales [sh, sw]: "
      "out[n,c,y,x] = in[n,c,y/sh,x/sw].";
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    const Shape& x = ctx.shape(0);
    if (x.rank() != 4) return ctx.Error("only [N,C,H,W] inputs are upsampled");
    for (int i = 1; i < 4; ++i) {
      if (x.dim(i).batch) return ctx.Error("only dim 0 may carry the batch");
    }
    absl::StatusOr<std::pair<int64_t, int64_t>> sc = UpsampleScales(ctx.attrs());
    if (!sc.ok()) return ctx.Error(std::string(sc.status().message()));
    ctx.set_output(0, ctx.dtype(0),
                   Shape({x.dim(0), x.dim(1), Dim::Fixed(x.dim(2).value * sc->first),
                          Dim::Fixed(x.dim(3).value * sc->second)}));
    return absl::OkStatus();
  };
  s.cost = [](const CostContext& c) { return OpCost{0, c.IoBytes()}; };
  s.grad = [](GradContext& g) -> absl::Status {
    if (!g.needs_dx(0)) return absl::OkStatus();
    ASSIGN_OR_RETURN(std::string dx,
                     g.b().Add("UpsampleGrad", {g.dy(0)}, g.op().attrs, g.op().name + "_grad"));
    g.set_dx(0, dx);
    return absl::OkStatus();
  };
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "UpsampleGrad";
  s.doc = "Gradient of Upsample: dY summed over each sh × sw block.";
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    const Shape& dy = ctx.shape(0);
    absl::StatusOr<std::pair<int64_t, int64_t>> sc = UpsampleScales(ctx.attrs());
    if (!sc.ok()) return ctx.Error(std::string(sc.status().message()));
    if (dy.rank() != 4 || dy.dim(2).value % sc->first != 0 || dy.dim(3).value % sc->second != 0) {
      return ctx.Error("dY is not an upsampled [N,C,H,W]");
    }
    ctx.set_output(0, ctx.dtype(0),
                   Shape({dy.dim(0), dy.dim(1), Dim::Fixed(dy.dim(2).value / sc->first),
                          Dim::Fixed(dy.dim(3).value / sc->second)}));
    return absl::OkStatus();
  };
  s.cost = [](const CostContext& c) {
    return OpCost{static_cast<double>(c.InNumel(0)), c.IoBytes()};
  };
  return s;
}());

QUILT_REGISTER_OP(Pool("MaxPool", "MaxPoolGrad", true));
QUILT_REGISTER_OP(PoolGrad("MaxPoolGrad", 2, /*global=*/false));
QUILT_REGISTER_OP(Pool("AveragePool", "AveragePoolGrad", false));
QUILT_REGISTER_OP(PoolGrad("AveragePoolGrad", 1, /*global=*/false));

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "GlobalAveragePool";
  s.doc = "Mean over the spatial dims: [N,C,H,W] → [N,C,1,1].";
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    ASSIGN_OR_RETURN(Shape out, GlobalPoolOutput(ctx, ctx.shape(0)));
    ctx.set_output(0, ctx.dtype(0), out);
    return absl::OkStatus();
  };
  s.cost = [](const CostContext& c) {
    return OpCost{static_cast<double>(c.InNumel(0)), c.IoBytes()};
  };
  s.grad = [](GradContext& g) -> absl::Status {
    if (!g.needs_dx(0)) return absl::OkStatus();
    ASSIGN_OR_RETURN(Shape xs, ShapeOf(g, g.x(0)));
    Attrs a;
    EncodeShape(&a, "input_shape", xs);
    ASSIGN_OR_RETURN(std::string dx, g.b().Add("GlobalAveragePoolGrad", {g.dy(0)}, std::move(a),
                                               g.op().name + "_grad"));
    g.set_dx(0, dx);
    return absl::OkStatus();
  };
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s = PoolGrad("GlobalAveragePoolGrad", 1, /*global=*/true);
  s.cost = [](const CostContext& c) {
    return OpCost{static_cast<double>(c.OutNumel(0)), c.IoBytes()};
  };
  return s;
}());

}  // namespace
}  // namespace quilt::ops
