#include "src/planner/seeds.h"

#include <algorithm>
#include <limits>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/planner/local_search.h"
#include "src/planner/placement.h"

namespace quilt {
namespace {

// Per group: what its parameters take with their gradients and optimizer
// state (momentum one more copy, Adam two), and its activations per batch
// row.
struct GroupBytes {
  std::vector<double> state, activation_per_row;
};

GroupBytes BytesOfGroups(const CoarseModel& coarse, const Graph& g) {
  const double copies =
      g.optimizer.kind == OptimizerSpec::Kind::kAdam
          ? 4
          : (g.optimizer.kind == OptimizerSpec::Kind::kSgd && g.optimizer.momentum != 0 ? 3 : 2);
  const Grouping& grouping = coarse.grouping();
  GroupBytes out;
  for (int k = 0; k < coarse.num_groups(); ++k) {
    out.state.push_back(static_cast<double>(grouping.param_bytes[k]) * copies);
    out.activation_per_row.push_back(static_cast<double>(grouping.activation_bytes_per_row[k]));
  }
  return out;
}

// Devices in node order cut into k runs: whole nodes where k is at most
// the nodes (runs of about as many devices each), else runs of about n/k
// devices.
std::vector<std::vector<int>> DeviceRuns(const Topology& topo, int k) {
  std::vector<std::vector<int>> runs;
  const int n = topo.num_devices();
  if (k <= topo.num_nodes()) {
    int seen = 0;
    runs.emplace_back();
    for (int node = 0; node < topo.num_nodes(); ++node) {
      const std::vector<int>& ds = topo.NodeDevices(node);
      // A new run once this one holds its share, while nodes are left for
      // the runs still to come.
      const int left_nodes = topo.num_nodes() - node;
      const int runs_to_come = k - static_cast<int>(runs.size());
      if (!runs.back().empty() &&
          (left_nodes <= runs_to_come ||
           (runs_to_come > 0 &&
            static_cast<int64_t>(seen) * k >= static_cast<int64_t>(runs.size()) * n))) {
        runs.emplace_back();
      }
      runs.back().insert(runs.back().end(), ds.begin(), ds.end());
      seen += static_cast<int>(ds.size());
    }
    return runs;
  }
  std::vector<int> all;
  for (int node = 0; node < topo.num_nodes(); ++node) {
    for (int d : topo.NodeDevices(node)) all.push_back(d);
  }
  for (int j = 0; j < k; ++j) {
    const size_t begin = static_cast<size_t>(j) * all.size() / k;
    const size_t end = static_cast<size_t>(j + 1) * all.size() / k;
    runs.emplace_back(all.begin() + begin, all.begin() + end);
  }
  return runs;
}

// One stage's devices: its memory and its rows of the batch.
struct StageDevices {
  std::vector<double> memory;
  std::vector<double> rows;
};

// The groups cut in order into the stages, each stage taking groups while
// its fullest device stays within `fill` of its memory (the last takes the
// rest); the first group of each stage, and the largest fill reached.
std::pair<std::vector<int>, double> CutStages(const std::vector<StageDevices>& stages,
                                              const std::vector<double>& state_bytes,
                                              const std::vector<double>& activation_bytes,
                                              double fill) {
  std::vector<int> first;
  double fullest = 0;
  size_t k = 0;
  const size_t groups = state_bytes.size();
  for (size_t j = 0; j < stages.size(); ++j) {
    first.push_back(static_cast<int>(k));
    double state = 0, activations = 0, at = 0;
    auto fullness = [&](double s, double a) {
      double most = 0;
      for (size_t i = 0; i < stages[j].memory.size(); ++i) {
        most = std::max(most, (s + a * stages[j].rows[i]) / stages[j].memory[i]);
      }
      return most;
    };
    const bool last = j + 1 == stages.size();
    while (k < groups) {
      const double f = fullness(state + state_bytes[k], activations + activation_bytes[k]);
      if (!last && at > 0 && f > fill) break;
      state += state_bytes[k];
      activations += activation_bytes[k];
      at = f;
      ++k;
    }
    fullest = std::max(fullest, at);
  }
  return {first, fullest};
}

}  // namespace

PlanState LayerwiseSeed(const Topology& topo, const CoarseModel& coarse, const Graph& g,
                        int64_t batch, bool by_node, SearchSpace* space) {
  const GroupBytes bytes = BytesOfGroups(coarse, g);
  std::vector<double> need;
  double total = 0;
  for (int k = 0; k < coarse.num_groups(); ++k) {
    need.push_back(bytes.state[k] + bytes.activation_per_row[k] * static_cast<double>(batch));
    total += need.back();
  }
  // Units: single devices, or whole nodes (the group's batch split over the
  // node's devices by speed), in node order; each takes a share of the need
  // in proportion to its memory.
  std::vector<int> units;
  std::vector<double> unit_memory;
  double memory = 0;
  for (int node = 0; node < topo.num_nodes(); ++node) {
    const std::vector<int>& ds = topo.NodeDevices(node);
    if (by_node) {
      PlacementOption o;
      double m = 0;
      for (int d : ds) {
        o.replicas.push_back({d, 1});
        m += static_cast<double>(topo.device(d).proto.memory_bytes());
      }
      o.label = ds.size() == 1 ? topo.device(ds[0]).id : "node " + topo.node_id(node) + " (even)";
      units.push_back(ds.size() == 1 ? space->SingleOption(ds[0]) : space->AddOption(std::move(o)));
      unit_memory.push_back(m);
      memory += m;
    } else {
      for (int d : ds) {
        units.push_back(space->SingleOption(d));
        unit_memory.push_back(static_cast<double>(topo.device(d).proto.memory_bytes()));
        memory += unit_memory.back();
      }
    }
  }
  PlanState s;
  size_t at = 0;
  double filled = 0;
  for (int k = 0; k < coarse.num_groups(); ++k) {
    if (filled > 0 && filled + need[k] / 2 > total * unit_memory[at] / memory &&
        at + 1 < units.size()) {
      ++at;
      filled = 0;
    }
    filled += need[k];
    s.place.push_back(units[at]);
    s.method.push_back(Method::kRing);
  }
  return s;
}

PlanState StagedSeed::In(SearchSpace* space) const {
  std::vector<int> option;
  for (const PlacementOption& o : stage_options) option.push_back(space->AddOption(o));
  PlanState s;
  for (int stage : stage_of_group) {
    s.place.push_back(option[stage]);
    s.method.push_back(Method::kRing);
  }
  return s;
}

std::optional<StagedSeed> CutInStages(const Topology& topo, const CoarseModel& coarse,
                                      const Graph& g, int64_t batch, int k,
                                      const SearchSpace& space) {
  const GroupBytes bytes = BytesOfGroups(coarse, g);
  const std::vector<double>& state_bytes = bytes.state;
  const std::vector<double>& activation_bytes = bytes.activation_per_row;
  StagedSeed seed;
  std::vector<StageDevices> stages;
  for (std::vector<int> run : DeviceRuns(topo, k)) {
    if (run.empty()) return std::nullopt;
    // A run of more devices than the batch has rows: its fastest devices,
    // one row each.
    if (static_cast<int64_t>(run.size()) > batch) {
      const PlacementOption whole = space.BySpeed(run, "");
      std::vector<std::pair<int, int>> by_speed = whole.replicas;
      std::stable_sort(by_speed.begin(), by_speed.end(),
                       [](const auto& a, const auto& b) { return a.second > b.second; });
      run.clear();
      for (int64_t i = 0; i < batch; ++i) run.push_back(by_speed[i].first);
      std::sort(run.begin(), run.end());
    }
    seed.stage_options.push_back(space.BySpeed(
        run,
        absl::StrCat("devices ", topo.device(run.front()).id, " to ", topo.device(run.back()).id)));
    StageDevices sd;
    for (const Slice& slice : SplitBatch(seed.stage_options.back().replicas, batch)) {
      sd.memory.push_back(
          std::max(1.0, static_cast<double>(topo.device(slice.device).proto.memory_bytes())));
      sd.rows.push_back(static_cast<double>(slice.end - slice.begin));
    }
    stages.push_back(std::move(sd));
  }
  // The least fill at which the groups fit in the k stages: bisected (more
  // fill never needs more stages). The groups' activations are every batch
  // tensor they produce, far more than stays alive: the fill only balances
  // the stages; whether they fit, the coarse model says.
  double lo = 0, hi = CutStages(stages, state_bytes, activation_bytes,
                                std::numeric_limits<double>::infinity())
                          .second;
  for (int i = 0; i < 40; ++i) {
    const double mid = (lo + hi) / 2;
    if (CutStages(stages, state_bytes, activation_bytes, mid).second <= mid) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  const std::vector<int> first = CutStages(stages, state_bytes, activation_bytes, hi).first;
  // (Stages left without groups are dropped: their devices stay idle.)
  std::vector<PlacementOption> used;
  for (int j = 0; j < k; ++j) {
    const int end = j + 1 < k ? first[j + 1] : coarse.num_groups();
    if (end == first[j]) continue;
    for (int group = first[j]; group < end; ++group) {
      seed.stage_of_group.push_back(static_cast<int>(used.size()));
    }
    used.push_back(std::move(seed.stage_options[j]));
  }
  seed.stage_options = std::move(used);
  return seed;
}

absl::StatusOr<std::vector<StagedSeed>> FindStagedSeeds(const Topology& topo,
                                                        const CostModel& fine_cost,
                                                        const CoarseModel& coarse, const Graph& g,
                                                        int64_t batch, double memory_fraction,
                                                        int count, const SearchSpace& space) {
  std::vector<StagedSeed> cuts;
  // (At most one stage a group, and one device a stage short of every
  // device: LayerwiseSeed.)
  const int most = std::min(topo.num_devices() - 1, coarse.num_groups());
  for (int k = 2; k <= most; ++k) {
    std::optional<StagedSeed> cut = CutInStages(topo, coarse, g, batch, k, space);
    if (cut.has_value()) cuts.push_back(std::move(*cut));
  }
  if (cuts.empty()) return std::vector<StagedSeed>();
  // Judged in a space of their own (`space` gets the chosen seed's options
  // alone, not every cut's).
  SearchSpace judge(topo, fine_cost, coarse, batch, memory_fraction);
  std::vector<PlanState> states;
  for (const StagedSeed& cut : cuts) states.push_back(cut.In(&judge));
  std::vector<absl::StatusOr<Score>> scores = judge.EvaluateAll(states);
  std::vector<size_t> order;
  for (size_t i = 0; i < cuts.size(); ++i) {
    RETURN_IF_ERROR(scores[i].status());
    cuts[i].score = *scores[i];
    order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return cuts[a].score.BetterThan(cuts[b].score); });
  // The best `count`, one of each plan (cuts of several k can be alike
  // once stages without groups are dropped).
  std::vector<StagedSeed> out;
  std::set<std::string> seen;
  for (size_t i : order) {
    if (static_cast<int>(out.size()) >= count) break;
    if (!seen.insert(judge.StateKey(states[i])).second) continue;
    out.push_back(std::move(cuts[i]));
  }
  return out;
}

std::optional<std::pair<PlanState, Score>> MemoryBalancedSeed(const Topology& topo, int groups,
                                                              const PlanState& from,
                                                              SearchSpace* space) {
  constexpr int kMostNodes = 16, kLongestRun = 4, kRounds = 20;
  if (topo.num_nodes() >= 3 && topo.num_nodes() <= kMostNodes) {
    for (int length = 2; length <= std::min(kLongestRun, topo.num_nodes() / 2); ++length) {
      for (int first = 0; first + length <= topo.num_nodes(); ++first) {
        std::vector<int> devices;
        for (int n = first; n < first + length; ++n) {
          for (int d : topo.NodeDevices(n)) devices.push_back(d);
        }
        space->AddOption(space->BySpeed(devices, absl::StrCat("nodes ", topo.node_id(first), " to ",
                                                              topo.node_id(first + length - 1))));
      }
    }
  }
  PlanState balanced = DescendMemory(space, groups, from, kRounds);
  if (balanced == from) return std::nullopt;
  absl::StatusOr<Score> score = space->Evaluate(balanced);
  if (!score.ok()) return std::nullopt;
  return std::make_pair(std::move(balanced), *score);
}

}  // namespace quilt
