#include "src/graph/graph_summary.h"

#include <limits>

#include "src/graph/op_registry.h"

namespace quilt {

absl::StatusOr<GraphSummary> Summarize(const Graph& g, int64_t batch) {
  GraphSummary s;
  s.batch = batch;
  s.parameters = g.ParameterCount();
  for (const ParameterSpec& p : g.parameters) {
    const TensorInfo* t = g.FindTensor(p.tensor);
    if (t) s.parameter_bytes += t->shape.NumElements(1) * DTypeSize(t->dtype);
  }
  for (const TensorInfo& t : g.tensors()) {
    if (t.role == TensorRole::kActivation) {
      ++s.activation_tensors;
      // (Saturated: at the largest batches a model's activations pass 2^63.)
      const double bytes = static_cast<double>(t.shape.NumElements(batch)) * DTypeSize(t.dtype);
      const double room =
          static_cast<double>(std::numeric_limits<int64_t>::max() - s.activation_bytes);
      s.activation_bytes = bytes >= room ? std::numeric_limits<int64_t>::max()
                                         : s.activation_bytes + static_cast<int64_t>(bytes);
    }
  }
  for (const Op& op : g.ops) {
    ++s.ops;
    ++s.ops_by_type[op.type];
    const OpSchema* schema = OpRegistry::Global().Find(op.type);
    if (schema == nullptr) return absl::InvalidArgumentError("unknown op type " + op.type);
    const double flops = EstimateOpCost(g, op, *schema, batch).flops;
    s.flops += flops;
    s.flops_by_type[op.type] += flops;
  }
  return s;
}

}  // namespace quilt
