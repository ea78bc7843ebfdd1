#include "src/coordinator/job_model.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/common/status.h"
#include "src/graph/autodiff.h"
#include "src/graph/model_loader.h"
#include "src/graph/validate.h"
#include "src/graph/zoo/zoo.h"
#include "src/runtime/data/npz.h"

namespace quilt {
namespace {

absl::StatusOr<Graph> ForwardGraph(const quilt::v1::JobSpec& spec) {
  switch (spec.model_case()) {
    case quilt::v1::JobSpec::kZoo: {
      absl::StatusOr<Graph> g = zoo::BuildZooModel(spec.zoo(), spec.seed());
      if (!g.ok()) return absl::InvalidArgumentError(std::string(g.status().message()));
      return g;
    }
    case quilt::v1::JobSpec::kOnnx:
      return LoadOnnxBytes(spec.onnx(), spec.global_batch(), "the job's ONNX model",
                           spec.loss_output());
    case quilt::v1::JobSpec::kGraph: {
      absl::StatusOr<Graph> g = Graph::FromProto(spec.graph());
      if (!g.ok()) return Annotate(g.status(), "the job's graph");
      RETURN_IF_ERROR(Annotate(ValidateGraph(&*g), "the job's graph"));
      return g;
    }
    default:
      return absl::InvalidArgumentError("the job names no model (graph, onnx or zoo)");
  }
}

// The job's initial weights (an .npz) in place of its parameters' initial
// values.
absl::Status ApplyInitialWeights(const std::string& npz, Graph* g) {
  ASSIGN_OR_RETURN(auto arrays, ParseNpz(npz, "the job's initial weights"));
  for (auto& [name, value] : arrays) {
    ParameterSpec* p = g->FindParameter(name);
    if (p == nullptr) {
      std::vector<std::string> names;
      for (const ParameterSpec& q : g->parameters) names.push_back(q.tensor);
      if (names.size() > 8) names.resize(8), names.push_back("…");
      return absl::InvalidArgumentError(
          absl::StrCat("the job's initial weights name '", name, "', which is no parameter of the ",
                       "model (its parameters: ", absl::StrJoin(names, ", "), ")"));
    }
    const TensorInfo* info = g->FindTensor(name);
    const std::vector<int64_t> dims = info->shape.Concrete(1);
    if (value.dtype() != info->dtype || info->shape.HasBatch() || value.dims() != dims) {
      return absl::InvalidArgumentError(
          absl::StrCat("the job's initial weights give '", name, "' as ", value.TypeString(),
                       ", but the model's is ", DTypeName(info->dtype), info->shape.ToString()));
    }
    p->value = std::move(value);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Graph> TrainingGraphForJob(const quilt::v1::JobSpec& spec) {
  if (spec.global_batch() < 1) {
    return absl::InvalidArgumentError("the job's global_batch must be at least 1");
  }
  RETURN_IF_ERROR(CheckGlobalBatch(spec.global_batch()));
  ASSIGN_OR_RETURN(Graph g, ForwardGraph(spec));
  if (!spec.initial_weights().empty()) {
    RETURN_IF_ERROR(ApplyInitialWeights(spec.initial_weights(), &g));
  }
  if (g.has_backward) {
    if (spec.frozen_size() > 0) {
      return absl::InvalidArgumentError("frozen parameters need a model without its backward pass");
    }
    return g;
  }
  RETURN_IF_ERROR(
      FreezeParameters(&g, std::vector<std::string>(spec.frozen().begin(), spec.frozen().end())));
  TrainingOptions to;
  switch (spec.loss()) {
    case quilt::v1::Loss::TYPE_SOFTMAX_CROSS_ENTROPY: {
      ASSIGN_OR_RETURN(to.loss, ChooseLoss(LossType::kSoftmaxCrossEntropy,
                                           "the job's loss softmax_cross_entropy", &g));
      break;
    }
    case quilt::v1::Loss::TYPE_MSE: {
      ASSIGN_OR_RETURN(to.loss, ChooseLoss(LossType::kMse, "the job's loss mse", &g));
      break;
    }
    default:
      if (g.loss.type == LossType::kNone) {
        return absl::InvalidArgumentError(
            "the model defines no loss and the job sets none: set one (softmax_cross_entropy or "
            "mse; quiltctl submit --loss)");
      }
      break;
  }
  to.optimizer = OptimizerFromProto(spec.optimizer());
  if (to.optimizer.kind == OptimizerSpec::Kind::kNone) {
    return absl::InvalidArgumentError("the job sets no optimizer (sgd or adam)");
  }
  const OptimizerSpec& o = to.optimizer;
  if (!(o.learning_rate > 0) || !std::isfinite(o.learning_rate)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the job's learning rate must be a positive finite number, got ", o.learning_rate));
  }
  if (!(o.momentum >= 0 && o.momentum <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the job's momentum must be in [0, 1], got ", o.momentum));
  }
  if (!(o.weight_decay >= 0) || !std::isfinite(o.weight_decay)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the job's weight decay must be a finite number >= 0, got ", o.weight_decay));
  }
  if (o.kind == OptimizerSpec::Kind::kAdam &&
      (!(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1))) {
    return absl::InvalidArgumentError(
        absl::StrCat("the job's Adam betas must be in [0, 1), got ", o.beta1, " and ", o.beta2));
  }
  RETURN_IF_ERROR(Annotate(BuildTrainingGraph(&g, to), "building the training graph"));
  return g;
}

}  // namespace quilt
