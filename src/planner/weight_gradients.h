// Weight-gradient ops: the backward ops that sum over the batch rows into
// parameters' gradients (a weight's product with its output's gradient, a
// bias's row sum: they read the batch and write none of it, for gradients
// alone) and the backward ops whose batch outputs only those read (the
// reshapes before a weight's product). Any device may compute any rows'
// part of them, so a group may split their rows differently from its
// other ops (GroupPlacement.weight_gradient_replicas) to move work off its
// busiest device. Ops that read or write a tensor whose samples are
// interleaved along its batch dim are not among them.
#ifndef QUILT_SRC_PLANNER_WEIGHT_GRADIENTS_H_
#define QUILT_SRC_PLANNER_WEIGHT_GRADIENTS_H_

#include <vector>

#include "src/graph/graph_index.h"

namespace quilt {

// Per op of the indexed training graph: whether it is a weight-gradient op.
std::vector<bool> WeightGradientOps(const GraphIndex& index);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_WEIGHT_GRADIENTS_H_
