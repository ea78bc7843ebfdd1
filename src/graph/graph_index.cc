#include "src/graph/graph_index.h"

#include "src/common/status.h"

namespace quilt {

absl::StatusOr<GraphIndex> GraphIndex::Build(const Graph& graph) {
  GraphIndex x;
  x.graph_ = &graph;
  const std::vector<TensorInfo>& tensors = graph.tensors();
  x.tensor_ids_.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    x.tensor_ids_[tensors[i].name] = static_cast<int>(i);
    x.batched_.push_back(tensors[i].shape.HasBatch());
  }
  x.op_ids_.reserve(graph.ops.size());
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const Op& op = graph.ops[i];
    x.op_ids_[op.name] = static_cast<int>(i);
    const OpSchema* schema = OpRegistry::Global().Find(op.type);
    if (schema == nullptr) {
      return absl::InvalidArgumentError("op '" + op.name + "' has unknown type '" + op.type + "'");
    }
    x.schemas_.push_back(schema);
    std::vector<int> ins, outs;
    for (const std::string& in : op.inputs) {
      ins.push_back(in.empty() ? -1 : x.Tensor(in));
      if (!in.empty() && ins.back() < 0) {
        return absl::InvalidArgumentError("op '" + op.name + "' reads unknown tensor '" + in + "'");
      }
    }
    for (const std::string& out : op.outputs) {
      outs.push_back(x.Tensor(out));
      if (outs.back() < 0) {
        return absl::InvalidArgumentError("op '" + op.name + "' writes unknown tensor '" + out +
                                          "'");
      }
    }
    x.inputs_.push_back(std::move(ins));
    x.outputs_.push_back(std::move(outs));
  }
  ASSIGN_OR_RETURN(x.order_, graph.TopologicalOrder());
  return x;
}

int GraphIndex::Tensor(const std::string& name) const {
  auto it = tensor_ids_.find(name);
  return it == tensor_ids_.end() ? -1 : it->second;
}

int GraphIndex::OpIndex(const std::string& name) const {
  auto it = op_ids_.find(name);
  return it == op_ids_.end() ? -1 : it->second;
}

}  // namespace quilt
