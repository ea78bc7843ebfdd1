// Normalizations (batch norm in training mode as statistics + apply, layer
// norm) and softmax, with their gradient ops.
#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/graph/ops/op_util.h"

namespace quilt::ops {
namespace {

absl::Status CheckChannelVector(InferContext& ctx, int i, const Dim& c) {
  const Shape& s = ctx.shape(i);
  if (s.rank() != 1 || s.dim(0) != c) {
    return ctx.Error(absl::StrCat("input ", i, " must be [", c.value, "], got ", s.ToString()));
  }
  return absl::OkStatus();
}

// Batch norm in training mode is two ops, so that its statistics are those
// of the global batch however the batch is split: BatchNormStats gives
// per-channel mean and mean of squares divided by the *global* element
// count (replicas holding a slice produce partial sums that the lowering
// adds up, as it does for gradients), BatchNormApply normalizes with them.
// Both are taken about a shift K, the layer's running mean (the same on
// every replica during a step): E[x - K] and E[(x - K)²], so that the
// variance E[(x-K)²] - E[x-K]² keeps its precision in float32 when the
// mean is large against the spread, once the running mean is near it.

absl::Status CheckBatchNormX(InferContext& ctx, const Shape& x) {
  if (x.rank() < 2) return ctx.Error("X must be [N,C,...]");
  for (int i = 1; i < x.rank(); ++i) {
    if (x.dim(i).batch) return ctx.Error("only dim 0 of X may carry the batch");
  }
  return absl::OkStatus();
}

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "BatchNormStats";
  s.doc =
      "Per-channel statistics of X[N,C,...] for batch norm: Σ(x-K) / count and Σ(x-K)² / "
      "count, with count = global batch × spatial size (so slices of the batch give partial "
      "sums). Inputs X and the optional per-channel shift K (0 when absent).";
  s.min_inputs = 1;
  s.max_inputs = 2;
  s.min_outputs = s.max_outputs = 2;
  s.non_differentiable_inputs = {1};
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    RETURN_IF_ERROR(CheckBatchNormX(ctx, ctx.shape(0)));
    if (ctx.num_inputs() > 1) RETURN_IF_ERROR(CheckChannelVector(ctx, 1, ctx.shape(0).dim(1)));
    const Shape c({ctx.shape(0).dim(1)});
    ctx.set_output(0, ctx.dtype(0), c);
    ctx.set_output(1, ctx.dtype(0), c);
    return absl::OkStatus();
  };
  s.cost = [](const CostContext& c) {
    return OpCost{3.0 * static_cast<double>(c.InNumel(0)), c.IoBytes()};
  };
  s.grad = [](GradContext& g) -> absl::Status {
    if (!g.needs_dx(0) || (g.dy(0).empty() && g.dy(1).empty())) return absl::OkStatus();
    std::vector<std::string> in = {g.x(0), g.dy(0), g.dy(1)};
    if (g.op().inputs.size() > 1) in.push_back(g.x(1));  // the shift
    ASSIGN_OR_RETURN(std::string dx,
                     g.b().Add("BatchNormStatsGrad", in, {}, g.op().name + "_grad"));
    g.set_dx(0, dx);
    return absl::OkStatus();
  };
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "BatchNormStatsGrad";
  s.doc =
      "Gradient of BatchNormStats: dX = (dmean + 2·(x-K)·dsqmean) / count. Inputs X, dmean, "
      "dsqmean (either may be omitted), the optional shift K.";
  s.min_inputs = 1;
  s.max_inputs = 4;
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    ctx.set_output(0, ctx.input(0));
    return absl::OkStatus();
  };
  s.cost = [](const CostContext& c) {
    return OpCost{3.0 * static_cast<double>(c.InNumel(0)), c.IoBytes()};
  };
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "BatchNormApply";
  s.doc =
      "Batch norm with given statistics: Y = (X - mean)·scale / sqrt(sqmean - mean² + eps) + "
      "bias. Inputs X, mean, sqmean (from BatchNormStats), scale, bias, running_mean, "
      "running_var; outputs Y and the updated running mean and variance (running = "
      "momentum·running + (1-momentum)·batch, unbiased variance over the global batch). "
      "Attributes epsilon (1e-5), momentum (0.9), shifted (0; 1: the statistics are about "
      "running_mean, BatchNormStats's shift, and mean is running_mean + the first).";
  s.min_inputs = s.max_inputs = 7;
  s.min_outputs = s.max_outputs = 3;
  s.non_differentiable_inputs = {5, 6};
  s.state_outputs = {{1, 5}, {2, 6}};
  // Every replica computes the same running statistics from the global ones.
  s.local_outputs = {1, 2};
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    const Shape& x = ctx.shape(0);
    RETURN_IF_ERROR(CheckBatchNormX(ctx, x));
    for (int i = 1; i < 7; ++i) RETURN_IF_ERROR(CheckChannelVector(ctx, i, x.dim(1)));
    ctx.set_output(0, ctx.input(0));
    ctx.set_output(1, ctx.dtype(0), ctx.shape(1));
    ctx.set_output(2, ctx.dtype(0), ctx.shape(1));
    return absl::OkStatus();
  };
  s.cost = [](const CostContext& c) {
    return OpCost{4.0 * static_cast<double>(c.InNumel(0)), c.IoBytes()};
  };
  s.grad = [](GradContext& g) -> absl::Status {
    if (g.dy(0).empty()) return absl::OkStatus();
    bool any = false;
    for (int i = 0; i < 5; ++i) any |= g.needs_dx(i);
    if (!any) return absl::OkStatus();
    std::vector<std::string> in = {g.dy(0), g.x(0), g.x(1), g.x(2), g.x(3)};
    if (g.op().attrs.Int("shifted", 0) != 0) in.push_back(g.x(5));
    ASSIGN_OR_RETURN(std::vector<std::string> d,
                     g.b().AddOp("BatchNormApplyGrad", in, g.op().attrs, 5, g.op().name + "_grad"));
    for (int i = 0; i < 5; ++i) {
      if (g.needs_dx(i)) g.set_dx(i, d[i]);
    }
    return absl::OkStatus();
  };
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "BatchNormApplyGrad";
  s.doc =
      "Gradient of BatchNormApply. Inputs dY, X, mean, sqmean, scale and the optional shift "
      "K (statistics about K); outputs dX, dmean, dsqmean, dscale, dbias (the last four summed "
      "over the rows given).";
  s.min_inputs = 5;
  s.max_inputs = 6;
  s.min_outputs = s.max_outputs = 5;
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    if (ctx.shape(0) != ctx.shape(1)) return ctx.Error("dY and X differ in shape");
    ctx.set_output(0, ctx.input(1));
    for (int i = 1; i < 5; ++i) ctx.set_output(i, ctx.input(2));
    return absl::OkStatus();
  };
  s.cost = [](const CostContext& c) {
    return OpCost{8.0 * static_cast<double>(c.InNumel(0)), c.IoBytes()};
  };
  return s;
}());

absl::StatusOr<int> NormAxis(InferContext& ctx, const Shape& x) {
  absl::StatusOr<int> axis = NormalizeAxis(ctx.attrs().Int("axis", -1), x.rank());
  if (!axis.ok()) return ctx.Error(std::string(axis.status().message()));
  for (int i = *axis; i < x.rank(); ++i) {
    if (x.dim(i).batch) return ctx.Error("the normalized dims cannot carry the batch");
  }
  return *axis;
}

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "LayerNormalization";
  s.doc =
      "Normalizes X over the dims from attribute axis (-1) on, then scale and optional "
      "bias (shaped like those dims). Outputs Y, Mean and InvStdDev (X's shape with the "
      "normalized dims set to 1). Attribute epsilon (1e-5).";
  s.min_inputs = 2;
  s.max_inputs = 3;
  s.min_outputs = 1;
  s.max_outputs = 3;
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    const Shape& x = ctx.shape(0);
    ASSIGN_OR_RETURN(int axis, NormAxis(ctx, x));
    std::vector<Dim> norm(x.dims().begin() + axis, x.dims().end());
    std::vector<Dim> stat(x.dims().begin(), x.dims().begin() + axis);
    for (int i = axis; i < x.rank(); ++i) stat.push_back(Dim::Fixed(1));
    const Shape ns(norm);
    for (int i = 1; i < ctx.num_inputs(); ++i) {
      if (!ctx.has_input(i)) continue;
      absl::StatusOr<Shape> b = Broadcast(ns, ctx.shape(i));
      if (!b.ok() || *b != ns) {
        return ctx.Error(absl::StrCat("input ", i, " ", ctx.shape(i).ToString(),
                                      " does not match the normalized dims ", ns.ToString()));
      }
    }
    ctx.set_output(0, ctx.input(0));
    for (int i = 1; i < ctx.num_outputs(); ++i) ctx.set_output(i, ctx.dtype(0), Shape(stat));
    return absl::OkStatus();
  };
  s.cost = [](const CostContext& c) {
    return OpCost{8.0 * static_cast<double>(c.InNumel(0)), c.IoBytes()};
  };
  s.grad = [](GradContext& g) -> absl::Status {
    if (g.op().outputs.size() < 3) {
      return g.Error("needs its Mean and InvStdDev outputs (added by the importer)");
    }
    Attrs a;
    a.SetInt("axis", g.op().attrs.Int("axis", -1));
    ASSIGN_OR_RETURN(std::vector<std::string> d,
                     g.b().AddOp("LayerNormGrad", {g.dy(0), g.x(0), g.x(1), g.y(1), g.y(2)},
                                 std::move(a), 3, g.op().name + "_grad"));
    ASSIGN_OR_RETURN(Shape ss, ShapeOf(g, g.x(1)));
    if (g.needs_dx(0)) g.set_dx(0, d[0]);
    if (g.needs_dx(1)) {
      ASSIGN_OR_RETURN(std::string ds, SumTo(g, d[1], ss));
      g.set_dx(1, ds);
    }
    if (g.op().inputs.size() > 2 && !g.op().inputs[2].empty() && g.needs_dx(2)) {
      ASSIGN_OR_RETURN(Shape bs, ShapeOf(g, g.x(2)));
      ASSIGN_OR_RETURN(std::string db, SumTo(g, d[2], bs));
      g.set_dx(2, db);
    }
    return absl::OkStatus();
  };
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "LayerNormGrad";
  s.doc =
      "Gradient of LayerNormalization. Inputs dY, X, scale, Mean, InvStdDev; outputs dX, "
      "dscale and dbias (shaped like the normalized dims).";
  s.min_inputs = s.max_inputs = 5;
  s.min_outputs = s.max_outputs = 3;
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    const Shape& x = ctx.shape(1);
    if (ctx.shape(0) != x) return ctx.Error("dY and X differ in shape");
    ASSIGN_OR_RETURN(int axis, NormAxis(ctx, x));
    const Shape ns(std::vector<Dim>(x.dims().begin() + axis, x.dims().end()));
    ctx.set_output(0, ctx.input(1));
    ctx.set_output(1, ctx.dtype(0), ns);
    ctx.set_output(2, ctx.dtype(0), ns);
    return absl::OkStatus();
  };
  s.cost = [](const CostContext& c) {
    return OpCost{12.0 * static_cast<double>(c.InNumel(0)), c.IoBytes()};
  };
  return s;
}());

OpSchema SoftmaxLike(const std::string& type, const std::string& grad_type) {
  OpSchema s;
  s.type = type;
  s.doc = type + " along attribute axis (-1).";
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    absl::StatusOr<int> axis = NormalizeAxis(ctx.attrs().Int("axis", -1), ctx.shape(0).rank());
    if (!axis.ok()) return ctx.Error(std::string(axis.status().message()));
    // Each replica holds some of the batch's rows: a softmax across them
    // would normalize over its own rows only.
    if (ctx.shape(0).dim(*axis).batch) {
      return ctx.Error("a softmax along the batch dimension is not supported");
    }
    return InferSameAsInput(ctx);
  };
  s.cost = ElementwiseCost(5);
  s.grad = [grad_type](GradContext& g) -> absl::Status {
    if (!g.needs_dx(0)) return absl::OkStatus();
    Attrs a;
    a.SetInt("axis", g.op().attrs.Int("axis", -1));
    ASSIGN_OR_RETURN(std::string dx, Binary(g, grad_type, g.dy(0), g.y(0), std::move(a)));
    g.set_dx(0, dx);
    return absl::OkStatus();
  };
  return s;
}

OpSchema SoftmaxGradOp(const std::string& type) {
  OpSchema s;
  s.type = type;
  s.doc = "Gradient of softmax-like ops. Inputs dY, Y; attribute axis.";
  s.min_inputs = s.max_inputs = 2;
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    if (ctx.shape(0) != ctx.shape(1)) return ctx.Error("dY and Y differ in shape");
    return InferSameAsInput(ctx);
  };
  s.cost = ElementwiseCost(4);
  return s;
}

QUILT_REGISTER_OP(SoftmaxLike("Softmax", "SoftmaxGrad"));
QUILT_REGISTER_OP(SoftmaxGradOp("SoftmaxGrad"));
QUILT_REGISTER_OP(SoftmaxLike("LogSoftmax", "LogSoftmaxGrad"));
QUILT_REGISTER_OP(SoftmaxGradOp("LogSoftmaxGrad"));

}  // namespace
}  // namespace quilt::ops
