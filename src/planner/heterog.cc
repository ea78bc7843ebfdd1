#include "src/planner/heterog.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "src/common/status.h"
#include "src/planner/coarse_graph.h"
#include "src/planner/priorities.h"
#include "src/planner/search_space.h"

namespace quilt {
namespace {

struct Move {
  int group = 0, length = 1;
  int option = -1;  // placement move
  Method method = Method::kRing;
  bool is_method = false;
  // A method move to parameter servers: on this node's devices (-1: the
  // group's own).
  int server_node = -1;
};

// Sets group k's server node (growing the state's list as needed).
void SetServerNode(PlanState* s, int k, int node) {
  if (node < 0 && s->ServerNode(k) < 0) return;
  if (s->server_node.size() < s->place.size()) s->server_node.resize(s->place.size(), -1);
  s->server_node[k] = node;
}

PlanState Apply(const PlanState& s, const Move& m, const SearchSpace& space) {
  PlanState out = s;
  for (int k = m.group; k < m.group + m.length && k < static_cast<int>(s.place.size()); ++k) {
    if (m.is_method) {
      // (A move made for the pass's starting plan may meet a group that an
      // earlier move of the pass placed where the method does not apply.)
      if (!space.Allows(out.place[k], m.method)) continue;
      out.method[k] = m.method;
      SetServerNode(&out, k, m.method == Method::kParameterServer ? m.server_node : -1);
    } else {
      out.place[k] = m.option;
      if (!space.Allows(m.option, out.method[k])) {
        out.method[k] = space.MethodsFor(m.option).front();
        SetServerNode(&out, k, -1);
      }
    }
  }
  return out;
}

// Groups over single devices in order, node by node, each device filled
// up to its memory with the groups' parameters, gradients, optimizer state
// and activations for the whole batch: a plan that fits models no
// data-parallel split can.
PlanState LayerwiseSeed(const Topology& topo, const CoarseModel& coarse, const Graph& g,
                        int64_t batch, bool by_node, SearchSpace* space) {
  const Grouping& grouping = coarse.grouping();
  // Optimizer state per parameter byte (momentum 1, Adam 2).
  const double state =
      g.optimizer.kind == OptimizerSpec::Kind::kAdam
          ? 2
          : (g.optimizer.kind == OptimizerSpec::Kind::kSgd && g.optimizer.momentum != 0 ? 1 : 0);
  std::vector<double> need;
  double total = 0;
  for (int k = 0; k < coarse.num_groups(); ++k) {
    need.push_back(static_cast<double>(grouping.param_bytes[k]) * (2 + state) +
                   static_cast<double>(grouping.activation_bytes_per_row[k]) *
                       static_cast<double>(batch));
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

// Plans the search simulates at once (SearchSpace::EvaluateAll): the local
// search's next moves, the explanation's put-back plans. Fixed, so that the
// plans are the same whatever the threads.
constexpr size_t kWindow = 2;

// Clusters of more devices than this try whole-plan placement moves first.
constexpr int kWholePlacementDevices = 64;

// Action spaces up to this many states are enumerated.
constexpr double kEnumerateStates = 20000;

absl::StatusOr<std::pair<PlanState, Score>> Enumerate(
    SearchSpace* space, int groups, const std::vector<std::pair<int, Method>>& choices,
    absl::Time deadline) {
  PlanState s, best;
  Score best_score;
  bool have = false;
  s.place.assign(groups, 0);
  s.method.assign(groups, Method::kRing);
  // Every state in both execution orders (the order innermost, so that a
  // deadline leaves no state tried in one order only).
  std::vector<size_t> at(groups, 0);
  while (absl::Now() < deadline) {
    for (int k = 0; k < groups; ++k) {
      s.place[k] = choices[at[k]].first;
      s.method[k] = choices[at[k]].second;
    }
    std::vector<PlanState> orders;
    for (auto order : kExecutionOrders) {
      s.order = order;
      orders.push_back(s);
    }
    std::vector<absl::StatusOr<Score>> scores = space->EvaluateAll(orders);
    for (size_t i = 0; i < orders.size(); ++i) {
      if (scores[i].ok() && (!have || scores[i]->BetterThan(best_score))) {
        best = orders[i];
        best_score = *scores[i];
        have = true;
      }
    }
    int k = 0;
    while (k < groups && ++at[k] == choices.size()) at[k++] = 0;
    if (k == groups) break;
  }
  if (!have) return absl::FailedPreconditionError("no plan could be simulated");
  return std::make_pair(best, best_score);
}

int AutoGroups(const Topology& topo) {
  return std::clamp(192 / std::max(1, topo.num_devices()), 12, 24);
}

class Search {
 public:
  // `whole_placements`: try moving every group at once to the placements
  // the estimate favours (see Moves).
  // `evaluation_cap` > 0: plans this search simulates at most, whether
  // one fits or not. `start`: what it starts from, for progress reports.
  Search(SearchSpace* space, int groups, const SearchOptions& o, absl::Time deadline,
         bool whole_placements, std::string start, int64_t evaluation_cap = 0)
      : space_(space),
        groups_(groups),
        options_(o),
        deadline_(deadline),
        evaluation_cap_(evaluation_cap),
        started_at_(space->evaluations()),
        start_(std::move(start)),
        next_progress_(absl::Now() + absl::Seconds(o.progress_every_s)),
        rng_(o.seed) {
    for (int k = 0; whole_placements && k < static_cast<int>(space->options().size()); ++k)
      estimates_.push_back(space->Estimate(k));
  }

  const std::string& stopped_by() const { return stopped_by_; }
  // The fastest plan seen over the search's share of memory but within the
  // devices' whole memory, if any.
  const std::optional<std::pair<PlanState, Score>>& near() const { return near_; }
  // Up to kEarlier plans that were the best before the result (the latest
  // first).
  static constexpr size_t kEarlier = 8;
  const std::vector<std::pair<PlanState, Score>>& earlier() const { return earlier_; }

  // Local search from `start`; returns the best state found.
  absl::StatusOr<std::pair<PlanState, Score>> Run(PlanState start, Score start_score) {
    PlanState best = start, current = start;
    Score best_score = start_score, current_score = start_score;
    int idle_restarts = 0;
    stopped_by_ = "converged";
    while (!OutOfBudget(best_score)) {
      bool improved = false;
      const std::vector<Move> pass = Moves(current, TimeOf(current_score));
      // The moves in turn, each from the plan the ones before it left; the
      // next kWindow plans are simulated together (on two threads), and
      // those after a move that was taken are simulated again from the new
      // plan. The window is fixed, so the plans are the same on any machine.
      for (size_t i = 0; i < pass.size();) {
        if (OutOfBudget(best_score)) break;
        std::vector<PlanState> window;
        std::vector<size_t> after;  // per plan: the index of the move after it
        for (; i < pass.size() && window.size() < kWindow; ++i) {
          PlanState next = Apply(current, pass[i], *space_);
          if (next == current) continue;
          window.push_back(std::move(next));
          after.push_back(i + 1);
        }
        std::vector<absl::StatusOr<Score>> scores = space_->EvaluateAll(window);
        for (size_t w = 0; w < window.size(); ++w) {
          if (!scores[w].ok()) continue;  // a state the lowering rejects: skip it
          const Score& score = *scores[w];
          Near(window[w], score);
          if (score.BetterThan(current_score) &&
              (!current_score.feasible() || score.time_s < current_score.time_s * (1 - 1e-6))) {
            current = window[w];
            current_score = score;
            improved = true;
            i = after[w];
            break;
          }
        }
      }
      if (current_score.BetterThan(best_score)) {
        // Kept: the coarsened graph's memory errs both ways, and the full
        // simulation may find that a later best does not fit, or an
        // earlier one over the memory share does.
        earlier_.insert(earlier_.begin(), {best, best_score});
        if (earlier_.size() > kEarlier) earlier_.pop_back();
        best = current;
        best_score = current_score;
        idle_restarts = 0;
      }
      if (improved) continue;
      // A local optimum: restart from the best plan, kicked by a few random
      // moves, until the restarts stop paying.
      // (While nothing fits, the restarts go on until the budget ends.)
      if (++idle_restarts > options_.restarts && best_score.feasible()) break;
      current = best;
      std::vector<Move> moves = Moves(best, TimeOf(best_score));
      const int kicks = 1 + static_cast<int>(rng_() % 3);
      for (int i = 0; i < kicks && !moves.empty(); ++i) {
        current = Apply(current, moves[rng_() % moves.size()], *space_);
      }
      absl::StatusOr<Score> score = space_->Evaluate(current);
      if (!score.ok()) {
        current = best;
        current_score = best_score;
      } else {
        current_score = *score;
      }
    }
    return std::make_pair(best, best_score);
  }

 private:
  // Whole-plan changes first: every group's aggregation at once to each
  // method its placement allows, then (on large clusters) every group to
  // each placement whose rough estimate (SearchSpace::Estimate) beats
  // `time_s`, the most promising first (at most kWholeMoves). Then
  // aggregation changes group by group (cheap and often worth it), runs of
  // groups from long to short, and single groups, each of these tiers
  // shuffled. (On clusters of hundreds of devices a plan over all of them
  // costs a good part of a second to simulate and the default budget
  // covers a few dozen moves: one group's change there saves little, a
  // smaller device set much. On smaller clusters, where the search covers
  // its moves, the early jumps led it to worse plans: docs/BENCHMARKS.md.)
  static constexpr size_t kWholeMoves = 4;
  std::vector<Move> Moves(const PlanState& s, double time_s) {
    std::vector<Move> whole, methods, ranges, singles, servers;
    const int nopt = static_cast<int>(space_->options().size());
    std::vector<std::pair<double, int>> promising;
    for (int o = 0; o < static_cast<int>(estimates_.size()); ++o) {
      const double e = estimates_[o];
      if (e < time_s && std::any_of(s.place.begin(), s.place.end(), [&](int p) { return p != o; }))
        promising.push_back({e, o});
    }
    std::sort(promising.begin(), promising.end());
    if (promising.size() > kWholeMoves) promising.resize(kWholeMoves);
    // Every group's aggregation at once: each method (parameter servers on
    // the groups' own devices), and parameter servers on each server node.
    std::vector<std::pair<Method, int>> all_at_once;  // (method, server node)
    for (Method m :
         {Method::kRing, Method::kHierarchical, Method::kParameterServer, Method::kTree}) {
      all_at_once.push_back({m, -1});
    }
    for (int node : space_->ServerNodes()) all_at_once.push_back({Method::kParameterServer, node});
    for (const auto& [m, node] : all_at_once) {
      int differ = 0;
      bool allowed = true;
      for (int k = 0; k < groups_ && allowed; ++k) {
        allowed = space_->Allows(s.place[k], m);
        differ += s.method[k] != m || s.ServerNode(k) != node;
      }
      // (One group differing is a move of the next tier.)
      if (allowed && differ > 1) whole.push_back({0, groups_, -1, m, true, node});
    }
    for (const auto& [e, o] : promising) whole.push_back({0, groups_, o, Method::kRing, false});
    for (int k = 0; k < groups_; ++k) {
      for (Method m : space_->MethodsFor(s.place[k])) {
        if (m != s.method[k] || s.ServerNode(k) >= 0) methods.push_back({k, 1, -1, m, true});
      }
      // A group on parameter servers: to a server node instead (last: they
      // seldom pay, and the pass is cut by the evaluation limit).
      if (s.method[k] == Method::kParameterServer && !space_->options()[s.place[k]].single()) {
        for (int node : space_->ServerNodes()) {
          if (node != s.ServerNode(k) && !space_->OnlyOn(s.place[k], node)) {
            servers.push_back({k, 1, -1, Method::kParameterServer, true, node});
          }
        }
      }
      for (int o = 0; o < nopt; ++o) {
        if (o != s.place[k]) singles.push_back({k, 1, o, Method::kRing, false});
      }
    }
    for (int len = groups_; len >= 2; len /= 2) {
      std::vector<Move> tier;
      for (int k = 0; k + 1 < groups_; k += std::max(1, len / 2)) {
        for (int o = 0; o < nopt; ++o) tier.push_back({k, len, o, Method::kRing, false});
      }
      std::shuffle(tier.begin(), tier.end(), rng_);
      ranges.insert(ranges.end(), tier.begin(), tier.end());
    }
    std::shuffle(methods.begin(), methods.end(), rng_);
    std::shuffle(singles.begin(), singles.end(), rng_);
    std::shuffle(servers.begin(), servers.end(), rng_);
    std::vector<Move> out = std::move(whole);
    out.insert(out.end(), methods.begin(), methods.end());
    out.insert(out.end(), ranges.begin(), ranges.end());
    out.insert(out.end(), singles.begin(), singles.end());
    out.insert(out.end(), servers.begin(), servers.end());
    return out;
  }

  // The evaluation limit counts once a plan fits: until then the search
  // goes on for its time budget.
  bool OutOfBudget(const Score& best) {
    Progress(best);
    if (best.feasible() && fit_at_ < 0) fit_at_ = space_->evaluations();
    if (best.feasible() && options_.max_evaluations > 0 &&
        space_->evaluations() - fit_at_ >= options_.max_evaluations) {
      stopped_by_ = "evaluation limit";
      return true;
    }
    if (evaluation_cap_ > 0 && space_->evaluations() - started_at_ >= evaluation_cap_) {
      stopped_by_ = "evaluation limit";
      return true;
    }
    if (absl::Now() >= deadline_) {
      stopped_by_ = "time budget";
      return true;
    }
    return false;
  }

  void Progress(const Score& best) {
    if (!options_.progress) return;
    const absl::Time now = absl::Now();
    if (now < next_progress_) return;
    next_progress_ = now + absl::Seconds(options_.progress_every_s);
    options_.progress(SearchProgress{start_, evaluation_cap_ > 0, space_->evaluations(),
                                     best.feasible(), best.time_s, best.overflow_bytes});
  }

  // A plan's time as the whole-plan moves compare it (any estimate beats
  // a plan that does not fit).
  static double TimeOf(const Score& score) {
    return score.feasible() ? score.time_s : std::numeric_limits<double>::infinity();
  }

  void Near(const PlanState& state, const Score& score) {
    if (score.feasible() || !score.fits_whole) return;
    if (!near_.has_value() || score.time_s < near_->second.time_s) near_ = {state, score};
  }

  SearchSpace* space_;
  std::vector<double> estimates_;  // per placement option
  std::optional<std::pair<PlanState, Score>> near_;
  std::vector<std::pair<PlanState, Score>> earlier_;
  // Evaluations made when a plan first fitted (-1: none has yet).
  int64_t fit_at_ = -1;
  std::string stopped_by_;
  int groups_;
  const SearchOptions& options_;
  absl::Time deadline_;
  int64_t evaluation_cap_ = 0;
  int64_t started_at_ = 0;
  std::string start_;
  absl::Time next_progress_;
  std::mt19937_64 rng_;
};

}  // namespace

absl::StatusOr<SearchResult> SearchHeteroG(const Graph& g, const Topology& topo,
                                           const CostModel& cost, int64_t batch,
                                           const std::vector<NamedStrategy>& baselines,
                                           const SearchOptions& options) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + absl::Seconds(options.time_budget_s);
  if (!g.has_backward) return absl::InvalidArgumentError("planning needs a training graph");
  const int target = options.target_groups > 0 ? options.target_groups : AutoGroups(topo);
  const int64_t rows = std::max<int64_t>(1, batch / std::max(1, topo.num_devices()));
  const Grouping grouping = GroupOps(g, cost, target, rows);
  ASSIGN_OR_RETURN(std::unique_ptr<CoarseModel> coarse, CoarseModel::Build(g, grouping, cost));
  SearchSpace space(topo, cost, *coarse, batch, options.memory_fraction);
  SearchResult result;
  result.groups = coarse->num_groups();
  std::optional<PlanState> near;
  std::vector<std::pair<PlanState, Score>> earlier;
  // Start from the best baseline on the coarse model.
  PlanState best;
  Score best_score;
  bool have = false;
  // Splits over several devices first: when the budget ends the starts
  // early (hundreds of devices), a single device is the worst of them.
  std::vector<const NamedStrategy*> starts;
  for (const NamedStrategy& ns : baselines) {
    if (ns.strategy.groups_size() == 1 && ns.strategy.groups(0).replicas_size() > 1)
      starts.push_back(&ns);
  }
  for (const NamedStrategy& ns : baselines) {
    if (!(ns.strategy.groups_size() == 1 && ns.strategy.groups(0).replicas_size() > 1))
      starts.push_back(&ns);
  }
  for (const NamedStrategy* start_ns : starts) {
    const NamedStrategy& ns = *start_ns;
    if (!ns.infeasible_reason.empty() || ns.strategy.groups_size() != 1) continue;
    // (On a cluster of hundreds of devices each takes seconds: the budget
    // holds here too, once a start fits.)
    if (have && best_score.feasible() && absl::Now() >= deadline) break;
    // In either execution order: the search keeps the start's.
    std::vector<PlanState> orders;
    for (auto order : kExecutionOrders) {
      orders.push_back(space.FromDataParallel(ns.strategy));
      orders.back().order = order;
    }
    std::vector<absl::StatusOr<Score>> scores = space.EvaluateAll(orders);
    for (size_t i = 0; i < orders.size(); ++i) {
      const PlanState& s = orders[i];
      const absl::StatusOr<Score>& score = scores[i];
      if (!score.ok()) continue;
      if (score->feasible()) {
        auto [it, added] = result.baseline_coarse_s.try_emplace(ns.name, score->time_s);
        if (!added) it->second = std::min(it->second, score->time_s);
      }
      if (!have || score->BetterThan(best_score)) {
        best = s;
        best_score = *score;
        result.start = ns.name;
        have = true;
      }
    }
  }
  // Where no baseline fits, layer-wise seeds too. The search starts from
  // the best start, then searches from each other seed as well (within
  // options.other_seed_evaluations plans): a seed's own score does not
  // tell which leads to the fastest plan that fits. (gpt2_xl on HeteroG's
  // testbed at batch 5: the seed over devices fits and is the start, the
  // one over nodes does not fit as it stands; the search from it finds
  // 9.2 s per step against 13.4 s.)
  struct Seed {
    PlanState state;
    Score score;
    std::string name;
  };
  std::vector<Seed> seeds;
  if (!have || !best_score.feasible()) {
    for (bool by_node : {false, true}) {
      Seed seed{LayerwiseSeed(topo, *coarse, g, batch, by_node, &space), Score{},
                by_node ? "layer-wise split over nodes" : "layer-wise split over devices"};
      absl::StatusOr<Score> score = space.Evaluate(seed.state);
      if (!score.ok()) continue;
      seed.score = *score;
      if (!have || score->BetterThan(best_score)) {
        best = seed.state;
        best_score = *score;
        result.start = seed.name;
        have = true;
      }
      seeds.push_back(std::move(seed));
    }
  }
  std::vector<Seed> other_seeds;
  for (Seed& seed : seeds) {
    if (seed.name != result.start) other_seeds.push_back(std::move(seed));
  }
  // The first search's start and result, when a search from another seed
  // beats it.
  struct FirstSearch {
    PlanState start;
    std::string start_name;
    double start_s = 0;
    PlanState plan;
    Score score;
  };
  std::optional<FirstSearch> first_search;
  if (!have) return absl::FailedPreconditionError("no starting plan could be simulated");
  PlanState start_state = best;
  result.start_s = best_score.time_s;
  // Small action spaces are enumerated (the optimum, cheaply); larger ones
  // searched locally.
  std::vector<std::pair<int, Method>> choices;
  for (int opt = 0; opt < static_cast<int>(space.options().size()); ++opt) {
    for (Method m : space.MethodsFor(opt)) choices.push_back({opt, m});
  }
  double states = 2;  // both execution orders
  for (int k = 0; k < coarse->num_groups(); ++k) states *= static_cast<double>(choices.size());
  if (states <= kEnumerateStates &&
      (options.max_evaluations == 0 || states <= static_cast<double>(options.max_evaluations))) {
    ASSIGN_OR_RETURN(auto found, Enumerate(&space, coarse->num_groups(), choices, deadline));
    if (found.second.BetterThan(best_score)) {
      best = found.first;
      best_score = found.second;
    }
    result.stopped_by = absl::Now() < deadline ? "enumerated" : "time budget";
  } else {
    const bool whole = topo.num_devices() > kWholePlacementDevices;
    Search search(&space, coarse->num_groups(), options, deadline, whole, result.start);
    ASSIGN_OR_RETURN(auto found, search.Run(best, best_score));
    best = found.first;
    best_score = found.second;
    result.stopped_by = search.stopped_by();
    earlier = search.earlier();
    std::optional<std::pair<PlanState, Score>> nearest = search.near();
    for (const Seed& seed : other_seeds) {
      if (options.other_seed_evaluations <= 0 || absl::Now() >= deadline) break;
      Search again(&space, coarse->num_groups(), options, deadline, whole, seed.name,
                   options.other_seed_evaluations);
      ASSIGN_OR_RETURN(auto other, again.Run(seed.state, seed.score));
      if (!other.second.BetterThan(best_score)) continue;
      if (!first_search.has_value()) {
        first_search = FirstSearch{start_state, result.start, result.start_s, best, best_score};
      }
      best = other.first;
      best_score = other.second;
      start_state = seed.state;
      result.start = seed.name;
      result.start_s = seed.score.time_s;
      result.stopped_by = again.stopped_by();
      earlier = again.earlier();
      // (The plans the explanation shows are described against the start
      // of the search they come from: this one's.)
      nearest = again.near();
    }
    if (nearest.has_value() &&
        (!best_score.feasible() || nearest->second.time_s < best_score.time_s)) {
      near = nearest->first;
      result.near_s = nearest->second.time_s;
    }
  }
  result.result_s = best_score.time_s;
  result.feasible = best_score.feasible();
  std::vector<int64_t> fusions = {SearchSpace::kFusePerGroup, SearchSpace::kFuseNone};
  fusions.insert(fusions.end(), options.bucket_bytes.begin(), options.bucket_bytes.end());
  for (int64_t fusion : fusions) {
    result.variants.push_back(space.FineStrategy(g, best, "heterog", fusion));
    result.variant_collectives.push_back(FusionLabel(fusion));
  }
  result.first_start_variant = result.variants.size();
  // The starting plan with the smallest buckets too: the search compared
  // plans with a collective per group, which can favour choices (parameter
  // servers) that buckets make slower than the start.
  if (!(start_state == best) && !options.bucket_bytes.empty()) {
    const int64_t smallest =
        *std::min_element(options.bucket_bytes.begin(), options.bucket_bytes.end());
    result.variants.push_back(space.FineStrategy(g, start_state, "heterog", smallest));
    result.variant_collectives.push_back(FusionLabel(smallest) + ", ops placed as " + result.start +
                                         " places them");
  }
  // The starting placement with the plan's aggregation (where that
  // placement allows it), one collective per group: the coarse model can
  // move ops for a saving that the full simulation, with the plan's
  // collectives, does not confirm.
  std::optional<PlanState> mixed_state;
  Score mixed_plan_score;
  if (!(start_state == best)) {
    PlanState mixed = start_state;
    mixed.order = best.order;
    for (size_t k = 0; k < mixed.method.size(); ++k) {
      if (space.Allows(mixed.place[k], best.method[k])) {
        mixed.method[k] = best.method[k];
        SetServerNode(&mixed, static_cast<int>(k), best.ServerNode(static_cast<int>(k)));
      }
    }
    absl::StatusOr<Score> mixed_score = space.Evaluate(mixed);
    if (!(mixed == start_state) && !(mixed == best) && mixed_score.ok()) {
      mixed_state = mixed;
      mixed_plan_score = *mixed_score;
      result.mixed_variant = result.variants.size();
      result.mixed_s = mixed_score->time_s;
      result.variants.push_back(
          space.FineStrategy(g, mixed, "heterog", SearchSpace::kFusePerGroup));
      result.variant_collectives.push_back(FusionLabel(SearchSpace::kFusePerGroup) +
                                           ", the plan's aggregation, ops placed as " +
                                           result.start + " places them");
    }
  }
  if (near.has_value()) {
    result.near_variant = result.variants.size();
    result.variants.push_back(space.FineStrategy(g, *near, "heterog", SearchSpace::kFusePerGroup));
    result.variant_collectives.push_back(FusionLabel(SearchSpace::kFusePerGroup) +
                                         ", a plan the search kept from over its memory share");
  }
  if (first_search.has_value()) {
    result.first_search_variant = result.variants.size();
    result.first_search_start = first_search->start_name;
    result.first_search_start_s = first_search->start_s;
    result.first_search_s = first_search->score.time_s;
    result.variants.push_back(
        space.FineStrategy(g, first_search->plan, "heterog", SearchSpace::kFusePerGroup));
    result.variant_collectives.push_back(FusionLabel(SearchSpace::kFusePerGroup) +
                                         ", the plan of the search from " +
                                         first_search->start_name);
  }
  for (const auto& [state, score] : earlier) {
    result.fallbacks.push_back(space.FineStrategy(g, state, "heterog", SearchSpace::kFusePerGroup));
    result.fallback_s.push_back(score.time_s);
  }
  // What each group's choice is worth: the step with that group put back
  // as the start had it.
  auto describe = [&](const PlanState& state, int k, GroupChoice* c) {
    const PlacementOption& o = space.options()[state.place[k]];
    c->placement = o.label;
    c->aggregation = space.AggregationLabel(state, k);
  };
  // The step with each group of `plan` that differs from `base` put back
  // as there, kWindow at a time while the budget lasts (each costs a
  // simulation: seconds on large clusters).
  auto differs_from = [&](const PlanState& plan, const PlanState& base, int k) {
    return plan.place[k] != base.place[k] || plan.method[k] != base.method[k] ||
           plan.ServerNode(k) != base.ServerNode(k);
  };
  auto put_back_each = [&](const PlanState& plan, const PlanState& base) {
    std::vector<int> changed;
    for (int k = 0; k < coarse->num_groups(); ++k) {
      if (differs_from(plan, base, k)) changed.push_back(k);
    }
    std::map<int, absl::StatusOr<Score>> out;
    for (size_t i = 0; i < changed.size() && absl::Now() < deadline; i += kWindow) {
      std::vector<PlanState> backs;
      for (size_t j = i; j < std::min(changed.size(), i + kWindow); ++j) {
        backs.push_back(plan);
        backs.back().place[changed[j]] = base.place[changed[j]];
        backs.back().method[changed[j]] = base.method[changed[j]];
        SetServerNode(&backs.back(), changed[j], base.ServerNode(changed[j]));
      }
      std::vector<absl::StatusOr<Score>> scores = space.EvaluateAll(backs);
      for (size_t j = 0; j < backs.size(); ++j) out.emplace(changed[i + j], scores[j]);
    }
    return out;
  };
  // What putting group k of `plan` (of `score`) back as in `base` says of
  // its choice.
  auto worth = [&](const std::map<int, absl::StatusOr<Score>>& backs, const PlanState& plan,
                   const PlanState& base, int k, const Score& score, GroupChoice* c) {
    if (auto it = backs.find(k); it != backs.end()) {
      const absl::StatusOr<Score>& s = it->second;
      if (s.ok() && s->feasible()) c->saved_s = s->time_s - score.time_s;
      if (s.ok() && !s->feasible() && score.feasible()) c->needed_to_fit = true;
    } else if (differs_from(plan, base, k)) {
      c->saved_not_measured = true;  // the budget ran out first
    }
  };
  const std::map<int, absl::StatusOr<Score>> put_back = put_back_each(best, start_state);
  // (The plan may become the starting placement with the plan's
  // aggregation: its choices are worth their own figures.)
  std::map<int, absl::StatusOr<Score>> mixed_put_back;
  if (mixed_state.has_value()) mixed_put_back = put_back_each(*mixed_state, start_state);
  // (Or the first search's plan, against its own start.)
  std::map<int, absl::StatusOr<Score>> first_put_back;
  if (first_search.has_value()) {
    first_put_back = put_back_each(first_search->plan, first_search->start);
  }
  for (int k = 0; k < coarse->num_groups(); ++k) {
    GroupChoice c;
    c.group = k;
    c.ops = static_cast<int>(grouping.forward_ops[k].size());
    c.first_op = g.ops[grouping.forward_ops[k].front()].name;
    c.last_op = g.ops[grouping.forward_ops[k].back()].name;
    GroupChoice as_start = c;
    describe(best, k, &c);
    describe(start_state, k, &as_start);
    result.start_choices.push_back(as_start);
    worth(put_back, best, start_state, k, best_score, &c);
    result.choices.push_back(c);
    if (mixed_state.has_value()) {
      GroupChoice m = as_start;
      describe(*mixed_state, k, &m);
      worth(mixed_put_back, *mixed_state, start_state, k, mixed_plan_score, &m);
      result.mixed_choices.push_back(m);
    }
    if (first_search.has_value()) {
      GroupChoice f = as_start;
      describe(first_search->plan, k, &f);
      worth(first_put_back, first_search->plan, first_search->start, k, first_search->score, &f);
      result.first_search_choices.push_back(f);
    }
    if (near.has_value()) {
      GroupChoice n = as_start;
      describe(*near, k, &n);
      result.near_choices.push_back(n);
    }
    result.fallback_choices.resize(earlier.size());
    for (size_t e = 0; e < earlier.size(); ++e) {
      GroupChoice f = as_start;
      describe(earlier[e].first, k, &f);
      result.fallback_choices[e].push_back(f);
    }
  }
  result.evaluated = space.evaluations();
  result.search_wall_s = absl::ToDoubleSeconds(absl::Now() - start);
  return result;
}

}  // namespace quilt
