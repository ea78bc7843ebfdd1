// Op groups and the coarsened training graph the planner's search
// simulates. Groups are contiguous runs of forward ops in topological order
// sized by compute cost (an op with a large parameter starts a group of its
// own, so it can be placed alone); each forward op's gradient ops and its
// parameters' updates go with it. The coarsened graph has, per group, one
// forward op, one backward op and one update op over a flat parameter (all
// the group's parameters end to end), with the tensors that cross group
// boundaries bundled by where they go (tensor_bundles.h); its cost model
// sums the member ops' times. A group's op that sums statistics of the
// batch inside (batch norms) is cut in two at the last such sum, so that a
// replicated group's simulation has the sum across its replicas.
// Lowering and simulating it is the same machinery as for the full graph,
// at a fraction of the instructions.
#ifndef QUILT_SRC_PLANNER_COARSE_GRAPH_H_
#define QUILT_SRC_PLANNER_COARSE_GRAPH_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/quilt/v1/strategy.pb.h"
#include "src/cost/cost_model.h"
#include "src/graph/graph.h"
#include "src/graph/graph_index.h"

namespace quilt {

struct Grouping {
  // Per group: the fine forward ops, in topological order.
  std::vector<std::vector<int>> forward_ops;
  // Per group: the trainable parameters updated with it.
  std::vector<std::vector<std::string>> params;
  // Per group: forward + backward seconds on device 0 at the reference
  // rows, and parameter bytes.
  std::vector<double> seconds;
  std::vector<int64_t> param_bytes;
  // Per group: bytes per batch row of the batch tensors its forward ops
  // produce (what the backward pass keeps alive, about).
  std::vector<int64_t> activation_bytes_per_row;
  // The batch rows `seconds` are taken at.
  int64_t rows = 1;
};

// About `target` groups (fewer when the graph has fewer forward ops).
// `rows`: the batch rows the costs are taken at.
Grouping GroupOps(const Graph& training_graph, const CostModel& cost, int target, int64_t rows);

class CoarseModel {
 public:
  // `bundle`: crossing tensors go in bundles (tensor_bundles.h); without,
  // each crosses on its own (the same plans, predicted a little
  // differently: more transfers and collectives, each with its latency).
  // `sum_parts`: a group's forward or backward op that sums statistics of
  // the batch inside (batch norms) is cut into up to this many ops, each
  // cut a sum across the group's replicas (1: never cut; the sums are then
  // left out, and a replicated CNN group looks faster than it runs).
  // Errors: INVALID_ARGUMENT for a graph without a backward pass.
  static absl::StatusOr<std::unique_ptr<CoarseModel>> Build(const Graph& training_graph,
                                                            const Grouping& grouping,
                                                            const CostModel& fine_cost,
                                                            bool bundle = true, int sum_parts = 2);

  const Graph& graph() const { return graph_; }
  const GraphIndex& index() const { return *index_; }
  const CostModel& cost() const { return *cost_; }
  const Grouping& grouping() const { return grouping_; }
  int num_groups() const { return static_cast<int>(grouping_.forward_ops.size()); }
  // Name of group k's forward op in the coarse graph, and its flat
  // parameters (usually one; none when the group trains nothing).
  std::string ForwardOp(int k) const;
  const std::vector<std::string>& FlatParameters(int k) const { return flat_params_[k]; }
  // Fine tensor → the bundle it crosses in (only those in one).
  const std::map<std::string, std::string>& bundled() const { return merged_; }

 private:
  CoarseModel() = default;
  Graph graph_;
  Grouping grouping_;
  std::vector<std::vector<std::string>> flat_params_;
  // Fine tensors that cross in a bundle → the bundle's name.
  std::map<std::string, std::string> merged_;
  std::unique_ptr<CostModel> cost_;
  std::unique_ptr<GraphIndex> index_;  // of graph_
};

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_COARSE_GRAPH_H_
