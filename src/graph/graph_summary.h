// Size and cost summary of a graph at a batch size: op counts by type,
// parameters, activations and FLOPs, from the op registry's cost functions.
// What `quiltctl graph inspect` prints.
#ifndef QUILT_SRC_GRAPH_GRAPH_SUMMARY_H_
#define QUILT_SRC_GRAPH_GRAPH_SUMMARY_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "src/graph/graph.h"

namespace quilt {

struct GraphSummary {
  std::map<std::string, int> ops_by_type;
  int64_t ops = 0;
  int64_t parameters = 0;       // trainable elements
  int64_t parameter_bytes = 0;  // all parameters incl. frozen state
  int64_t activation_tensors = 0;
  // Every activation at the batch, summed (INT64_MAX: that many or more).
  int64_t activation_bytes = 0;
  double flops = 0;  // of the ops summarized, at the batch
  std::map<std::string, double> flops_by_type;
  int64_t batch = 1;
};

// Summarizes every op of `graph` at `batch`.
absl::StatusOr<GraphSummary> Summarize(const Graph& graph, int64_t batch);

}  // namespace quilt

#endif  // QUILT_SRC_GRAPH_GRAPH_SUMMARY_H_
