#include "src/planner/time_bound.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "src/planner/placement.h"
#include "src/planner/search_space.h"

namespace quilt {

TimeBound::TimeBound(const CoarseModel& coarse, const Topology& topo, int64_t batch)
    : coarse_(coarse),
      topo_(topo),
      batch_(batch),
      ops_(coarse.num_groups()),
      busy_(topo.num_devices(), 0),
      used_(topo.num_devices(), -1) {
  const Graph& g = coarse.graph();
  const GraphIndex& ix = coarse.index();
  absl::flat_hash_map<std::string, int> group_of;
  for (int k = 0; k < coarse.num_groups(); ++k) group_of[coarse.ForwardOp(k)] = k;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const int op = static_cast<int>(i);
    if (ix.Schema(op).is_update) continue;
    auto it = group_of.find(GroupKey(g.ops[i]));
    if (it == group_of.end()) continue;  // no group: nothing to charge (a bound may miss ops)
    // As Place splits it: by rows when a tensor it reads or writes carries
    // the batch, else whole on each device.
    bool batched = false;
    for (int t : ix.Outputs(op)) batched |= ix.Batched(t);
    for (int t : ix.Inputs(op)) batched |= t >= 0 && ix.Batched(t);
    ops_[it->second].push_back({op, batched});
  }
}

const std::vector<std::pair<int, double>>& TimeBound::Seconds(int k, int option,
                                                              const PlacementOption& o) {
  if (seconds_.size() <= static_cast<size_t>(option)) {
    seconds_.resize(option + 1);
    known_.resize(option + 1);
  }
  if (known_[option].empty()) {
    seconds_[option].resize(ops_.size());
    known_[option].assign(ops_.size(), false);
  }
  std::vector<std::pair<int, double>>& out = seconds_[option][k];
  if (known_[option][k]) return out;
  known_[option][k] = true;
  // Devices the split gives no rows do nothing in the group (Place).
  const std::vector<Slice> rows = SplitBatch(o.replicas, batch_);
  const CostModel& cost = coarse_.cost();
  for (const Slice& s : rows) {
    double seconds = 0;
    for (const auto& [op, batched] : ops_[k]) {
      seconds += cost.OpTime(op, s.device, batched ? s.end - s.begin : 0);
    }
    out.push_back({s.device, seconds});
  }
  return out;
}

double TimeBound::Of(const PlanState& state, const std::vector<PlacementOption>& options) {
  ++calls_;
  double busiest = 0, overhead = 0;
  for (size_t k = 0; k < ops_.size() && k < state.place.size(); ++k) {
    const int option = state.place[k];
    for (const auto& [d, seconds] : Seconds(static_cast<int>(k), option, options[option])) {
      if (used_[d] != calls_) {
        used_[d] = calls_;
        busy_[d] = 0;
        overhead = std::max(overhead, coarse_.cost().speed(d).step_overhead_s);
      }
      busy_[d] += seconds;
      busiest = std::max(busiest, busy_[d]);
    }
  }
  return busiest + overhead;
}

}  // namespace quilt
