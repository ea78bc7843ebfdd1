// Loss ops, and OneHot, the labels as rows that losses written as
// arithmetic weigh their log-probabilities with. The losses divide by the element count of the
// *global* batch (the runtime passes the global batch size), so replicas working on slices of a
// batch produce partial losses and gradients that sum to the full ones.
#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/graph/ops/op_util.h"

namespace quilt::ops {
namespace {

absl::Status InferSce(InferContext& ctx) {
  if (!IsFloat(ctx.dtype(0))) return ctx.Error("scores must be float");
  if (ctx.dtype(1) != DType::kI64) return ctx.Error("labels must be i64 class indices");
  const Shape& scores = ctx.shape(0);
  absl::StatusOr<int> axis = NormalizeAxis(ctx.attrs().Int("class_axis", 1), scores.rank());
  if (!axis.ok()) return ctx.Error(std::string(axis.status().message()));
  if (scores.rank() < 2) return ctx.Error("scores must have a class dimension and a batch");
  if (scores.dim(*axis).batch) return ctx.Error("the class dimension cannot carry the batch");
  std::vector<Dim> expect;
  for (int i = 0; i < scores.rank(); ++i) {
    if (i != *axis) expect.push_back(scores.dim(i));
  }
  if (ctx.shape(1) != Shape(expect)) {
    return ctx.Error(absl::StrCat("labels ", ctx.shape(1).ToString(), " must be ",
                                  Shape(expect).ToString(), " (scores ", scores.ToString(),
                                  " without the class dim ", *axis, ")"));
  }
  const std::string red = ctx.attrs().String("reduction", "mean");
  if (red != "mean" && red != "sum") return ctx.Error("reduction must be mean or sum");
  return absl::OkStatus();
}

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "SoftmaxCrossEntropyLoss";
  s.doc =
      "Cross entropy of softmax(scores) along attribute class_axis (1, as ONNX; -1 for "
      "class scores in the last dim) against int64 labels; reduction mean (default) or sum. "
      "Attribute ignore_index skips labels equal to it. Outputs the scalar loss and "
      "optionally the log-probabilities.";
  s.min_inputs = s.max_inputs = 2;
  s.min_outputs = 1;
  s.max_outputs = 2;
  s.non_differentiable_inputs = {1};
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(InferSce(ctx));
    ctx.set_output(0, ctx.dtype(0), Shape());
    if (ctx.num_outputs() > 1) ctx.set_output(1, ctx.input(0));
    return absl::OkStatus();
  };
  s.cost = [](const CostContext& c) {
    return OpCost{6.0 * static_cast<double>(c.InNumel(0)), c.IoBytes()};
  };
  s.grad = [](GradContext& g) -> absl::Status {
    if (!g.needs_dx(0)) return absl::OkStatus();
    Attrs a = g.op().attrs;
    ASSIGN_OR_RETURN(std::string dx,
                     g.b().Add("SoftmaxCrossEntropyLossGrad", {g.dy(0), g.x(0), g.x(1)},
                               std::move(a), g.op().name + "_grad"));
    g.set_dx(0, dx);
    return absl::OkStatus();
  };
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "SoftmaxCrossEntropyLossGrad";
  s.doc = "Gradient of SoftmaxCrossEntropyLoss. Inputs dLoss (scalar), scores, labels.";
  s.min_inputs = s.max_inputs = 3;
  s.infer = [](InferContext& ctx) -> absl::Status {
    if (ctx.shape(0).rank() != 0) return ctx.Error("dLoss must be a scalar");
    std::vector<const TensorType*> rest = {&ctx.input(1), &ctx.input(2)};
    InferContext inner(ctx.op(), rest);
    RETURN_IF_ERROR(InferSce(inner));
    ctx.set_output(0, ctx.input(1));
    return absl::OkStatus();
  };
  s.cost = [](const CostContext& c) {
    return OpCost{5.0 * static_cast<double>(c.InNumel(1)), c.IoBytes()};
  };
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "OneHot";
  s.doc =
      "Float32 one-hot rows of int64 labels: the labels' shape with attribute classes "
      "inserted at attribute axis (-1: last). A label equal to attribute ignore_index (when "
      "set) gets a row of zeros; with wrap_negative 1 a label in [-classes, 0) counts from the "
      "end (ONNX's OneHot); any other label outside [0, classes) is an error. No gradient.";
  s.min_inputs = s.max_inputs = 1;
  s.non_differentiable_inputs = {0};
  s.infer = [](InferContext& ctx) -> absl::Status {
    if (ctx.dtype(0) != DType::kI64) return ctx.Error("labels must be int64 class indices");
    const int64_t classes = ctx.attrs().Int("classes", 0);
    if (classes <= 0) return ctx.Error("attribute classes must be positive");
    const int rank = ctx.shape(0).rank();
    absl::StatusOr<int> axis = NormalizeAxis(ctx.attrs().Int("axis", -1), rank + 1);
    if (!axis.ok()) return ctx.Error(std::string(axis.status().message()));
    std::vector<Dim> dims = ctx.shape(0).dims();
    dims.insert(dims.begin() + *axis, Dim::Fixed(classes));
    ctx.set_output(0, DType::kF32, Shape(std::move(dims)));
    return absl::OkStatus();
  };
  s.cost = ElementwiseCost(1);
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "MseLoss";
  s.doc = "Mean over all elements of (prediction - target)^2.";
  s.min_inputs = s.max_inputs = 2;
  s.non_differentiable_inputs = {1};
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    if (ctx.shape(0) != ctx.shape(1)) {
      return ctx.Error(absl::StrCat("prediction ", ctx.shape(0).ToString(), " and target ",
                                    ctx.shape(1).ToString(), " differ"));
    }
    ctx.set_output(0, ctx.dtype(0), Shape());
    return absl::OkStatus();
  };
  s.cost = [](const CostContext& c) {
    return OpCost{3.0 * static_cast<double>(c.InNumel(0)), c.IoBytes()};
  };
  s.grad = [](GradContext& g) -> absl::Status {
    if (!g.needs_dx(0)) return absl::OkStatus();
    ASSIGN_OR_RETURN(std::string dx, g.b().Add("MseLossGrad", {g.dy(0), g.x(0), g.x(1)}, {},
                                               g.op().name + "_grad"));
    g.set_dx(0, dx);
    return absl::OkStatus();
  };
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "MseLossGrad";
  s.doc = "Gradient of MseLoss. Inputs dLoss (scalar), prediction, target.";
  s.min_inputs = s.max_inputs = 3;
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    if (ctx.shape(0).rank() != 0) return ctx.Error("dLoss must be a scalar");
    if (ctx.shape(1) != ctx.shape(2)) return ctx.Error("prediction and target differ");
    ctx.set_output(0, ctx.input(1));
    return absl::OkStatus();
  };
  s.cost = ElementwiseCost(3);
  return s;
}());

}  // namespace
}  // namespace quilt::ops
