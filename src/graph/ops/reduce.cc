// Reductions over listed axes, and their gradient.
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/graph/ops/op_util.h"

namespace quilt::ops {
namespace {

absl::StatusOr<std::vector<bool>> ReducedAxes(const Attrs& attrs, int rank) {
  std::vector<bool> reduced(rank, false);
  const std::vector<int64_t> axes = attrs.Ints("axes");
  if (axes.empty()) {
    if (attrs.Int("noop_with_empty_axes", 0) == 0) reduced.assign(rank, true);
    return reduced;
  }
  for (int64_t a : axes) {
    ASSIGN_OR_RETURN(int ax, NormalizeAxis(a, rank));
    reduced[ax] = true;
  }
  return reduced;
}

// The output of a reduction of `in` over the op's axes (keepdims).
absl::StatusOr<Shape> ReduceOutput(InferContext& ctx, const Shape& in) {
  absl::StatusOr<std::vector<bool>> reduced = ReducedAxes(ctx.attrs(), in.rank());
  if (!reduced.ok()) return ctx.Error(std::string(reduced.status().message()));
  const bool keep = ctx.attrs().Int("keepdims", 1) != 0;
  std::vector<Dim> out;
  for (int i = 0; i < in.rank(); ++i) {
    if (!(*reduced)[i]) {
      out.push_back(in.dim(i));
    } else if (keep) {
      out.push_back(Dim::Fixed(1));
    }
  }
  return Shape(std::move(out));
}

// That the gradient `dy` is what the reduction of `in` makes: its kernel
// walks `in` by the axes and reads dY where they point.
absl::Status CheckReduceGradient(InferContext& ctx, const Shape& dy, const Shape& in) {
  ASSIGN_OR_RETURN(Shape y, ReduceOutput(ctx, in));
  if (dy != y) {
    return ctx.Error(absl::StrCat("the gradient ", dy.ToString(), " is not the shape ",
                                  y.ToString(), " of the reduction of ", in.ToString()));
  }
  return absl::OkStatus();
}

OpSchema Reduce(const std::string& type, bool mean) {
  OpSchema s;
  s.type = type;
  s.linear = true;
  s.doc = type + " over attribute axes (all when empty), keepdims (1).";
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    ASSIGN_OR_RETURN(Shape out, ReduceOutput(ctx, ctx.shape(0)));
    ctx.set_output(0, ctx.dtype(0), out);
    return absl::OkStatus();
  };
  s.cost = [](const CostContext& c) {
    return OpCost{static_cast<double>(c.InNumel(0)), c.IoBytes()};
  };
  s.grad = [mean](GradContext& g) -> absl::Status {
    if (!g.needs_dx(0)) return absl::OkStatus();
    ASSIGN_OR_RETURN(Shape xs, ShapeOf(g, g.x(0)));
    ASSIGN_OR_RETURN(std::vector<bool> reduced, ReducedAxes(g.op().attrs, xs.rank()));
    std::vector<int64_t> axes;
    for (int i = 0; i < xs.rank(); ++i) {
      if (reduced[i]) axes.push_back(i);
    }
    Attrs a;
    a.SetInts("axes", axes);
    // No axis reduced (an identity): said so, as an empty list means all.
    if (axes.empty()) a.SetInt("noop_with_empty_axes", 1);
    a.SetInt("keepdims", g.op().attrs.Int("keepdims", 1));
    a.SetInt("mean", mean);
    EncodeShape(&a, "input_shape", xs);
    ASSIGN_OR_RETURN(std::string dx, Unary(g, "ReduceGrad", g.dy(0), std::move(a)));
    g.set_dx(0, dx);
    return absl::OkStatus();
  };
  return s;
}

QUILT_REGISTER_OP(Reduce("ReduceSum", false));
QUILT_REGISTER_OP(Reduce("ReduceMean", true));

QUILT_REGISTER_OP([] {
  OpSchema s = Reduce("ReduceMax", false);
  s.linear = false;
  s.doc =
      "Maximum over attribute axes (all when empty), keepdims (1); not over the batch dim (each "
      "replica holds part of the batch). The gradient goes to the maxima, split evenly among "
      "ties.";
  auto infer = s.infer;
  s.infer = [infer](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(infer(ctx));
    const int batch = ctx.shape(0).BatchAxis();
    absl::StatusOr<std::vector<bool>> reduced = ReducedAxes(ctx.attrs(), ctx.shape(0).rank());
    if (!reduced.ok()) return ctx.Error(std::string(reduced.status().message()));
    if (batch >= 0 && (*reduced)[batch]) {
      return ctx.Error(
          "a maximum over the batch dim is not supported (each replica holds part of "
          "the batch)");
    }
    return absl::OkStatus();
  };
  s.grad = [](GradContext& g) -> absl::Status {
    if (!g.needs_dx(0)) return absl::OkStatus();
    Attrs a = g.op().attrs;
    ASSIGN_OR_RETURN(std::string dx, g.b().Add("ReduceMaxGrad", {g.dy(0), g.x(0), g.y(0)},
                                               std::move(a), g.op().name + "_grad"));
    g.set_dx(0, dx);
    return absl::OkStatus();
  };
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "ReduceMaxGrad";
  s.doc =
      "Gradient of ReduceMax: inputs dY, X, Y; dY where X equals its maximum, split evenly "
      "among ties, else 0 (X's shape).";
  s.min_inputs = s.max_inputs = 3;
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    RETURN_IF_ERROR(CheckReduceGradient(ctx, ctx.shape(0), ctx.shape(1)));
    if (ctx.shape(2) != ctx.shape(0)) {
      return ctx.Error(absl::StrCat("the maxima ", ctx.shape(2).ToString(), " are not shaped as ",
                                    "the gradient ", ctx.shape(0).ToString()));
    }
    ctx.set_output(0, ctx.dtype(1), ctx.shape(1));
    return absl::OkStatus();
  };
  s.cost = [](const CostContext& c) {
    return OpCost{2.0 * static_cast<double>(c.OutNumel(0)), c.IoBytes()};
  };
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "ReduceGrad";
  s.linear = true;
  s.doc =
      "Gradient of ReduceSum / ReduceMean: dY broadcast back to attribute input_shape "
      "over attribute axes (divided by their element count when mean = 1).";
  s.infer = [](InferContext& ctx) -> absl::Status {
    absl::StatusOr<Shape> in = DecodeShape(ctx.attrs(), "input_shape");
    if (!in.ok()) return ctx.Error(std::string(in.status().message()));
    RETURN_IF_ERROR(CheckReduceGradient(ctx, ctx.shape(0), *in));
    ctx.set_output(0, ctx.dtype(0), *in);
    return absl::OkStatus();
  };
  s.cost = [](const CostContext& c) {
    return OpCost{static_cast<double>(c.OutNumel(0)), c.IoBytes()};
  };
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "Dropout";
  s.doc =
      "Training-mode dropout: zeroes each element with probability attribute ratio (0.5) "
      "and scales the rest by 1/(1-ratio). Outputs Y and the mask (0 or 1/(1-ratio)). The "
      "mask is a pure function of (seed, op, step, global element index), so it is the "
      "same however the batch is split.";
  s.min_outputs = 1;
  s.max_outputs = 2;
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    const double r = ctx.attrs().Float("ratio", 0.5);
    if (!(r >= 0 && r < 1)) return ctx.Error("ratio must be in [0, 1)");
    for (int i = 0; i < ctx.num_outputs(); ++i) ctx.set_output(i, ctx.input(0));
    return absl::OkStatus();
  };
  s.cost = ElementwiseCost(4);
  s.grad = [](GradContext& g) -> absl::Status {
    if (!g.needs_dx(0)) return absl::OkStatus();
    if (g.op().outputs.size() < 2) return g.Error("needs its mask output (added by the importer)");
    ASSIGN_OR_RETURN(std::string dx, Binary(g, "Mul", g.dy(0), g.y(1)));
    g.set_dx(0, dx);
    return absl::OkStatus();
  };
  return s;
}());

}  // namespace
}  // namespace quilt::ops
