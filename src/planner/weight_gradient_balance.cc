#include "src/planner/weight_gradient_balance.h"

#include <algorithm>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/common/status.h"
#include "src/planner/placement.h"
#include "src/planner/weight_gradients.h"

namespace quilt {
namespace {

struct GroupRows {
  int group = 0;                  // index into the strategy's groups
  std::vector<int> devices;       // in the group's order
  std::vector<int64_t> forward;   // per device: the group's rows
  std::vector<int64_t> rows;      // per device: weight-gradient rows
  std::vector<double> per_row_s;  // per device: weight-gradient seconds per row
  // Bytes per row the weight-gradient ops read from the group's other
  // ops (activations, output gradients): what a moved row sends.
  double bytes_per_row = 0;
};

struct Move {
  size_t group;  // index into the GroupRows
  size_t from, to;
};

// Greedy moves: from the device with the most work, the one row of a
// group's weight gradients whose move leaves the pair's larger load the
// smallest, while that is below the busiest device's load.
std::vector<Move> Moves(std::vector<GroupRows> groups, std::vector<double> load,
                        const Topology& topo, bool same_node) {
  std::vector<Move> out;
  // A device only sends or only receives rows (no move undoes another).
  std::vector<int> role(load.size(), 0);  // 1: sends, -1: receives
  const size_t cap = 4096;
  while (out.size() < cap) {
    const int a = static_cast<int>(std::max_element(load.begin(), load.end()) - load.begin());
    double best = load[a] * (1 - 1e-6);
    std::optional<Move> pick;
    for (size_t k = 0; k < groups.size(); ++k) {
      const GroupRows& g = groups[k];
      auto at = std::find(g.devices.begin(), g.devices.end(), a);
      if (at == g.devices.end()) continue;
      const size_t from = static_cast<size_t>(at - g.devices.begin());
      if (g.rows[from] <= 1 || !(g.per_row_s[from] > 0) || role[a] < 0) continue;
      for (size_t to = 0; to < g.devices.size(); ++to) {
        const int b = g.devices[to];
        if (to == from || role[b] > 0 ||
            (same_node && topo.device(b).node != topo.device(a).node)) {
          continue;
        }
        // The receiver waits for the row's tensors (counted as its work:
        // the links carry the gradients' collectives too).
        const double send = topo.PathBetween(a, b).Time(g.bytes_per_row);
        const double after =
            std::max(load[a] - g.per_row_s[from], load[b] + g.per_row_s[to] + send);
        if (after < best) {
          best = after;
          pick = Move{k, from, to};
        }
      }
    }
    if (!pick.has_value()) break;
    GroupRows& g = groups[pick->group];
    load[g.devices[pick->from]] -= g.per_row_s[pick->from];
    load[g.devices[pick->to]] +=
        g.per_row_s[pick->to] +
        topo.PathBetween(g.devices[pick->from], g.devices[pick->to]).Time(g.bytes_per_row);
    --g.rows[pick->from];
    ++g.rows[pick->to];
    role[g.devices[pick->from]] = 1;
    role[g.devices[pick->to]] = -1;
    out.push_back(*pick);
  }
  return out;
}

BalancedWeightGradients Apply(const quilt::v1::Strategy& plan, std::vector<GroupRows> groups,
                              const std::vector<Move>& moves, size_t n, const Topology& topo) {
  for (size_t m = 0; m < n; ++m) {
    GroupRows& g = groups[moves[m].group];
    --g.rows[moves[m].from];
    ++g.rows[moves[m].to];
  }
  BalancedWeightGradients out;
  out.strategy = plan;
  // Described against the groups' own rows (a plan may have moved some
  // before).
  std::map<int, int64_t> net;  // device → rows in minus rows out
  int changed = 0;
  int64_t moved = 0;
  for (const GroupRows& g : groups) {
    auto* gp = out.strategy.mutable_groups(g.group);
    gp->clear_weight_gradient_replicas();
    if (g.rows == g.forward) continue;
    ++changed;
    for (size_t j = 0; j < g.devices.size(); ++j) {
      auto* r = gp->add_weight_gradient_replicas();
      r->set_device(topo.device(g.devices[j]).id);
      r->set_replicas(static_cast<int32_t>(g.rows[j]));
      net[g.devices[j]] += g.rows[j] - g.forward[j];
      moved += std::max<int64_t>(0, g.rows[j] - g.forward[j]);
    }
  }
  std::vector<std::string> off, onto;
  for (const auto& [d, rows] : net) {
    if (rows < 0) off.push_back(absl::StrCat(topo.device(d).id, " (", -rows, ")"));
    if (rows > 0) onto.push_back(absl::StrCat(topo.device(d).id, " (", rows, ")"));
  }
  out.moves = absl::StrCat(moved, moved == 1 ? " row" : " rows", " of ", changed,
                           changed == 1 ? " group's" : " groups'", " weight gradients moved off ",
                           absl::StrJoin(off, ", "), " onto ", absl::StrJoin(onto, ", "));
  return out;
}

}  // namespace

absl::StatusOr<std::vector<BalancedWeightGradients>> BalanceWeightGradients(
    const GraphIndex& ix, const quilt::v1::Strategy& plan, const Topology& topo,
    const CostModel& cost, int64_t batch, const std::map<std::string, double>& busy_s) {
  ASSIGN_OR_RETURN(Placement p, Place(ix, plan, topo, batch));
  const std::vector<bool> wg = WeightGradientOps(ix);
  std::vector<GroupRows> groups;
  std::vector<int> row_of_group(p.groups.size(), -1);
  for (size_t k = 0; k < p.groups.size(); ++k) {
    const std::vector<Slice> slices = SplitBatch(p.groups[k], batch);
    if (slices.size() < 2) continue;
    GroupRows g;
    g.group = static_cast<int>(k);
    for (const Slice& s : slices) {
      g.devices.push_back(s.device);
      g.forward.push_back(s.end - s.begin);
    }
    g.rows = g.forward;
    g.per_row_s.assign(g.devices.size(), 0);
    row_of_group[k] = static_cast<int>(groups.size());
    groups.push_back(std::move(g));
  }
  bool any = false;
  for (size_t i = 0; i < wg.size(); ++i) {
    const int k = row_of_group[p.group_of_op[i]];
    if (!wg[i] || k < 0 || !cost.Batched(static_cast<int>(i))) continue;
    GroupRows& g = groups[k];
    for (size_t j = 0; j < g.devices.size(); ++j) {
      g.per_row_s[j] += cost.OpTime(static_cast<int>(i), g.devices[j], g.forward[j]) /
                        static_cast<double>(g.forward[j]);
    }
    any = true;
  }
  std::vector<BalancedWeightGradients> out;
  if (!any) return out;
  // What the weight-gradient ops read from outside them, per row.
  const Graph& graph = ix.graph();
  std::vector<int> producer(graph.tensors().size(), -1);
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    for (int t : ix.Outputs(static_cast<int>(i))) {
      if (t >= 0) producer[t] = static_cast<int>(i);
    }
  }
  std::vector<std::set<int>> read(groups.size());
  for (size_t i = 0; i < wg.size(); ++i) {
    const int k = row_of_group[p.group_of_op[i]];
    if (!wg[i] || k < 0) continue;
    for (int t : ix.Inputs(static_cast<int>(i))) {
      if (t < 0 || !ix.Batched(t) || (producer[t] >= 0 && wg[producer[t]])) continue;
      if (read[k].insert(t).second) {
        const TensorInfo& info = graph.tensors()[t];
        groups[k].bytes_per_row +=
            static_cast<double>(info.shape.NumElements(1) * DTypeSize(info.dtype));
      }
    }
  }
  // Rows the plan has moved already.
  for (GroupRows& g : groups) {
    const std::vector<std::pair<int, int>>& split = p.weight_gradient_groups[g.group];
    if (split.empty()) continue;
    const std::vector<Slice> rows = SplitBatch(split, batch);
    for (size_t j = 0; j < g.devices.size(); ++j) g.rows[j] = rows[j].end - rows[j].begin;
  }
  std::vector<double> load(topo.num_devices(), 0);
  for (int d = 0; d < topo.num_devices(); ++d) {
    auto it = busy_s.find(topo.device(d).id);
    if (it != busy_s.end()) load[d] = it->second;
  }
  for (bool same_node : {false, true}) {
    const std::vector<Move> moves = Moves(groups, load, topo, same_node);
    for (size_t n : {moves.size(), moves.size() / 2}) {
      if (n == 0) continue;
      BalancedWeightGradients b = Apply(plan, groups, moves, n, topo);
      bool seen = false;
      for (const BalancedWeightGradients& o : out) {
        seen |= o.strategy.SerializeAsString() == b.strategy.SerializeAsString();
      }
      if (!seen) out.push_back(std::move(b));
    }
  }
  return out;
}

}  // namespace quilt
