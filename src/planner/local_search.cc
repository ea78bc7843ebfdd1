#include "src/planner/local_search.h"

#include <algorithm>
#include <limits>
#include <random>

#include "absl/time/clock.h"
#include "src/common/status.h"
#include "src/common/work_clock.h"
#include "src/planner/priorities.h"

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

class Search {
 public:
  // `whole_placements`: try moving every group at once to the placements
  // the estimate favours (see Moves).
  // `evaluation_cap` > 0: plans this search judges at most, whether one
  // fits or not (`cap_until_fit`: until the best plan at the end of a pass
  // fits). `start`: what it starts from, for progress reports.
  Search(SearchSpace* space, int groups, const SearchOptions& o, absl::Time deadline,
         bool whole_placements, std::string start, int64_t evaluation_cap = 0,
         bool cap_until_fit = false)
      : space_(space),
        groups_(groups),
        options_(o),
        deadline_(deadline),
        unfit_deadline_(UnfitDeadline(o, deadline)),
        evaluation_cap_(evaluation_cap),
        cap_until_fit_(cap_until_fit),
        started_at_(space->judged()),
        start_(std::move(start)),
        next_progress_(WorkNow() + absl::Seconds(o.progress_every_s)),
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
      // next kSearchWindow plans are simulated together (on two threads), and
      // those after a move that was taken are simulated again from the new
      // plan. The window is fixed, so the plans are the same on any machine.
      for (size_t i = 0; i < pass.size();) {
        if (OutOfBudget(best_score)) break;
        std::vector<PlanState> window;
        std::vector<size_t> after;  // per plan: the index of the move after it
        for (; i < pass.size() && window.size() < kSearchWindow; ++i) {
          PlanState next = Apply(current, pass[i], *space_);
          if (next == current) continue;
          // A plan whose bound is no faster than a current plan that fits
          // would not be taken (nor kept as the nearest to fitting: the
          // plan found is faster still).
          if (options_.rule_out_by_bound && current_score.feasible() &&
              space_->CannotBeat(next, current_score.time_s)) {
            continue;
          }
          // Nor one whose memory is over by at least the current plan's
          // (by any bytes, where the current plan fits), and over a
          // device's whole memory (no nearer to fitting either).
          if (options_.rule_out_by_bound && space_->MemoryCannotBeat(next, current_score)) {
            continue;
          }
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
    if (best.feasible() && fit_at_ < 0) fit_at_ = space_->judged();
    if (best.feasible() && options_.max_evaluations > 0 &&
        space_->judged() - fit_at_ >= options_.max_evaluations) {
      stopped_by_ = "evaluation limit";
      return true;
    }
    if (evaluation_cap_ > 0 && !(cap_until_fit_ && best.feasible()) &&
        space_->judged() - started_at_ >= evaluation_cap_) {
      stopped_by_ = "evaluation limit";
      return true;
    }
    // (While its best does not fit, it leaves the memory repair its share.)
    if (WorkNow() >= (best.feasible() ? deadline_ : unfit_deadline_)) {
      stopped_by_ = "time budget";
      return true;
    }
    return false;
  }

  void Progress(const Score& best) {
    if (!options_.progress) return;
    const absl::Time now = WorkNow();
    if (now < next_progress_) return;
    next_progress_ = now + absl::Seconds(options_.progress_every_s);
    options_.progress(SearchProgress{start_, /*other_seed=*/false, space_->evaluations(),
                                     space_->ruled_out(), best.feasible(), best.time_s,
                                     best.overflow_bytes});
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
  absl::Time unfit_deadline_;
  int64_t evaluation_cap_ = 0;
  bool cap_until_fit_ = false;
  int64_t started_at_ = 0;
  std::string start_;
  absl::Time next_progress_;
  std::mt19937_64 rng_;
};

}  // namespace

absl::StatusOr<std::pair<PlanState, Score>> EnumerateStates(
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
  while (WorkNow() < deadline) {
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

namespace {

// A descent's choices for group k of `state`: every other placement and
// all-reduce method (no parameter servers).
std::vector<std::pair<int, Method>> OtherChoices(const SearchSpace& space, const PlanState& state,
                                                 int k) {
  std::vector<std::pair<int, Method>> choices;
  for (int o = 0; o < static_cast<int>(space.options().size()); ++o) {
    for (Method m : space.MethodsFor(o)) {
      if (m == Method::kParameterServer) continue;
      if (o == state.place[k] && m == state.method[k]) continue;
      choices.push_back({o, m});
    }
  }
  return choices;
}

// The descents' core: group by group, the choice least over memory by the
// memory bound (where `by_memory`; else memory is not weighed), the lowest
// step bound among equals.
PlanState Descend(SearchSpace* space, int groups, const PlanState& from, int rounds,
                  bool by_memory) {
  PlanState state = from;
  double over = by_memory ? space->MemoryOverShare(state) : 0;
  double bound = space->BoundOf(state);
  for (int round = 0; round < rounds; ++round) {
    bool lowered = false;
    for (int k = 0; k < groups; ++k) {
      if (state.method[k] == Method::kParameterServer) continue;
      // Group k's choices; the others stay, so their bounds come together.
      const std::vector<std::pair<int, Method>> choices = OtherChoices(*space, state, k);
      const std::vector<double> bounds = space->BoundsOf(state, k, choices);
      PlanState next = state;
      int take = -1;
      double take_over = over, take_bound = bound;
      for (size_t i = 0; i < choices.size(); ++i) {
        next.place[k] = choices[i].first;
        next.method[k] = choices[i].second;
        const double o = by_memory ? space->MemoryOverShare(next) : 0;
        if (o < take_over * (1 - 1e-9) || (o <= take_over && bounds[i] < take_bound * (1 - 1e-9))) {
          take = static_cast<int>(i);
          take_over = o;
          take_bound = bounds[i];
        }
      }
      if (take < 0) continue;
      state.place[k] = choices[take].first;
      state.method[k] = choices[take].second;
      over = take_over;
      bound = take_bound;
      lowered = true;
    }
    if (!lowered) break;
  }
  return state;
}

}  // namespace

PlanState DescendBound(SearchSpace* space, int groups, const PlanState& from, int rounds) {
  return Descend(space, groups, from, rounds, /*by_memory=*/false);
}

PlanState DescendMemory(SearchSpace* space, int groups, const PlanState& from, int rounds) {
  return Descend(space, groups, from, rounds, /*by_memory=*/true);
}

absl::StatusOr<LocalSearchResult> RunLocalSearch(SearchSpace* space, int groups,
                                                 const SearchOptions& options, absl::Time deadline,
                                                 bool whole_placements, const std::string& start,
                                                 int64_t evaluation_cap, const PlanState& from,
                                                 const Score& from_score, bool cap_until_fit) {
  Search search(space, groups, options, deadline, whole_placements, start, evaluation_cap,
                cap_until_fit);
  ASSIGN_OR_RETURN(auto found, search.Run(from, from_score));
  return LocalSearchResult{std::move(found.first), found.second, search.stopped_by(), search.near(),
                           search.earlier()};
}

}  // namespace quilt
