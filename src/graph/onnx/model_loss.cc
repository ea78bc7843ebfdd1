#include "src/graph/onnx/model_loss.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/common/status.h"
#include "src/graph/graph_builder.h"

namespace quilt::onnx_import {
namespace {

// The graph inputs each tensor is computed from (by input index), over
// the ops in topological `order`.
std::map<std::string, std::set<int>> InputsOf(const Graph& g, const std::vector<int>& order) {
  std::map<std::string, std::set<int>> from;
  for (size_t i = 0; i < g.inputs.size(); ++i) from[g.inputs[i]].insert(static_cast<int>(i));
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

// Tensors computed from `seeds` (seeds included).
std::set<std::string> Reach(const Graph& g, const std::vector<int>& order,
                            std::set<std::string> seeds) {
  for (int i : order) {
    const Op& op = g.ops[i];
    for (const std::string& t : op.inputs) {
      if (seeds.count(t)) {
        seeds.insert(op.outputs.begin(), op.outputs.end());
        break;
      }
    }
  }
  return seeds;
}

// Parameters whose values meet the model's data only in ops that also
// read the labels (following ops of parameters and constants alone, such
// as pos_weight − 1): weights of the loss, which PyTorch often holds as
// buffers the export cannot tell from parameters.
std::vector<std::string> LossOnlyParameters(const Graph& g, const std::vector<int>& order,
                                            const std::string& label) {
  std::set<std::string> data(g.inputs.begin(), g.inputs.end());
  data.insert(label);
  data = Reach(g, order, data);
  const std::set<std::string> labeled = Reach(g, order, {label});
  std::map<std::string, std::vector<int>> consumers;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    for (const std::string& t : g.ops[i].inputs) consumers[t].push_back(static_cast<int>(i));
  }
  std::vector<std::string> out;
  for (const ParameterSpec& p : g.parameters) {
    bool meets = false, only_labels = true;
    std::set<std::string> seen;
    std::vector<std::string> todo = {p.tensor};
    while (!todo.empty() && only_labels) {
      const std::string t = todo.back();
      todo.pop_back();
      if (!seen.insert(t).second) continue;
      for (int i : consumers[t]) {
        const Op& op = g.ops[i];
        bool reads_data = false, reads_labels = false;
        for (const std::string& in : op.inputs) {
          reads_data = reads_data || data.count(in);
          reads_labels = reads_labels || labeled.count(in);
        }
        if (!reads_data) {
          todo.insert(todo.end(), op.outputs.begin(), op.outputs.end());
        } else {
          meets = true;
          only_labels = only_labels && reads_labels;
        }
      }
    }
    if (meets && only_labels) out.push_back(p.tensor);
  }
  return out;
}

// Graph inputs (by index) in the model's body: some op that reads a
// weight (a parameter, or a tensor computed from parameters alone, such as
// a tied table transposed) reads something computed from the input, and
// that op's result goes on to another such op. A mask feeds attention,
// whose output meets the next projection; labels meet no weight, or only
// a loss's own (class weights), whose result meets none.
std::set<int> InputsInTheBody(const Graph& g, const std::vector<int>& order,
                              const std::map<std::string, std::set<int>>& from,
                              const std::set<std::string>& params) {
  std::set<std::string> weights = params;
  // Whether op reads a weight, and whether it reads data.
  auto reads = [&](const Op& op) {
    std::pair<bool, bool> out{false, false};
    for (const std::string& t : op.inputs) {
      out.first = out.first || weights.count(t) > 0;
      out.second = out.second || from.count(t) > 0;
    }
    return out;
  };
  for (int i : order) {
    const auto [weight, data] = reads(g.ops[i]);
    if (weight && !data) weights.insert(g.ops[i].outputs.begin(), g.ops[i].outputs.end());
  }
  auto reads_weight = [&](const Op& op) {
    const auto [weight, data] = reads(op);
    return weight && data;
  };
  // Tensors that an op reading a weight reads, or reads something
  // computed from.
  std::set<std::string> before_weight;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Op& op = g.ops[*it];
    bool feeds = reads_weight(op);
    for (const std::string& out : op.outputs) feeds = feeds || before_weight.count(out) > 0;
    if (feeds) before_weight.insert(op.inputs.begin(), op.inputs.end());
  }
  std::set<int> body;
  for (int i : order) {
    const Op& op = g.ops[i];
    if (!reads_weight(op)) continue;
    bool onward = false;
    for (const std::string& out : op.outputs) onward = onward || before_weight.count(out) > 0;
    if (!onward) continue;
    for (const std::string& t : op.inputs) {
      auto f = from.find(t);
      if (f != from.end()) body.insert(f->second.begin(), f->second.end());
    }
  }
  return body;
}

std::string Quoted(const std::vector<std::string>& names) {
  std::vector<std::string> q;
  for (size_t i = 0; i < names.size() && i < 4; ++i) q.push_back("'" + names[i] + "'");
  if (names.size() > 4) q.push_back("…");
  return absl::StrJoin(q, ", ");
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

absl::Status ResolveModelLoss(Graph* g, const std::vector<std::string>& names,
                              const std::string& wanted) {
  // How outputs are named to the user: as the model names them.
  auto shown = [&](const std::string& out) {
    for (size_t k = 0; k < g->outputs.size() && k < names.size(); ++k) {
      if (g->outputs[k] == out) return names[k];
    }
    return out;
  };
  g->loss = LossSpec();
  ASSIGN_OR_RETURN(const std::vector<int> order, g->TopologicalOrder());
  const auto from = InputsOf(*g, order);
  std::set<std::string> params;
  for (const ParameterSpec& p : g->parameters) params.insert(p.tensor);
  const std::set<std::string> trained = Reach(*g, order, params);
  std::string loss;
  std::vector<int> label_inputs;
  std::vector<std::string> others;  // outputs that are not the loss
  if (!wanted.empty() &&
      std::none_of(g->outputs.begin(), g->outputs.end(),
                   [&](const std::string& out) { return shown(out) == wanted; })) {
    std::vector<std::string> all;
    for (const std::string& out : g->outputs) all.push_back(shown(out));
    return absl::InvalidArgumentError(
        absl::StrCat("the model has no output '", wanted, "' (its outputs: ", Quoted(all), ")"));
  }
  for (const std::string& out : g->outputs) {
    const TensorInfo* t = g->FindTensor(out);
    const bool asked = !wanted.empty() && shown(out) == wanted;
    if (!loss.empty() || (!wanted.empty() && !asked)) {
      others.push_back(shown(out));
      continue;
    }
    if (t == nullptr || t->shape.NumElements(1) != 1 || t->shape.HasBatch() ||
        t->dtype != DType::kF32 || !trained.count(out)) {
      if (asked) {
        return absl::InvalidArgumentError(
            absl::StrCat("output '", wanted,
                         "' cannot be the loss: a loss is one float32 value computed from a "
                         "weight and the labels"));
      }
      others.push_back(shown(out));
      continue;
    }
    auto it = from.find(out);
    std::vector<int> reads;
    if (it != from.end()) {
      for (int k : it->second) {
        if (k > 0) reads.push_back(k);
      }
    }
    if (reads.empty()) {  // reads no labels: not a loss
      if (asked) {
        return absl::InvalidArgumentError(absl::StrCat(
            "output '", wanted, "' cannot be the loss: it reads no labels (the second input)"));
      }
      others.push_back(shown(out));
      continue;
    }
    loss = out;
    label_inputs = reads;
  }
  if (loss.empty()) return absl::OkStatus();
  const std::string output = shown(loss);
  if (g->FindTensor(loss)->shape.rank() != 0) {
    // A loss of shape [1] (or [1, 1]): its one value.
    Attrs all;
    all.SetInt("keepdims", 0);
    GraphBuilder b(g);
    ASSIGN_OR_RETURN(loss, b.Add("ReduceSum", {loss}, std::move(all), loss + "/scalar"));
  }
  if (!others.empty()) {
    g->import_notes.push_back(absl::StrCat(
        "the loss is output '", output, "' (",
        wanted.empty() ? "the first scalar that reads the labels and a weight" : "as asked", "); ",
        others.size() == 1 ? "output '" + others[0] + "' is" : "outputs " + Quoted(others) + " are",
        " left out of training", wanted.empty() ? " (--loss-output names another)" : ""));
  }

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
    g->output_names.clear();  // (the prediction is no output of the model)
    return absl::OkStatus();
  }
  // Several inputs besides the first (token ids, a mask, the labels): the
  // labels come last, as models take them (forward(ids, mask, y)) — unless
  // the last is in the model's body (a mask: InputsInTheBody) and exactly
  // one of the others is not (forward(ids, y, mask)).
  int label = *std::max_element(label_inputs.begin(), label_inputs.end());
  if (label_inputs.size() > 1) {
    const std::set<int> body = InputsInTheBody(*g, order, from, params);
    std::vector<int> apart;
    for (int k : label_inputs) {
      if (!body.count(k)) apart.push_back(k);
    }
    std::vector<std::string> names;
    for (int k : label_inputs) names.push_back("'" + g->inputs[k] + "'");
    const std::string reads =
        absl::StrCat("the loss '", output, "' reads ", names.size(), " inputs besides the first (",
                     absl::StrJoin(names, ", "), "): ");
    if (body.count(label) && apart.size() == 1) {
      const std::string last = g->inputs[label];
      label = apart[0];
      g->import_notes.push_back(absl::StrCat(
          reads, "the last, '", last, "', feeds the model's layers, and '", g->inputs[label],
          "', the one that does not, is taken as the labels and the others as data (--data: the "
          "data inputs' files in the model's order, then the labels')"));
    } else {
      g->import_notes.push_back(absl::StrCat(
          reads, "the last, '", g->inputs[label],
          "', is taken as the labels and the others as data (export the model with its labels "
          "as its last input)"));
    }
  }
  g->loss.type = LossType::kModel;
  g->loss.label = g->inputs[label];
  g->loss.output = loss;
  g->label_only_parameters = LossOnlyParameters(*g, order, g->loss.label);
  MoveToLabels(g, g->loss.label);
  g->outputs = {loss};
  g->output_names = {shown(loss)};
  return absl::OkStatus();
}

// The loss reads a constant where an op reads the labels, or computes a
// scalar the loss is made of (a weighted sum of losses).
void NoteLossConstants(int64_t export_batch, int64_t batch, Graph* g) {
  absl::StatusOr<std::vector<int>> order = g->TopologicalOrder();
  if (!order.ok()) return;  // (the import validates the graph after)
  const std::set<std::string> labeled =
      Reach(*g, *order, std::set<std::string>(g->labels.begin(), g->labels.end()));
  // The tensors the loss is computed from.
  std::set<std::string> into_loss;
  const auto producers = g->Producers();
  for (std::vector<std::string> todo = {g->loss.output}; !todo.empty();) {
    const std::string t = todo.back();
    todo.pop_back();
    if (!into_loss.insert(t).second) continue;
    if (auto p = producers.find(t); p != producers.end()) {
      for (const std::string& in : g->ops[p->second].inputs) todo.push_back(in);
    }
  }
  std::vector<std::string> baked, folded;
  for (const Op& op : g->ops) {
    bool reads_labels = false;
    for (const std::string& in : op.inputs) reads_labels = reads_labels || labeled.count(in);
    const TensorInfo* out = g->FindTensor(op.outputs[0]);
    const bool loss_term =
        into_loss.count(op.outputs[0]) && out != nullptr && out->shape.rank() == 0;
    if (!reads_labels && !loss_term) continue;
    for (const std::string& in : op.inputs) {
      auto c = g->constants.find(in);
      if (c == g->constants.end() || c->second.dtype() != DType::kF32 || c->second.numel() != 1) {
        continue;
      }
      if (export_batch > 0 && c->second.f32()[0] == static_cast<float>(export_batch)) {
        baked.push_back(in);
      } else if (absl::StartsWith(in, "onnx::") &&
                 std::find(folded.begin(), folded.end(), in) == folded.end()) {
        folded.push_back(in);
      }
    }
  }
  if (!baked.empty()) {
    g->import_notes.push_back(absl::StrCat(
        "the model was exported with a fixed batch of ", export_batch, " and trains with ", batch,
        ": its loss reads the constant ", export_batch, " ('", baked[0],
        "'), the batch size the export computed in (x.shape[0]), which stays ", export_batch,
        "; export with a dynamic batch (dynamic_axes)"));
  }
  if (!folded.empty()) {
    g->import_notes.push_back(absl::StrCat(
        "the loss reads scalars the export folded (", absl::StrJoin(folded, ", "),
        "), which stay constants: if they come from weights (learned loss weights such as "
        "self.w[0]), export with do_constant_folding=False"));
  }
}

}  // namespace quilt::onnx_import
