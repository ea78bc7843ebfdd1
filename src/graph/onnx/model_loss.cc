#include "src/graph/onnx/model_loss.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/common/status.h"

namespace quilt::onnx_import {
namespace {

// The graph inputs each tensor is computed from (by input index).
absl::StatusOr<std::map<std::string, std::set<int>>> InputsOf(const Graph& g) {
  std::map<std::string, std::set<int>> from;
  for (size_t i = 0; i < g.inputs.size(); ++i) from[g.inputs[i]].insert(static_cast<int>(i));
  ASSIGN_OR_RETURN(std::vector<int> order, g.TopologicalOrder());
  for (int i : order) {
    const Op& op = g.ops[i];
    std::set<int> in;
    for (const std::string& t : op.inputs) {
      auto it = from.find(t);
      if (it != from.end()) in.insert(it->second.begin(), it->second.end());
    }
    if (in.empty()) continue;
    for (const std::string& t : op.outputs) from[t].insert(in.begin(), in.end());
  }
  return from;
}

void MoveToLabels(Graph* g, const std::string& label) {
  g->inputs.erase(std::find(g->inputs.begin(), g->inputs.end(), label));
  g->labels.push_back(label);
  g->MutableTensor(label)->role = TensorRole::kLabel;
}

}  // namespace

std::string SourceInput(const Graph& g, std::string tensor) {
  const std::set<std::string> views = {"Reshape", "Flatten",  "Squeeze", "Unsqueeze",
                                       "Cast",    "Identity", "Slice"};
  const auto producers = g.Producers();
  for (int hops = 0; hops < 16; ++hops) {
    for (const std::string& in : g.inputs) {
      if (in == tensor) return in;
    }
    auto it = producers.find(tensor);
    if (it == producers.end()) return "";
    const Op& op = g.ops[it->second];
    if (!views.count(op.type) || op.inputs.empty()) return "";
    tensor = op.inputs[0];
  }
  return "";
}

absl::Status ResolveModelLoss(Graph* g) {
  g->loss = LossSpec();
  ASSIGN_OR_RETURN(const auto from, InputsOf(*g));
  std::string loss;
  std::vector<int> label_inputs;
  for (const std::string& out : g->outputs) {
    const TensorInfo* t = g->FindTensor(out);
    if (t == nullptr || t->shape.rank() != 0 || t->dtype != DType::kF32) continue;
    auto it = from.find(out);
    if (it == from.end()) continue;
    label_inputs.clear();
    for (int k : it->second) {
      if (k > 0) label_inputs.push_back(k);
    }
    if (label_inputs.empty()) continue;  // reads no labels: not a loss
    loss = out;
    break;
  }
  if (loss.empty()) return absl::OkStatus();

  const auto producers = g->Producers();
  const auto p = producers.find(loss);
  const Op* op = p == producers.end() ? nullptr : &g->ops[p->second];
  if (op != nullptr && op->type == "SoftmaxCrossEntropyLoss" && op->outputs[0] == loss) {
    const std::string label = SourceInput(*g, op->inputs[1]);
    if (label.empty()) {
      return absl::InvalidArgumentError(
          "the loss's labels do not come from a model input (through reshapes, casts or "
          "slices); compute them in the data instead (shifted labels as their own array)");
    }
    g->loss.type = LossType::kSoftmaxCrossEntropy;
    g->loss.prediction = op->inputs[0];
    g->loss.label = op->inputs[1];
    g->loss.output = loss;
    MoveToLabels(g, label);
    g->outputs = {g->loss.prediction};
    return absl::OkStatus();
  }
  if (label_inputs.size() > 1) {
    std::vector<std::string> names;
    for (int k : label_inputs) names.push_back("'" + g->inputs[k] + "'");
    return absl::InvalidArgumentError(absl::StrCat(
        "the model's loss '", loss, "' reads ", names.size(), " inputs besides the first (",
        absl::StrJoin(names, ", "),
        "); Quilt feeds one input and one labels array: compute the rest in the model"));
  }
  g->loss.type = LossType::kModel;
  g->loss.label = g->inputs[label_inputs[0]];
  g->loss.output = loss;
  MoveToLabels(g, g->loss.label);
  g->outputs = {loss};
  return absl::OkStatus();
}

}  // namespace quilt::onnx_import
