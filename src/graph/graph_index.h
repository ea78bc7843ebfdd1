// GraphIndex: a graph's names resolved to indices once — tensors and ops by
// name, each op's input and output tensor ids and schema, a topological
// order, which tensors carry the batch — for code that walks one graph many
// times (the planner lowers and simulates thousands of candidate plans of
// the same graph). The graph must outlive the index and stay unchanged.
#ifndef QUILT_SRC_GRAPH_GRAPH_INDEX_H_
#define QUILT_SRC_GRAPH_GRAPH_INDEX_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "src/graph/graph.h"
#include "src/graph/op_registry.h"

namespace quilt {

class GraphIndex {
 public:
  // Errors: INVALID_ARGUMENT for an op of an unknown type, an input no op
  // produces or a cycle (as Graph::TopologicalOrder).
  static absl::StatusOr<GraphIndex> Build(const Graph& graph);

  const Graph& graph() const { return *graph_; }
  // -1 when the graph has no such tensor / op.
  int Tensor(const std::string& name) const;
  // The same, trying `hint` first (as OpIndex does).
  int Tensor(const std::string& name, int hint) const {
    if (hint >= 0 && hint < static_cast<int>(graph_->tensors().size()) &&
        graph_->tensors()[hint].name == name) {
      return hint;
    }
    return Tensor(name);
  }
  int OpIndex(const std::string& name) const;
  // The same, trying `hint` first (an index the caller was given, which
  // counts only where the op there has this name).
  int OpIndex(const std::string& name, int hint) const {
    if (hint >= 0 && hint < static_cast<int>(graph_->ops.size()) &&
        graph_->ops[hint].name == name) {
      return hint;
    }
    return OpIndex(name);
  }
  // Tensor ids of op i's inputs (-1 for an absent optional input) and outputs.
  const std::vector<int>& Inputs(int op) const { return inputs_[op]; }
  const std::vector<int>& Outputs(int op) const { return outputs_[op]; }
  const OpSchema& Schema(int op) const { return *schemas_[op]; }
  const std::vector<int>& TopologicalOrder() const { return order_; }
  bool Batched(int tensor) const { return batched_[tensor]; }

 private:
  const Graph* graph_ = nullptr;
  absl::flat_hash_map<std::string, int> tensor_ids_, op_ids_;
  std::vector<std::vector<int>> inputs_, outputs_;
  std::vector<const OpSchema*> schemas_;
  std::vector<int> order_;
  std::vector<bool> batched_;
};

}  // namespace quilt

#endif  // QUILT_SRC_GRAPH_GRAPH_INDEX_H_
