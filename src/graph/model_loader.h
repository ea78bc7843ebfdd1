// Resolves a model reference to a forward graph: "zoo:NAME", an ONNX file
// (*.onnx), or a serialized quilt.v1.TrainingGraph (*.pb binary, *.pbtxt /
// *.textproto text).
#ifndef QUILT_SRC_GRAPH_MODEL_LOADER_H_
#define QUILT_SRC_GRAPH_MODEL_LOADER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/graph/graph.h"

namespace quilt {

// `batch` > 0 sets the graph's reference batch; `loss_output` names the
// ONNX output that is the model's own loss (empty: the import's choice).
// Errors: NOT_FOUND (no such file or zoo model), INVALID_ARGUMENT
// (unreadable or invalid model).
absl::StatusOr<Graph> LoadModel(const std::string& spec, int64_t batch = 0,
                                const std::string& loss_output = "");

// Keeps the parameters named `names` as they are (not trained): buffers an
// ONNX export wrote as initializers, which ONNX does not tell from weights.
// Errors: INVALID_ARGUMENT naming those that are no parameter.
absl::Status FreezeParameters(Graph* graph, const std::vector<std::string>& names);

// What a user training the model should know that nothing else says:
// trained parameters not named like a module's weight or bias (ONNX does
// not tell registered buffers, e.g. RoPE tables or normalization
// constants, from weights: --frozen keeps them), and outputs beyond the
// first, which the loss does not use. One sentence each.
std::vector<std::string> ModelNotes(const Graph& graph);

// The loss to add to `graph` when a job or command asks for `want`
// (kNone: the model's own): kNone when the model computes its loss itself
// (a cross-entropy inside the model is what kSoftmaxCrossEntropy asks for);
// a loss asked for a graph without a loss output is recorded on it.
// `asked` names the request in errors (e.g. "--loss mse"). Errors:
// INVALID_ARGUMENT for a loss other than the one the model computes or
// names (a zoo model's softmax cross-entropy).
absl::StatusOr<LossType> ChooseLoss(LossType want, const std::string& asked, Graph* graph);

// Same, from the bytes of an ONNX file or of a TrainingGraph message. A
// graph an exporter gave its default name ("torch_jit", "main_graph", none)
// is named after the file when `source` is one (ends in .onnx).
absl::StatusOr<Graph> LoadOnnxBytes(const std::string& bytes, int64_t batch,
                                    const std::string& source, const std::string& loss_output = "");
// The same, freeing `bytes` once parsed.
absl::StatusOr<Graph> LoadOnnxBytes(std::string&& bytes, int64_t batch, const std::string& source,
                                    const std::string& loss_output = "");

}  // namespace quilt

#endif  // QUILT_SRC_GRAPH_MODEL_LOADER_H_
