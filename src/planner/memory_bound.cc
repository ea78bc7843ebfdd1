#include "src/planner/memory_bound.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "src/graph/dtype.h"
#include "src/planner/placement.h"
#include "src/planner/search_space.h"

namespace quilt {
namespace {

// The coarse graph names a group's backward ops "groupK/backward" (and
// "groupK/backward/partJ"); its forward ops "groupK" and "groupK/partJ".
bool IsBackward(const Op& op) { return absl::StrContains(op.name, "/backward"); }

double TensorBytes(const TensorInfo& t, int64_t rows) {
  return static_cast<double>(t.shape.NumElements(rows)) * static_cast<double>(DTypeSize(t.dtype));
}

}  // namespace

MemoryBound::MemoryBound(const CoarseModel& coarse, const Topology& topo, int64_t batch)
    : coarse_(coarse),
      num_devices_(topo.num_devices()),
      batch_(batch),
      resident_(coarse.num_groups(), 0.0),
      kept_(coarse.num_groups()),
      out_(topo.num_devices(), 0.0),
      largest_(topo.num_devices(), 0.0) {
  const Graph& g = coarse.graph();
  const GraphIndex& ix = coarse.index();
  const int groups = coarse.num_groups();
  absl::flat_hash_map<std::string, int> group_of;
  for (int k = 0; k < groups; ++k) group_of[coarse.ForwardOp(k)] = k;
  const int n = static_cast<int>(g.ops.size());
  // A group's updates read its flat parameters (first) and optimizer state
  // (after the gradient).
  for (int i = 0; i < n; ++i) {
    if (!ix.Schema(i).is_update) continue;
    auto it = group_of.find(GroupKey(g.ops[i]));
    const std::vector<int>& in = ix.Inputs(i);
    if (it == group_of.end() || in.empty()) continue;
    for (size_t j = 0; j < in.size(); ++j) {
      if (j != 1 && in[j] >= 0) resident_[it->second] += TensorBytes(g.tensors()[in[j]], 1);
    }
  }
  // Per op: its group (-1: none) and whether it is a forward op.
  std::vector<int> group(n, -1);
  std::vector<bool> forward(n, false);
  std::vector<int> forward_index(n, -1);
  int forwards = 0;
  for (int i = 0; i < n; ++i) {
    if (ix.Schema(i).is_update) continue;
    auto it = group_of.find(GroupKey(g.ops[i]));
    if (it == group_of.end()) continue;
    group[i] = it->second;
    forward[i] = !IsBackward(g.ops[i]);
    if (forward[i]) forward_index[i] = forwards++;
  }
  // Per tensor: its producer and readers.
  std::vector<int> producer(g.tensors().size(), -1);
  std::vector<std::vector<int>> readers(g.tensors().size());
  for (int i = 0; i < n; ++i) {
    for (int t : ix.Outputs(i)) producer[t] = i;
    for (int t : ix.Inputs(i)) {
      if (t >= 0) readers[t].push_back(i);
    }
  }
  // Forward ops each op comes after (itself included), as bits.
  const int words = (forwards + 63) / 64;
  std::vector<std::vector<uint64_t>> after(n, std::vector<uint64_t>(words, 0));
  for (int i : ix.TopologicalOrder()) {
    for (int t : ix.Inputs(i)) {
      if (t < 0 || producer[t] < 0) continue;
      for (int w = 0; w < words; ++w) after[i][w] |= after[producer[t]][w];
    }
    if (forward_index[i] >= 0) after[i][forward_index[i] / 64] |= 1ull << (forward_index[i] % 64);
  }
  // Forward ops some backward op comes after (not, say, the loss's value
  // where no gradient reads it).
  std::vector<uint64_t> needed(words, 0);
  for (int i = 0; i < n; ++i) {
    if (group[i] < 0 || forward[i]) continue;
    for (int w = 0; w < words; ++w) needed[w] |= after[i][w];
  }
  // Kept tensors: written by a group's forward op, read by its backward
  // ops. Summed only where every forward op a backward op needs comes
  // before one of the tensor's readers (or is its producer): then when a
  // device's last such op ends, every kept tensor of its groups is alive.
  std::vector<uint64_t> reach(words);
  for (size_t t = 0; t < g.tensors().size(); ++t) {
    const int p = producer[t];
    if (p < 0 || !forward[p] || group[p] < 0) continue;
    std::fill(reach.begin(), reach.end(), 0);
    bool read = false;
    for (int r : readers[t]) {
      if (group[r] != group[p] || forward[r]) continue;
      read = true;
      for (int w = 0; w < words; ++w) reach[w] |= after[r][w];
    }
    if (!read) continue;
    reach[forward_index[p] / 64] |= 1ull << (forward_index[p] % 64);
    for (int w = 0; w < words; ++w) {
      if ((reach[w] & needed[w]) != needed[w]) summed_ = false;
    }
    const TensorInfo& info = g.tensors()[t];
    Kept kept;
    if (info.shape.HasBatch()) {
      kept.per_row = TensorBytes(info, 1);
    } else {
      kept.fixed = TensorBytes(info, 1);
    }
    kept_[group[p]].push_back(kept);
  }
}

const MemoryBound::Bytes& MemoryBound::Group(int k, int option, bool servers,
                                             const std::vector<PlacementOption>& options) {
  auto [it, fresh] = cache_.try_emplace({k, option, servers});
  Bytes& out = it->second;
  if (!fresh) return out;
  // Devices the split gives no rows do nothing in the group (Place).
  for (const Slice& s : SplitBatch(options[option].replicas, batch_)) {
    const int64_t rows = s.end - s.begin;
    Held held{s.device, servers ? 0.0 : resident_[k], 0.0};
    for (const Kept& kept : kept_[k]) {
      const double bytes = kept.fixed + kept.per_row * static_cast<double>(rows);
      held.kept = summed_ ? held.kept + bytes : std::max(held.kept, bytes);
    }
    out.push_back(held);
  }
  return out;
}

const std::vector<double>& MemoryBound::Of(const PlanState& state,
                                           const std::vector<PlacementOption>& options) {
  std::fill(out_.begin(), out_.end(), 0.0);
  std::fill(largest_.begin(), largest_.end(), 0.0);
  for (size_t k = 0; k < state.place.size(); ++k) {
    const int option = state.place[k];
    const bool servers = state.method[k] == Method::kParameterServer && !options[option].single();
    for (const Held& h : Group(static_cast<int>(k), option, servers, options)) {
      out_[h.device] += h.resident + (summed_ ? h.kept : 0.0);
      largest_[h.device] = std::max(largest_[h.device], h.kept);
    }
  }
  if (!summed_) {
    for (int d = 0; d < num_devices_; ++d) out_[d] += largest_[d];
  }
  return out_;
}

}  // namespace quilt
