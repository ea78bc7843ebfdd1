// Converters of the class losses and of one-hot labels:
// SoftmaxCrossEntropyLoss (Quilt's op of that name where it computes it:
// a mean or a sum of class labels without class weights; probability
// targets too), NegativeLogLikelihoodLoss, and
// OneHot (F.one_hot: label smoothing and focal losses written by hand).
// Class weights, per-position losses (reduction "none") and NLL are the
// log-probabilities times the labels' one-hot rows (a OneHot op, which
// checks the labels) summed; a weighted mean divides by the labels' total
// weight, and both sums cover the whole batch when replicas hold parts.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/graph/onnx/converter_parts.h"

namespace quilt::onnx_import {
namespace {

std::string NameOf(const Node& node) { return node.name().empty() ? node.op_type() : node.name(); }

absl::StatusOr<std::string> ReduceAll(ImportContext& ctx, const std::string& x,
                                      std::vector<int64_t> axes, const std::string& name) {
  Attrs a;
  if (!axes.empty()) a.SetInts("axes", std::move(axes));
  a.SetInt("keepdims", 0);
  return ctx.b().Add("ReduceSum", {x}, std::move(a), name);
}

// The class weights as a constant [C, 1, ...] against scores of `shape`
// (classes on axis 1). Errors: INVALID_ARGUMENT unless one per class.
absl::StatusOr<std::string> WeightConstant(ImportContext& ctx, const Node& node,
                                           const Tensor& weights, const Shape& shape) {
  const int64_t classes = shape.dim(1).value;
  RETURN_IF_ERROR(CheckNumeric(weights, node.op_type()));
  if (weights.numel() != classes) {
    return absl::InvalidArgumentError(absl::StrCat(node.op_type(), " '", NameOf(node),
                                                   "': ", weights.numel(), " class weights for ",
                                                   classes, " classes"));
  }
  std::vector<int64_t> dims(static_cast<size_t>(shape.rank() - 1), 1);
  dims[0] = classes;
  std::vector<float> w;
  for (int64_t c = 0; c < classes; ++c) w.push_back(static_cast<float>(NumberAt(weights, c)));
  return ctx.b().AddConstant(NameOf(node) + "/class_weights", Tensor::FromF32(dims, w));
}

// −Σ weight[label] · logp[label] over the labels `node` does not ignore,
// with classes on axis 1 of `logp`: per position (reduction "none"), summed,
// or divided by the labels' total weight ("mean"; a step whose labels are
// all ignored has loss 0 and no gradient). `weights`: one per class, or
// null for 1. Maps the node's output 0 (and 1, the log-probabilities, when
// it has one).
absl::Status WeightedNll(ImportContext& ctx, const Node& node, const std::string& logp,
                         const Tensor* weights, const std::string& reduction) {
  const std::string at = NameOf(node);
  ASSIGN_OR_RETURN(std::string labels, ctx.Data(node, 1));
  ASSIGN_OR_RETURN(TensorType lt, ctx.TypeOf(logp));
  const Shape& shape = lt.shape;
  if (shape.rank() < 2 || shape.dim(1).batch) {
    return absl::InvalidArgumentError(
        absl::StrCat(node.op_type(), " '", at, "': scores ", shape.ToString(),
                     " must be [N, C, ...] with the classes on axis 1 and the batch elsewhere"));
  }
  const int64_t classes = shape.dim(1).value;
  ASSIGN_OR_RETURN(TensorType label_type, ctx.TypeOf(labels));
  std::vector<Dim> per_position = shape.dims();
  per_position.erase(per_position.begin() + 1);
  if (label_type.shape != Shape(per_position)) {
    return absl::InvalidArgumentError(absl::StrCat(node.op_type(), " '", at, "': labels ",
                                                   label_type.shape.ToString(), " must be ",
                                                   Shape(per_position).ToString(), " (the scores ",
                                                   shape.ToString(), " without the classes)"));
  }
  Attrs oh;
  oh.SetInt("classes", classes);
  oh.SetInt("axis", 1);
  if (FindAttr(node, "ignore_index") != nullptr) {
    oh.SetInt("ignore_index", AttrInt(node, "ignore_index", 0));
  }
  ASSIGN_OR_RETURN(std::string rows, ctx.b().Add("OneHot", {labels}, std::move(oh), at + "/rows"));
  float floor = 1;  // the least total weight of a step with a kept label
  if (weights != nullptr) {
    ASSIGN_OR_RETURN(std::string wc, WeightConstant(ctx, node, *weights, shape));
    float least = 0;
    for (int64_t c = 0; c < classes; ++c) {
      const float w = static_cast<float>(NumberAt(*weights, c));
      if (w > 0 && (least == 0 || w < least)) least = w;
    }
    if (least > 0) floor = least;
    ASSIGN_OR_RETURN(rows, ctx.b().Add("Mul", {rows, wc}, {}, at + "/weighted_rows"));
  }
  if (node.output_size() > 1 && !node.output(1).empty()) ctx.SetTensor(node.output(1), logp);
  ASSIGN_OR_RETURN(std::string picked, ctx.b().Add("Mul", {logp, rows}, {}, at + "/picked"));
  if (reduction == "none") {
    ASSIGN_OR_RETURN(std::string per, ReduceAll(ctx, picked, {1}, at + "/per_position"));
    return ctx.Emit(node, "Neg", {per}, {}, 1, 1);
  }
  ASSIGN_OR_RETURN(std::string total, ReduceAll(ctx, picked, {}, at + "/total"));
  if (reduction == "sum") return ctx.Emit(node, "Neg", {total}, {}, 1, 1);
  ASSIGN_OR_RETURN(std::string loss_sum, ctx.b().Add("Neg", {total}, {}, at + "/sum"));
  ASSIGN_OR_RETURN(std::string weight_sum, ReduceAll(ctx, rows, {}, at + "/weight_sum"));
  Attrs at_least;
  at_least.SetFloat("min", floor);
  ASSIGN_OR_RETURN(std::string divisor,
                   ctx.b().Add("Clip", {weight_sum}, std::move(at_least), at + "/divisor"));
  return ctx.Emit(node, "Div", {loss_sum, divisor}, {}, 1, 1);
}

// −Σ_c weight[c] · target[c] · logp[c] of probability targets (float
// labels shaped as the scores; F.cross_entropy takes them for mixup or
// distillation): per position ("none"), summed, or averaged over the
// positions (PyTorch's mean for such targets, whatever the weights).
absl::Status SoftTargetNll(ImportContext& ctx, const Node& node, const std::string& logp,
                           const std::string& targets, const Tensor* weights,
                           const std::string& reduction) {
  const std::string at = NameOf(node);
  ASSIGN_OR_RETURN(TensorType lt, ctx.TypeOf(logp));
  ASSIGN_OR_RETURN(TensorType tt, ctx.TypeOf(targets));
  if (lt.shape != tt.shape || lt.shape.rank() < 2 || lt.shape.dim(1).batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        node.op_type(), " '", at, "': probability targets ", tt.shape.ToString(),
        " must have the scores' shape ", lt.shape.ToString(), " with the classes on axis 1"));
  }
  std::string weighted = targets;
  if (weights != nullptr) {
    ASSIGN_OR_RETURN(std::string wc, WeightConstant(ctx, node, *weights, lt.shape));
    ASSIGN_OR_RETURN(weighted, ctx.b().Add("Mul", {targets, wc}, {}, at + "/weighted_targets"));
  }
  if (node.output_size() > 1 && !node.output(1).empty()) ctx.SetTensor(node.output(1), logp);
  ASSIGN_OR_RETURN(std::string picked, ctx.b().Add("Mul", {logp, weighted}, {}, at + "/picked"));
  ASSIGN_OR_RETURN(std::string per, ReduceAll(ctx, picked, {1}, at + "/per_position"));
  if (reduction == "none") return ctx.Emit(node, "Neg", {per}, {}, 1, 1);
  Attrs all;
  all.SetInt("keepdims", 0);
  ASSIGN_OR_RETURN(std::string total, ctx.b().Add(reduction == "sum" ? "ReduceSum" : "ReduceMean",
                                                  {per}, std::move(all), at + "/" + reduction));
  return ctx.Emit(node, "Neg", {total}, {}, 1, 1);
}

absl::StatusOr<std::string> Reduction(const Node& node) {
  const std::string reduction = AttrString(node, "reduction", "mean");
  if (reduction != "mean" && reduction != "sum" && reduction != "none") {
    return absl::InvalidArgumentError(
        absl::StrCat(node.op_type(), " reduction '", reduction, "' is not one of mean, sum, none"));
  }
  return reduction;
}

// The constant class weights of input 2, or null without them.
absl::StatusOr<const Tensor*> ClassWeights(ImportContext& ctx, const Node& node) {
  if (!ctx.HasInput(node, 2)) return nullptr;
  const Tensor* w = ctx.ConstantInput(node, 2);
  if (w == nullptr || ctx.IsParameterInitializer(node, 2)) {
    return absl::InvalidArgumentError(
        absl::StrCat(node.op_type(), " '", NameOf(node), "': class weights '", node.input(2),
                     "' are computed or trained by the model; constant class weights (a "
                     "tensor or buffer passed as weight=) are supported"));
  }
  return w;
}

}  // namespace

absl::Status Sce(ImportContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(const std::string reduction, Reduction(node));
  ASSIGN_OR_RETURN(const Tensor* weights, ClassWeights(ctx, node));
  ASSIGN_OR_RETURN(std::string scores, ctx.Data(node, 0));
  ASSIGN_OR_RETURN(std::string labels, ctx.Data(node, 1));
  ASSIGN_OR_RETURN(TensorType label_type, ctx.TypeOf(labels));
  const bool probabilities = label_type.dtype == DType::kF32;
  const std::string at = NameOf(node);
  if (weights != nullptr || reduction == "none" || probabilities) {
    Attrs a;
    a.SetInt("axis", 1);
    ASSIGN_OR_RETURN(std::string logp,
                     ctx.b().Add("LogSoftmax", {scores}, std::move(a), at + "/log_softmax"));
    if (probabilities) return SoftTargetNll(ctx, node, logp, labels, weights, reduction);
    return WeightedNll(ctx, node, logp, weights, reduction);
  }
  Attrs a;
  a.SetInt("class_axis", 1);
  a.SetString("reduction", reduction);
  const bool ignores = FindAttr(node, "ignore_index") != nullptr;
  const int64_t ignore_index = AttrInt(node, "ignore_index", 0);
  if (ignores) a.SetInt("ignore_index", ignore_index);
  // Which output is the loss is decided after the import (model_loss.h).
  if (!ignores || reduction != "mean") {
    return ctx.Emit(node, "SoftmaxCrossEntropyLoss", {scores, labels}, std::move(a),
                    std::min(2, node.output_size()));
  }
  // The mean over the labels not ignored, as their sum over their count:
  // replicas holding part of the batch hold parts of both (a mean of each
  // replica's own mean is not the batch's). A step whose labels are all
  // ignored has loss 0 and no gradient (PyTorch's loss is NaN there, its
  // gradient 0): the count is at least 1.
  a.SetString("reduction", "sum");
  ASSIGN_OR_RETURN(std::vector<std::string> sce,
                   ctx.b().AddOp("SoftmaxCrossEntropyLoss", {scores, labels}, std::move(a),
                                 std::min(2, node.output_size()), at + "/sum"));
  if (node.output_size() > 1 && !node.output(1).empty()) ctx.SetTensor(node.output(1), sce[1]);
  ASSIGN_OR_RETURN(std::string ignored,
                   ctx.b().AddConstant(at + "/ignore_index",
                                       Tensor::FromI64({}, std::vector<int64_t>{ignore_index})));
  Attrs eq;
  eq.SetString("mode", "eq");
  ASSIGN_OR_RETURN(std::string skip,
                   ctx.b().Add("CompareMask", {labels, ignored}, std::move(eq), at + "/ignored"));
  ASSIGN_OR_RETURN(std::string one, ScalarConstant(ctx, at + "/one", 1));
  ASSIGN_OR_RETURN(std::string kept, ctx.b().Add("Sub", {one, skip}, {}, at + "/kept"));
  ASSIGN_OR_RETURN(std::string kept_count, ReduceAll(ctx, kept, {}, at + "/kept_count"));
  Attrs at_least_one;
  at_least_one.SetFloat("min", 1.0);
  ASSIGN_OR_RETURN(std::string count,
                   ctx.b().Add("Clip", {kept_count}, std::move(at_least_one), at + "/count"));
  return ctx.Emit(node, "Div", {sce[0], count}, {}, 1, 1);
}

absl::Status Nll(ImportContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(const std::string reduction, Reduction(node));
  ASSIGN_OR_RETURN(const Tensor* weights, ClassWeights(ctx, node));
  ASSIGN_OR_RETURN(std::string logp, ctx.Data(node, 0));
  return WeightedNll(ctx, node, logp, weights, reduction);
}

absl::Status OneHotNode(ImportContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(Tensor depth, ctx.Const(node, 1));
  ASSIGN_OR_RETURN(Tensor values, ctx.Const(node, 2));
  RETURN_IF_ERROR(CheckNumeric(depth, "OneHot"));
  RETURN_IF_ERROR(CheckNumeric(values, "OneHot"));
  if (depth.numel() != 1 || values.numel() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "OneHot '", NameOf(node), "': depth must be one number and values two (off, on); got ",
        depth.numel(), " and ", values.numel()));
  }
  const int64_t classes = static_cast<int64_t>(NumberAt(depth, 0));
  const double off = NumberAt(values, 0), on = NumberAt(values, 1);
  const std::string at = NameOf(node);
  if (classes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "OneHot '", at, "': depth ", classes, " is no class count",
        classes == -1 ? " (F.one_hot without num_classes takes it from the labels at run time; "
                        "give num_classes)"
                      : ""));
  }
  ASSIGN_OR_RETURN(std::string indices, ctx.Data(node, 0));
  Attrs a;
  a.SetInt("classes", classes);
  a.SetInt("axis", AttrInt(node, "axis", -1));
  // ONNX counts a negative index from the end; PyTorch's F.one_hot, which
  // exports this node, refuses one: so does the kernel (a label that is no
  // class), as the cross-entropy does.
  a.SetInt("wrap_negative", 0);
  const bool affine = off != 0 || on != 1;
  const bool integer = values.dtype() == DType::kI64 || values.dtype() == DType::kI32;
  if (!affine && !integer) return ctx.Emit(node, "OneHot", {indices}, std::move(a));
  ASSIGN_OR_RETURN(std::string rows, ctx.b().Add("OneHot", {indices}, std::move(a), at + "/rows"));
  if (affine) {
    ASSIGN_OR_RETURN(std::string scale,
                     ScalarConstant(ctx, at + "/on_minus_off", static_cast<float>(on - off)));
    ASSIGN_OR_RETURN(std::string base, ScalarConstant(ctx, at + "/off", static_cast<float>(off)));
    ASSIGN_OR_RETURN(rows, ctx.b().Add("Mul", {rows, scale}, {}, at + "/scaled"));
    if (!integer) return ctx.Emit(node, "Add", {rows, base}, {});
    ASSIGN_OR_RETURN(rows, ctx.b().Add("Add", {rows, base}, {}, at + "/shifted"));
  }
  Attrs cast;
  cast.SetString("to", "i64");
  return ctx.Emit(node, "Cast", {rows}, std::move(cast));
}

}  // namespace quilt::onnx_import
