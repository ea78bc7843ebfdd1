#include "src/planner/lookups.h"

#include "absl/container/flat_hash_set.h"

namespace quilt {

std::map<std::string, std::vector<int>> LookupTables(const GraphIndex& ix) {
  const Graph& g = ix.graph();
  absl::flat_hash_set<int> trainable;
  for (const ParameterSpec& p : g.parameters) {
    if (!p.frozen) trainable.insert(ix.Tensor(p.tensor));
  }
  std::map<std::string, std::vector<int>> tables;
  for (int i = 0; i < static_cast<int>(g.ops.size()); ++i) {
    const Op& op = g.ops[i];
    if (op.type != "GatherGrad" || op.forward_op.empty()) continue;
    const int fwd = ix.OpIndex(op.forward_op);
    if (fwd < 0 || g.ops[fwd].type != "Gather" || g.ops[fwd].attrs.Int("axis", 0) != 0) continue;
    const std::vector<int>& in = ix.Inputs(fwd);
    if (in.size() < 2 || !trainable.count(in[0]) || in[1] < 0 || !ix.Batched(in[1])) continue;
    tables[g.ops[fwd].inputs[0]].push_back(i);
  }
  return tables;
}

}  // namespace quilt
