#include "src/graph/autodiff.h"

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/graph/batch_layout.h"
#include "src/graph/graph_builder.h"
#include "src/graph/op_registry.h"
#include "src/graph/validate.h"

namespace quilt {
namespace {

// Ops whose gradient needs outputs that a forward-only graph may omit.
absl::Status AddSavedOutputs(Graph* g) {
  for (Op& op : g->ops) {
    size_t want = 0;
    if (op.type == "LayerNormalization") want = 3;
    if (op.type == "Dropout") want = 2;
    while (op.outputs.size() < want) {
      const std::string name = absl::StrCat(op.name, ":saved", op.outputs.size());
      op.outputs.push_back(name);
    }
  }
  return InferShapes(g);
}

absl::Status AddLoss(Graph* g, const TrainingOptions& options) {
  if (!g->loss.output.empty()) return absl::OkStatus();
  LossSpec& loss = g->loss;
  if (loss.type == LossType::kNone) loss.type = options.loss;
  if (loss.type == LossType::kNone) {
    return absl::InvalidArgumentError("the graph has no loss; choose one (e.g. --loss)");
  }
  if (loss.prediction.empty()) {
    RETURN_IF_ERROR(CheckLossTarget(*g));
    loss.prediction = g->outputs[0];
  }
  GraphBuilder b(g);
  ASSIGN_OR_RETURN(TensorType pred, b.TypeOf(loss.prediction));
  const int64_t class_axis = options.class_axis != TrainingOptions::kAutoClassAxis
                                 ? options.class_axis
                             : pred.shape.rank() >= 4 ? 1
                                                      : -1;
  if (loss.label.empty()) {
    Shape label_shape = pred.shape;
    DType label_type = pred.dtype;
    if (loss.type == LossType::kSoftmaxCrossEntropy) {
      ASSIGN_OR_RETURN(int axis, NormalizeAxis(class_axis, pred.shape.rank()));
      std::vector<Dim> dims;
      for (int i = 0; i < pred.shape.rank(); ++i) {
        if (i != axis) dims.push_back(pred.shape.dim(i));
      }
      label_shape = Shape(std::move(dims));
      label_type = DType::kI64;
    }
    ASSIGN_OR_RETURN(loss.label, b.AddInput(b.UniqueName("labels"), label_type, label_shape,
                                            TensorRole::kLabel));
  }
  Attrs attrs;
  std::string type = "MseLoss";
  if (loss.type == LossType::kSoftmaxCrossEntropy) {
    type = "SoftmaxCrossEntropyLoss";
    attrs.SetInt("class_axis", class_axis);
  }
  b.set_role(TensorRole::kLoss);
  ASSIGN_OR_RETURN(loss.output,
                   b.Add(type, {loss.prediction, loss.label}, std::move(attrs), "loss"));
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckLossTarget(const Graph& g) {
  if (g.outputs.empty()) return absl::InvalidArgumentError("the graph has no output to train");
  const TensorInfo* out = g.FindTensor(g.outputs[0]);
  if (out != nullptr && out->shape.rank() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the model's output '", g.outputs[0],
        "' is a scalar that reads no labels or no weight: a loss the model computes must read "
        "the labels as its second input (forward(x, y)); a loss without labels is not "
        "supported yet: export the model without its loss and pass --loss "
        "softmax_cross_entropy or --loss mse"));
  }
  return absl::OkStatus();
}

absl::Status BuildTrainingGraph(Graph* g, const TrainingOptions& options) {
  if (g->has_backward)
    return absl::FailedPreconditionError("the graph already has a backward pass");
  if (options.optimizer.kind == OptimizerSpec::Kind::kNone) {
    return absl::InvalidArgumentError("no optimizer given");
  }
  g->optimizer = options.optimizer;
  RETURN_IF_ERROR(AddSavedOutputs(g));
  RETURN_IF_ERROR(AddLoss(g, options));
  RETURN_IF_ERROR(ValidateGraph(g));
  if (TensorInfo* l = g->MutableTensor(g->loss.output)) l->role = TensorRole::kLoss;

  ASSIGN_OR_RETURN(std::vector<int> order, g->TopologicalOrder());
  // Tensors that depend on a trainable parameter.
  std::set<std::string> trainable;
  for (const ParameterSpec& p : g->parameters) {
    if (!p.frozen) trainable.insert(p.tensor);
  }
  if (trainable.empty()) return absl::InvalidArgumentError("the graph has no trainable parameter");
  std::set<std::string> depends(trainable.begin(), trainable.end());
  for (int i : order) {
    const Op& op = g->ops[i];
    const OpSchema* schema = OpRegistry::Global().Find(op.type);
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      bool nd = false;
      for (int n : schema->non_differentiable_inputs) nd |= n == static_cast<int>(k);
      if (!nd && depends.count(op.inputs[k])) {
        depends.insert(op.outputs.begin(), op.outputs.end());
        break;
      }
    }
  }
  if (!depends.count(g->loss.output)) {
    return absl::InvalidArgumentError("the loss does not depend on any trainable parameter");
  }

  GraphBuilder b(g, "grad/");
  b.set_role(TensorRole::kGradient);
  std::map<std::string, std::vector<std::string>> contributions;
  ASSIGN_OR_RETURN(std::string one, b.AddConstant("loss_seed", Tensor::ScalarF32(1.0f)));
  contributions[g->loss.output].push_back(one);

  // Sums the contributions to `tensor` into one gradient tensor ("" if none).
  auto gradient_of = [&](const std::string& tensor) -> absl::StatusOr<std::string> {
    auto it = contributions.find(tensor);
    if (it == contributions.end() || it->second.empty()) return std::string();
    if (it->second.size() == 1) return it->second[0];
    ASSIGN_OR_RETURN(std::string sum, b.Add("Sum", it->second, {}, tensor + "_sum"));
    it->second = {sum};
    return sum;
  };

  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    // Copy: adding ops may reallocate g->ops.
    const Op op = g->ops[*it];
    std::vector<std::string> dy;
    bool any = false;
    for (const std::string& out : op.outputs) {
      ASSIGN_OR_RETURN(std::string d, gradient_of(out));
      any |= !d.empty();
      dy.push_back(d);
    }
    if (!any) continue;
    const OpSchema* schema = OpRegistry::Global().Find(op.type);
    std::vector<bool> needs(op.inputs.size(), false);
    bool need_any = false;
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      bool nd = false;
      for (int n : schema->non_differentiable_inputs) nd |= n == static_cast<int>(k);
      const TensorInfo* t = g->FindTensor(op.inputs[k]);
      needs[k] = !nd && !op.inputs[k].empty() && depends.count(op.inputs[k]) && t != nullptr &&
                 IsFloat(t->dtype);
      need_any |= needs[k];
    }
    if (!need_any) continue;
    if (!schema->grad) {
      return absl::InvalidArgumentError(absl::StrCat("op '", op.name, "' (", op.type,
                                                     ") is on the path to the loss but has no "
                                                     "gradient"));
    }
    // Outputs without a gradient contribute zeros; builders see "".
    b.set_forward_op(op.name);
    GradContext ctx(&b, op, dy, needs);
    RETURN_IF_ERROR(schema->grad(ctx));
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      if (needs[k] && !ctx.dx()[k].empty()) contributions[op.inputs[k]].push_back(ctx.dx()[k]);
    }
  }

  // First forward consumer of each parameter: its update joins that op's group.
  std::map<std::string, std::string> first_consumer;
  for (int i : order) {
    for (const std::string& in : g->ops[i].inputs) first_consumer.emplace(in, g->ops[i].name);
  }
  GraphBuilder u(g, "update/");
  const OptimizerSpec& opt = options.optimizer;
  for (const ParameterSpec& p : std::vector<ParameterSpec>(g->parameters)) {
    if (p.frozen) continue;
    ASSIGN_OR_RETURN(std::string grad, gradient_of(p.tensor));
    if (grad.empty()) continue;  // unused parameter: never updated (as in PyTorch)
    if (TensorInfo* t = g->MutableTensor(grad)) t->role = TensorRole::kGradient;
    ASSIGN_OR_RETURN(TensorType type, u.TypeOf(p.tensor));
    u.set_forward_op(first_consumer[p.tensor]);
    auto state = [&](const std::string& suffix) -> absl::StatusOr<std::string> {
      const std::string name = p.tensor + suffix;
      RETURN_IF_ERROR(g->AddTensor({name, type.dtype, type.shape, TensorRole::kOptimizerState}));
      return name;
    };
    Attrs a;
    a.SetFloat("lr", opt.learning_rate);
    a.SetFloat("weight_decay", opt.weight_decay);
    std::vector<std::string> ins = {p.tensor, grad}, targets = {p.tensor};
    std::string type_name;
    if (opt.kind == OptimizerSpec::Kind::kSgd) {
      type_name = "SgdUpdate";
      a.SetFloat("momentum", opt.momentum);
      a.SetInt("nesterov", opt.nesterov);
      if (opt.momentum != 0) {
        ASSIGN_OR_RETURN(std::string v, state(".momentum"));
        ins.push_back(v);
        targets.push_back(v);
      }
    } else {
      type_name = "AdamUpdate";
      a.SetFloat("beta1", opt.beta1);
      a.SetFloat("beta2", opt.beta2);
      a.SetFloat("epsilon", opt.epsilon);
      ASSIGN_OR_RETURN(std::string m, state(".adam_m"));
      ASSIGN_OR_RETURN(std::string v, state(".adam_v"));
      ins.insert(ins.end(), {m, v});
      targets.insert(targets.end(), {m, v});
    }
    ASSIGN_OR_RETURN(
        std::vector<std::string> outs,
        u.AddOp(type_name, ins, std::move(a), static_cast<int>(targets.size()), p.tensor));
    for (size_t i = 0; i < targets.size(); ++i) g->updates.push_back({targets[i], outs[i]});
  }
  // Op-declared state (e.g. batch-norm running statistics).
  for (int i : order) {
    const Op& op = g->ops[i];
    const OpSchema* schema = OpRegistry::Global().Find(op.type);
    for (const auto& [out, in] : schema->state_outputs) {
      if (out < static_cast<int>(op.outputs.size()) && in < static_cast<int>(op.inputs.size())) {
        g->updates.push_back({op.inputs[in], op.outputs[out]});
      }
    }
  }
  g->has_backward = true;
  RETURN_IF_ERROR(ValidateGraph(g));
  MarkInterleavedBatches(g);
  return absl::OkStatus();
}

}  // namespace quilt
