// Reverse-mode autodiff: turns a forward graph with a loss and an optimizer
// into the full training graph — forward, loss, backward (gradient ops from
// each op's registered builder, contributions summed), and one optimizer
// update op per trainable parameter — in the same IR, so that the planner,
// the simulator and the runtime see every op of a training step.
#ifndef QUILT_SRC_GRAPH_AUTODIFF_H_
#define QUILT_SRC_GRAPH_AUTODIFF_H_

#include "absl/status/status.h"
#include "src/graph/graph.h"

namespace quilt {

struct TrainingOptions {
  // Loss to add when the graph has none yet: on the graph's first output
  // against a new label input. kNone: the graph must already define its loss.
  LossType loss = LossType::kNone;
  // For softmax cross entropy added here: the class dim of the prediction;
  // kAutoClassAxis: the last of a prediction of rank 2 or 3 ([N, C],
  // [N, T, V] of a sequence model), 1 of one of rank 4 or more ([N, C, H,
  // W], as PyTorch's cross_entropy takes images).
  static constexpr int64_t kAutoClassAxis = INT64_MIN;
  int64_t class_axis = kAutoClassAxis;
  OptimizerSpec optimizer;
};

// Whether a loss can be put on the graph's first output: not on a scalar
// (a loss the model computes without reading labels).
absl::Status CheckLossTarget(const Graph& g);

// Adds the loss (if asked), the backward pass and the updates. Errors:
// INVALID_ARGUMENT when the graph has no loss, an op on the path to the loss
// has no gradient, or no parameter is trainable; FAILED_PRECONDITION when
// the graph already has a backward pass.
absl::Status BuildTrainingGraph(Graph* graph, const TrainingOptions& options);

}  // namespace quilt

#endif  // QUILT_SRC_GRAPH_AUTODIFF_H_
