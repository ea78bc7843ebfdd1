#include "src/planner/weight_gradients.h"

#include "src/graph/graph.h"

namespace quilt {

std::vector<bool> WeightGradientOps(const GraphIndex& ix) {
  const Graph& g = ix.graph();
  const int n_ops = static_cast<int>(g.ops.size());
  std::vector<std::vector<int>> consumers(g.tensors().size());
  for (int i = 0; i < n_ops; ++i) {
    for (int t : ix.Inputs(i)) {
      if (t >= 0) consumers[t].push_back(i);
    }
  }
  // Parameters' gradients: what the updates read.
  std::vector<bool> param_grad(g.tensors().size(), false);
  for (int i = 0; i < n_ops; ++i) {
    if (ix.Schema(i).is_update && ix.Inputs(i).size() > 1 && ix.Inputs(i)[1] >= 0)
      param_grad[ix.Inputs(i)[1]] = true;
  }
  auto backward = [&](int i) { return !g.ops[i].forward_op.empty() && !ix.Schema(i).is_update; };
  // Samples interleaved along a batch dim cannot move between devices as a
  // range of rows (batch_layout.h).
  auto interleaved = [&](int t) { return t >= 0 && g.tensors()[t].interleaved_batch; };
  // Whether each output of `i` is a parameter's gradient or read only by
  // ops `ok` accepts.
  auto feeds_only = [&](int i, const std::vector<bool>& ok) {
    if (ix.Outputs(i).empty()) return false;
    for (int t : ix.Outputs(i)) {
      if (t < 0 || param_grad[t]) continue;
      if (consumers[t].empty()) return false;
      for (int c : consumers[t]) {
        if (!ok[c]) return false;
      }
    }
    return true;
  };
  auto reads_batch = [&](int i) {
    for (int t : ix.Inputs(i)) {
      if (t >= 0 && ix.Batched(t)) return true;
    }
    return false;
  };
  auto writes_batch = [&](int i) {
    for (int t : ix.Outputs(i)) {
      if (t >= 0 && ix.Batched(t)) return true;
    }
    return false;
  };
  auto touches_interleaved = [&](int i) {
    for (int t : ix.Inputs(i)) {
      if (interleaved(t)) return true;
    }
    for (int t : ix.Outputs(i)) {
      if (interleaved(t)) return true;
    }
    return false;
  };
  const std::vector<int>& order = ix.TopologicalOrder();
  // Backward ops off the batch that lead only to gradients (sums of a
  // gradient's parts), consumers before producers.
  std::vector<bool> after(n_ops, false);
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    after[*it] = backward(*it) && !reads_batch(*it) && !writes_batch(*it) && feeds_only(*it, after);
  }
  // The row sums: ops that read the batch and write none of it, for them.
  std::vector<bool> sums(n_ops, false);
  for (int i = 0; i < n_ops; ++i) {
    sums[i] = backward(i) && reads_batch(i) && !writes_batch(i) && !touches_interleaved(i) &&
              feeds_only(i, after);
  }
  // And the batch ops whose outputs only they read (a reshape before a
  // weight's product, the product of an output's gradient and a
  // normalized input before a scale's row sum).
  std::vector<bool> wg = sums;
  for (int i = 0; i < n_ops; ++i) {
    if (sums[i] || !backward(i) || !writes_batch(i)) continue;
    wg[i] = !touches_interleaved(i) && feeds_only(i, sums);
  }
  return wg;
}

}  // namespace quilt
