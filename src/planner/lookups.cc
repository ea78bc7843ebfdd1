#include "src/planner/lookups.h"

#include "absl/container/flat_hash_set.h"
#include "src/planner/lower.h"

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
    // Samples interleaved along the rows (a time-major [T, B] of ids) are
    // not one range of rows: the whole batch cannot be gathered from the
    // replicas' slices.
    bool interleaved = false;
    for (int t : ix.Inputs(i)) interleaved |= t >= 0 && g.tensors()[t].interleaved_batch;
    if (interleaved) continue;
    tables[g.ops[fwd].inputs[0]].push_back(i);
  }
  return tables;
}

quilt::v1::Strategy GatherLookups(const GraphIndex& ix, const quilt::v1::Strategy& strategy,
                                  int64_t batch, std::vector<std::string>* tables) {
  tables->clear();
  quilt::v1::Strategy out = strategy;
  const std::map<std::string, std::vector<int>> found = LookupTables(ix);
  if (found.empty()) return out;
  const Graph& g = ix.graph();
  for (auto& a : *out.mutable_aggregations()) {
    auto it = found.find(a.parameter());
    if (it == found.end() || a.method() == quilt::v1::AGGREGATION_METHOD_SPARSE_LOOKUP) continue;
    int64_t rows = 0;
    for (int op : it->second) rows += RangeBytes(g.tensors()[ix.Inputs(op)[0]], 0, batch);
    const int64_t table = RangeBytes(g.tensors()[ix.Tensor(a.parameter())], 0, 0);
    if (rows >= table) continue;
    a.set_method(quilt::v1::AGGREGATION_METHOD_SPARSE_LOOKUP);
    a.clear_servers();
    a.set_bucket(0);
    a.set_partition_bytes(0);
    tables->push_back(a.parameter());
  }
  return out;
}

}  // namespace quilt
