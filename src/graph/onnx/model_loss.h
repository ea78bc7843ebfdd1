// The loss of an imported model that computes its own: its first float32
// scalar output that reads the labels (an input after the first). A
// softmax cross-entropy returned as it is trains as the built-in loss (its
// scores stay the graph's output); any other scalar — binary cross-entropy,
// a cross-entropy times a factor, a sum of several losses — trains as the
// model's own loss (LossType::kModel), differentiated through its ops like
// the rest of the model, so nothing computed from a loss drops out. The
// labels input moves from the graph's inputs to its labels.
#ifndef QUILT_SRC_GRAPH_ONNX_MODEL_LOSS_H_
#define QUILT_SRC_GRAPH_ONNX_MODEL_LOSS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "src/graph/graph.h"

namespace quilt::onnx_import {

// Sets g->loss, g->labels and g->outputs; leaves the graph without a loss
// when no output is such a scalar. `names`: the model's names of
// g->outputs, in order; `wanted`: the name of the output to take (empty:
// the first that can be). Errors: INVALID_ARGUMENT when `wanted` names no
// output or one that cannot be the loss, or a cross-entropy's labels come
// from no input. A loss that reads several inputs besides the first takes
// the last as its labels, unless the last feeds the model's layers and
// exactly one of the others does not: then that one (noted either way).
absl::Status ResolveModelLoss(Graph* g, const std::vector<std::string>& names,
                              const std::string& wanted = "");

// Notes (g->import_notes) the constants the loss of `g` (resolved) reads
// that the export computed: scalars it folded from weights ("onnx::<op>_<n>":
// learned loss weights such as self.w[0], which stay constants), and, when
// `export_batch` > 0 (a fixed-batch export trained at `batch`), the export's
// batch (x.shape[0] computed in, which stays that size).
void NoteLossConstants(int64_t export_batch, int64_t batch, Graph* g);

// Follows single-input view ops (reshapes, casts, slices) back from
// `tensor` to a graph input; "" when it comes from none.
std::string SourceInput(const Graph& g, std::string tensor);

}  // namespace quilt::onnx_import

#endif  // QUILT_SRC_GRAPH_ONNX_MODEL_LOSS_H_
