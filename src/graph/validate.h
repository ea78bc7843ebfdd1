// Whole-graph validation with precise errors naming the op or tensor:
// names or string attributes that are not UTF-8, duplicate names, unknown
// op types (all listed at once), wrong arity, dangling inputs, cycles,
// dtype and shape mismatches, negative or overflowing dimensions,
// trainable parameters without elements, and a consistent loss / inputs /
// parameters. Also completes the graph's tensor types by running shape
// inference.
#ifndef QUILT_SRC_GRAPH_VALIDATE_H_
#define QUILT_SRC_GRAPH_VALIDATE_H_

#include "absl/status/status.h"
#include "src/graph/graph.h"

namespace quilt {

// Errors: INVALID_ARGUMENT with the first problem found (unknown op types
// are reported together).
absl::Status ValidateGraph(Graph* graph);

}  // namespace quilt

#endif  // QUILT_SRC_GRAPH_VALIDATE_H_
