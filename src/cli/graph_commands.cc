// quiltctl graph inspect: what a model is made of and what it costs.
#include <algorithm>
#include <iostream>
#include <limits>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "src/cli/command.h"
#include "src/cli/format.h"
#include "src/cli/validators.h"
#include "src/graph/autodiff.h"
#include "src/graph/graph_summary.h"
#include "src/graph/model_loader.h"

namespace quilt::cli {
namespace {

struct InspectArgs {
  std::string model;
  int64_t batch = 0;
  std::string format = "table";
  bool parameters = false;
};

int Inspect(const InspectArgs& a) {
  absl::StatusOr<Graph> g = LoadModel(a.model, a.batch);
  if (!g.ok()) return PrintError(std::string(g.status().message()));
  const int64_t batch = g->reference_batch;
  absl::StatusOr<GraphSummary> fwd = Summarize(*g, batch);
  if (!fwd.ok()) return PrintError(std::string(fwd.status().message()));
  Graph train = *g;
  TrainingOptions to;
  to.optimizer.kind = OptimizerSpec::Kind::kSgd;
  to.loss = g->loss.type == LossType::kNone ? LossType::kSoftmaxCrossEntropy : g->loss.type;
  absl::Status ts = BuildTrainingGraph(&train, to);
  absl::StatusOr<GraphSummary> full =
      ts.ok() ? Summarize(train, batch) : absl::StatusOr<GraphSummary>(ts);
  const double flops_per_sample = fwd->flops / static_cast<double>(batch);
  if (a.format == "json") {
    nlohmann::json j;
    j["model"] = a.model;
    j["name"] = g->name;
    j["batch"] = batch;
    j["ops"] = fwd->ops;
    j["ops_by_type"] = fwd->ops_by_type;
    j["parameters"] = fwd->parameters;
    j["parameter_bytes"] = fwd->parameter_bytes;
    j["activation_tensors"] = fwd->activation_tensors;
    j["activation_bytes"] = fwd->activation_bytes;
    j["forward_flops_per_sample"] = flops_per_sample;
    j["inputs"] = g->inputs;
    j["outputs"] = g->outputs;
    nlohmann::json params = nlohmann::json::array();
    for (const ParameterSpec& p : g->parameters) {
      params.push_back({{"name", p.tensor}, {"shape", g->FindTensor(p.tensor)->shape.ToString()}});
    }
    j["parameter_list"] = params;
    j["notes"] = ModelNotes(*g);
    if (full.ok()) {
      j["training_graph"] = {{"ops", full->ops}, {"flops_per_sample", full->flops / batch}};
    } else {
      j["training_graph"] = {{"error", std::string(full.status().message())}};
    }
    std::cout << j.dump(1) << "\n";
    return 0;
  }
  std::cout << absl::StrFormat("Model: %s (%s)\n", a.model, g->name);
  std::cout << absl::StrFormat("Parameters: %d (%s)\n", fwd->parameters,
                               HumanBytes(fwd->parameter_bytes));
  std::cout << absl::StrFormat("Forward FLOPs per sample: %sFLOP\n", HumanSi(flops_per_sample));
  std::cout << absl::StrFormat(
      "Activations at batch %d: %d tensors, %s\n", batch, fwd->activation_tensors,
      std::string(fwd->activation_bytes == std::numeric_limits<int64_t>::max() ? "more than "
                                                                               : "") +
          HumanBytes(fwd->activation_bytes));
  if (full.ok()) {
    std::cout << absl::StrFormat("Training graph: %d ops, %sFLOP per sample (%.2f× forward)\n",
                                 full->ops, HumanSi(full->flops / batch),
                                 fwd->flops > 0 ? full->flops / fwd->flops : 0.0);
  } else {
    std::cout << "Training graph: not built: " << full.status().message() << "\n";
  }
  std::cout << absl::StrFormat("Forward ops (%d):\n", fwd->ops);
  Table t({"TYPE", "COUNT"});
  for (const auto& [type, n] : fwd->ops_by_type) t.AddRow({type, std::to_string(n)});
  std::cout << t.Render();
  if (a.parameters) {
    std::cout << absl::StrFormat("Parameters (%d):\n", g->parameters.size());
    Table p({"NAME", "SHAPE", "ELEMENTS"});
    for (const ParameterSpec& spec : g->parameters) {
      const Shape& shape = g->FindTensor(spec.tensor)->shape;
      p.AddRow({spec.tensor, shape.ToString(), std::to_string(shape.NumElements(1))});
    }
    std::cout << p.Render();
  }
  for (const std::string& note : ModelNotes(*g)) std::cout << "Note: " << note << "\n";
  return 0;
}

}  // namespace

void PrintModelNotes(Graph graph, const std::vector<std::string>& frozen) {
  for (ParameterSpec& p : graph.parameters) {
    if (std::find(frozen.begin(), frozen.end(), p.tensor) != frozen.end()) p.frozen = true;
  }
  for (const std::string& note : ModelNotes(graph)) std::cerr << "quiltctl: note: " << note << "\n";
}

void AddGraphCommands(CLI::App& app, std::vector<Command>* out) {
  CLI::App* graph = app.add_subcommand("graph", "Look at model graphs");
  graph->require_subcommand(1);
  auto args = std::make_shared<InspectArgs>();
  CLI::App* inspect =
      graph->add_subcommand("inspect", "Ops by type, parameters, activations, FLOPs of a model");
  inspect->add_option("model", args->model, "zoo:NAME, a .onnx file or a .pb/.pbtxt graph")
      ->required();
  inspect->add_option("--batch", args->batch, "Batch size (default: the model's)")
      ->check(PositiveInt());
  inspect->add_option("-o,--output", args->format, "table | json")
      ->check(CLI::IsMember({"table", "json"}));
  inspect->add_flag("--parameters", args->parameters,
                    "List the parameters by name (the names --frozen takes)");
  out->push_back({inspect, [args]() { return Inspect(*args); }});
}

}  // namespace quilt::cli
