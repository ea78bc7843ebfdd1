#include "src/planner/heterog.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "src/common/status.h"
#include "src/common/work_clock.h"
#include "src/graph/graph_index.h"
#include "src/planner/coarse_graph.h"
#include "src/planner/local_search.h"
#include "src/planner/memory_repair.h"
#include "src/planner/memory_share.h"
#include "src/planner/priorities.h"
#include "src/planner/search_space.h"
#include "src/planner/seeds.h"
#include "src/planner/subset_starts.h"

namespace quilt {
namespace {

// Staged seeds searched from where no baseline fits.
constexpr int kStagedSeeds = 2;
// Starts over the search's memory share simulated in full to raise it to
// (each costs a full simulation: seconds on hundreds of devices).
constexpr size_t kShareRaiseTries = 3;
// Where the share was raised to a start, the layer-wise seeds are searched
// from only where the start is this much slower than the compute lower
// bound or more (SearchOptions::lower_bound_s): nearer, no plan can gain
// enough to pay for their searches (seconds each).
constexpr double kSeedsWorthAbove = 1.05;
// Clusters of more devices than this try whole-plan placement moves first.
constexpr int kWholePlacementDevices = 64;

// Action spaces up to this many states are enumerated.
constexpr double kEnumerateStates = 20000;
// Rounds of the descent on the bound that regroups the start (each over
// every group, placement and method).
constexpr int kDescentRounds = 4;
// How much slower on the coarse model than the first search's plan the
// plan of a search alongside it may be and still be simulated in full.
constexpr double kAlongsideWithin = 0.03;
// Where no search's plan fits on the coarse model, on clusters up to this
// many devices (where a full simulation costs milliseconds), each search's
// plan stays a candidate in full: the coarse model misses short-lived
// tensors both ways, and one over memory there may fit in full, faster
// than the plan it ranked first. (gpt2_xl at batch 7 on HeteroG's testbed:
// the search from a staged seed ends over memory on the coarse model and
// fits as it is in full, 17.8 s per step, against 20.0 s for the first
// search's plan repaired.)
constexpr int kUnfitCandidatesDevices = 16;

// `state` for the full graph with its gradients formed into collectives
// each way of `fusions`, the repair's shifted ops moved (`index`: of the
// full graph; needed only where there are moves).
std::vector<quilt::v1::Strategy> PlanVariants(const SearchSpace& space, const Graph& g,
                                              const PlanState& state,
                                              const std::vector<int64_t>& fusions,
                                              const std::vector<OpMove>& moves,
                                              const GraphIndex* index) {
  std::vector<quilt::v1::Strategy> out;
  for (int64_t fusion : fusions) {
    out.push_back(space.FineStrategy(g, state, "heterog", fusion));
    if (!moves.empty()) ApplyOpMoves(*index, moves, &out.back());
  }
  return out;
}

// A choice's ops as a group of the plan for the full graph lists them.
void DescribeOps(const quilt::v1::GroupPlacement& group, GroupChoice* c) {
  c->ops = group.ops_size();
  c->first_op = group.ops().empty() ? "" : group.ops(0);
  c->last_op = group.ops().empty() ? "" : group.ops(group.ops_size() - 1);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoarseModel>> CoarsenForSearch(const Graph& g, const Topology& topo,
                                                              const CostModel& cost, int64_t batch,
                                                              int target_groups) {
  const int target =
      target_groups > 0 ? target_groups : std::clamp(192 / std::max(1, topo.num_devices()), 12, 24);
  const int64_t rows = std::max<int64_t>(1, batch / std::max(1, topo.num_devices()));
  return CoarseModel::Build(g, GroupOps(g, cost, target, rows), cost);
}

absl::StatusOr<SearchResult> SearchHeteroG(const Graph& g, const Topology& topo,
                                           const CostModel& cost, int64_t batch,
                                           const std::vector<NamedStrategy>& baselines,
                                           const SearchOptions& options) {
  const WorkClockIfNone clock;  // (its budget's: work_clock.h)
  const absl::Time wall_start = absl::Now();
  const absl::Time start = WorkNow();
  const absl::Time deadline = start + absl::Seconds(options.time_budget_s);
  // (Where no plan fits yet: the memory repair's share left to it.)
  const absl::Time unfit_deadline = UnfitDeadline(options, deadline);
  if (!g.has_backward) return absl::InvalidArgumentError("planning needs a training graph");
  ASSIGN_OR_RETURN(std::unique_ptr<CoarseModel> coarse_model,
                   CoarsenForSearch(g, topo, cost, batch, options.target_groups));
  // (Shared with the result's repair, which outlives the call.)
  const std::shared_ptr<CoarseModel> coarse = std::move(coarse_model);
  const Grouping& grouping = coarse->grouping();
  const auto space_owner =
      std::make_shared<SearchSpace>(topo, cost, *coarse, batch, options.memory_fraction);
  SearchSpace& space = *space_owner;
  SearchResult result;
  result.groups = coarse->num_groups();
  std::optional<PlanState> near;
  Score near_score;
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
  // Per start: its better order's state and score (the last judging's).
  std::map<std::string, std::pair<PlanState, Score>> start_scores;
  // Starts found over memory in full (passed over once the share is raised).
  std::set<std::string> over_in_full;
  auto judge_starts = [&]() {
    have = false;
    start_scores.clear();
    result.baseline_coarse_s.clear();
    result.baseline_bound_s.clear();
    for (const NamedStrategy* start_ns : starts) {
      const NamedStrategy& ns = *start_ns;
      if (!ns.infeasible_reason.empty() || ns.strategy.groups_size() != 1 ||
          over_in_full.count(ns.name)) {
        continue;
      }
      // (On a cluster of hundreds of devices each takes seconds: the budget
      // holds here too, once a start fits.)
      if (have && best_score.feasible() && WorkNow() >= deadline) break;
      // In either execution order: the search keeps the start's.
      std::vector<PlanState> orders;
      for (auto order : kExecutionOrders) {
        orders.push_back(space.FromDataParallel(ns.strategy));
        orders.back().order = order;
      }
      // A start whose bound is no faster than one that fits cannot replace
      // it: not simulated.
      if (have && best_score.feasible() &&
          std::all_of(orders.begin(), orders.end(), [&](const PlanState& s) {
            return space.StartCannotBeat(s, best_score.time_s);
          })) {
        double bound = space.BoundOf(orders[0]);
        for (const PlanState& s : orders) bound = std::min(bound, space.BoundOf(s));
        result.baseline_bound_s[ns.name] = bound;
        continue;
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
        auto [it, added] = start_scores.try_emplace(ns.name, s, *score);
        if (!added && score->BetterThan(it->second.second)) it->second = {s, *score};
        if (!have || score->BetterThan(best_score)) {
          best = s;
          best_score = *score;
          result.start = ns.name;
          have = true;
        }
      }
    }
  };
  judge_starts();
  // Where no start fits the search's memory share: the closest to it,
  // up to kShareRaiseTries of them, simulated in full where over the share
  // by no more than the devices' memory above it, in all (the coarse model
  // errs both ways); the share is raised to those that fit in full
  // (memory_share.h) and the starts judged again (without those over
  // memory in full).
  double raised_step_s = 0;  // the fastest start the share was raised to, in full
  if (have && !best_score.feasible() && options.raise_share_to_start) {
    std::vector<std::pair<const NamedStrategy*, std::pair<PlanState, Score>>> scored;
    for (const auto& [name, state_score] : start_scores) {  // (by name)
      for (const NamedStrategy* ns : starts) {
        if (ns->name == name) scored.push_back({ns, state_score});
      }
    }
    const std::vector<ShareCandidate> candidates =
        PickShareCandidates(topo, scored, kShareRaiseTries, options.memory_fraction);
    if (options.progress && !candidates.empty()) {
      SearchProgress p;
      p.start = result.start;
      p.raising_share = static_cast<int>(candidates.size());
      p.evaluated = space.evaluations();
      p.overflow_bytes = best_score.overflow_bytes;
      options.progress(p);
    }
    ASSIGN_OR_RETURN(
        ShareRaise raised,
        RaiseShareToStarts(&space, g, topo, cost, batch, candidates, options.memory_fraction,
                           kSeedsWorthAbove * options.lower_bound_s));
    if (raised.raised) {
      over_in_full.insert(raised.over_in_full.begin(), raised.over_in_full.end());
      result.memory_share = raised.description;
      raised_step_s = raised.full_step_s;
      judge_starts();
    }
  }
  // Data parallelism over the fastest devices or nodes alone, where it
  // beats every start (subset_starts.h): the start where none fits, else
  // searched from alongside the first search (from it alone, the search
  // ended on slower plans as often as on faster ones).
  std::optional<SubsetStart> subset_seed;
  if (have && options.subset_starts) {
    subset_seed = BestSubsetStart(&space, coarse->num_groups(), best_score, deadline);
    if (subset_seed.has_value() && !best_score.feasible()) {
      best = subset_seed->state;
      best_score = subset_seed->score;
      result.start = subset_seed->name;
      subset_seed.reset();
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
    int64_t evaluations = 0;  // plans its search may judge
    // Its search's plan stays one of the variants simulated in full, with
    // each way of forming collectives, and never replaces the first
    // search's on the coarse model (that one keeps its own variants).
    bool alongside = false;
    // A staged seed not yet in the space (`state` is then empty).
    std::optional<StagedSeed> staged;
    // Scored only when searched from (so the searches before it judge
    // the plans they would without it).
    bool score_when_searched = false;
    // The start regrouped by the bound (its groups' savings are described
    // against the start).
    bool regrouped = false;
    // The first search, resumed from where its cap ended it over memory
    // (`state`), without a cap: the start it began from, and its score.
    std::optional<std::pair<PlanState, Score>> resumes;
  };
  std::vector<Seed> seeds;
  // (Also where the share was raised to a start and the start is far from
  // the lower bound: near the edge of memory a layer-wise plan can be far
  // faster than any data-parallel one. gpt2_xl at batch 35 on random-13:
  // 1.07× faster than the best baseline from the raised start alone, 1.59×
  // with the seeds.)
  const bool raised_far =
      raised_step_s > 0 &&
      (options.lower_bound_s <= 0 || raised_step_s >= kSeedsWorthAbove * options.lower_bound_s);
  if (!have || !best_score.feasible() || raised_far) {
    for (bool by_node : {false, true}) {
      Seed seed{LayerwiseSeed(topo, *coarse, g, batch, by_node, &space), Score{},
                by_node ? "layer-wise split over nodes" : "layer-wise split over devices",
                options.other_seed_evaluations};
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
    // And the best staged seeds (seeds.h): the groups in stages, each
    // replicated over a run of devices. (Two: the coarse model ranks the
    // plans their searches end with otherwise than the full simulation.)
    ASSIGN_OR_RETURN(std::vector<StagedSeed> staged,
                     FindStagedSeeds(topo, cost, *coarse, g, batch, options.memory_fraction,
                                     kStagedSeeds, space));
    for (StagedSeed& one : staged) {
      // (Its stages' options join the space when it is searched from: the
      // search from another start keeps the space it had.)
      Seed seed{PlanState{}, one.score,
                absl::StrCat("layer-wise split over ", one.stages(), " runs of devices"),
                options.other_seed_evaluations};
      seed.staged = std::move(one);
      // (Searched from after the first search, never first: with the
      // first search's small budget of plans, its plan can be faster on
      // the coarse model and slower in full than the one the search from
      // the layer-wise seed would have found.)
      if (!have) {
        seed.state = seed.staged->In(&space);
        best = seed.state;
        best_score = seed.score;
        result.start = seed.name;
        have = true;
      }
      seeds.push_back(std::move(seed));
    }
    // And, where none fits yet, the seed nearest to fitting balanced by the
    // memory bound (seeds.h).
    if (std::optional<std::pair<PlanState, Score>> balanced =
            best_score.feasible() ? std::nullopt
                                  : MemoryBalancedSeed(topo, coarse->num_groups(), best, &space)) {
      if (balanced->second.BetterThan(best_score)) {
        std::tie(best, best_score) = *balanced;
        result.start = kMemoryBalancedSeed;
      }
      seeds.push_back(Seed{std::move(balanced->first), balanced->second, kMemoryBalancedSeed,
                           options.other_seed_evaluations});
    }
    // And data parallelism over every device by speed, over memory as it
    // stands (were it not, it would be a start): its search moves groups
    // off devices to make room. (gpt2_xl at batch 8 on nvlink-2x4-v100:
    // 9.64 s per step from the other seeds, 8.23 s from this one.)
    // Searched from last.
    Seed every{PlanState{}, Score{}, "data parallelism over every device by speed",
               options.other_seed_evaluations};
    std::vector<int> all(topo.num_devices());
    for (int d = 0; d < topo.num_devices(); ++d) all[d] = d;
    // (The space has this option from the start: found, not added.)
    every.state.place.assign(coarse->num_groups(),
                             space.AddOption(space.BySpeed(
                                 all, absl::StrCat("all ", all.size(), " devices (by speed)"))));
    every.state.method.assign(coarse->num_groups(), Method::kRing);
    every.score_when_searched = true;
    // (Alongside: the plan of a search from a seed that fits, replaced on
    // the coarse model, would lose the variants of its start.)
    every.alongside = true;
    seeds.push_back(std::move(every));
  }
  // The results of the searches that do not give the plan, when they fit.
  struct Outcome {
    PlanState start;
    std::string start_name;
    double start_s = 0;
    PlanState plan;
    Score score;
    bool every_fusion = false;  // simulated in full with each fusion
    // The name of `start` where it is not start_name's plan.
    std::string against;
    bool start_fits = true;
  };
  std::vector<Outcome> others;
  if (!have) return absl::FailedPreconditionError("no starting plan could be simulated");
  // Where the start fits: the start regrouped by the plans' lower bound
  // (DescendBound) is searched from as well, within
  // options.bound_seed_evaluations plans, when it is faster than the
  // start. (vgg19 on HAP's cluster: the search from the baseline moves
  // every group to the fastest nodes; from the regrouped start the
  // convolutions stay on every device and the classifier moves to one
  // node, 826 -> 532 ms per step.) Its search's plan does not replace the first
  // search's: both are simulated in full (a search from a faster seed may
  // end on a plan slower in full).
  if (best_score.feasible() && options.bound_seed_evaluations > 0) {
    PlanState regrouped = DescendBound(&space, coarse->num_groups(), best, kDescentRounds);
    if (!(regrouped == best)) {
      absl::StatusOr<Score> score = space.Evaluate(regrouped);
      // (Only where it is faster than the start itself: the bound leaves
      // latencies and the order of the ops out.)
      if (score.ok() && score->feasible() && score->time_s < best_score.time_s) {
        seeds.push_back({std::move(regrouped), *score, result.start + " regrouped by the bound",
                         options.bound_seed_evaluations, /*alongside=*/true});
        seeds.back().regrouped = true;
      }
    }
  }
  if (subset_seed.has_value() && options.max_evaluations > 0) {
    seeds.push_back({std::move(subset_seed->state), subset_seed->score, subset_seed->name,
                     options.max_evaluations, /*alongside=*/true});
  }
  PlanState start_state = best;
  const Score start_score = best_score;
  result.start_s = best_score.time_s;
  result.start_fits = best_score.feasible();
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
    ASSIGN_OR_RETURN(auto found, EnumerateStates(&space, coarse->num_groups(), choices, deadline));
    if (found.second.BetterThan(best_score)) {
      best = found.first;
      best_score = found.second;
    }
    result.stopped_by = WorkNow() < deadline ? "enumerated" : "time budget";
  } else {
    const bool whole = topo.num_devices() > kWholePlacementDevices;
    // From a start over memory, with other seeds to search from, the first
    // search judges no more plans than each of theirs: uncapped, it would
    // spend the whole budget on a start that may never fit. (bert_large
    // at batch 383 on seven V100s beside a 4 GB device: the search from
    // the parameter-server baseline, which fits in full only, took the
    // budget; gpt2_xl at batch 7 on random-11 fitted nowhere that way, and
    // fits from the staged seeds.) Where it ends over memory and no
    // other search finds a plan that fits, it goes on after them while
    // the budget lasts.
    const bool first_capped = !best_score.feasible() && options.other_seed_evaluations > 0 &&
                              std::any_of(seeds.begin(), seeds.end(), [&](const Seed& s) {
                                return s.name != result.start && s.evaluations > 0;
                              });
    ASSIGN_OR_RETURN(
        LocalSearchResult found,
        RunLocalSearch(&space, coarse->num_groups(), options, deadline, whole, result.start,
                       first_capped ? options.other_seed_evaluations : 0, best, best_score,
                       /*cap_until_fit=*/true));
    best = found.best;
    best_score = found.score;
    result.stopped_by = found.stopped_by;
    // Any search of the run the budget ended makes it machine-dependent:
    // then the run says so, whichever search's plan it keeps.
    bool budget_ended = found.stopped_by == "time budget";
    earlier = found.earlier;
    std::optional<std::pair<PlanState, Score>> nearest = found.near;
    // (Their progress reports say they come after the first search.)
    SearchOptions other_options = options;
    if (options.progress) {
      other_options.progress = [&options](SearchProgress p) {
        p.other_seed = true;
        options.progress(p);
      };
    }
    const std::string first_start = result.start;
    // (Where nothing fits on the coarse model yet: kUnfitCandidatesDevices.)
    auto unfit_candidates = [&] {
      return !best_score.feasible() && topo.num_devices() <= kUnfitCandidatesDevices;
    };
    if (first_capped && !found.score.feasible()) {
      Seed more{found.best, found.score, first_start, /*evaluations=*/0};
      more.resumes = std::make_pair(start_state, start_score);
      seeds.push_back(std::move(more));
    }
    for (Seed& seed : seeds) {
      if (seed.name == first_start && !seed.resumes.has_value()) continue;
      if (seed.evaluations <= 0 && !seed.resumes.has_value()) continue;
      // (Resumed only where no search has found a plan that fits.)
      if (seed.resumes.has_value() && best_score.feasible()) continue;
      if (WorkNow() >= (best_score.feasible() ? deadline : unfit_deadline)) {
        budget_ended = true;
        break;
      }
      if (seed.state.place.empty() && seed.staged.has_value()) seed.state = seed.staged->In(&space);
      if (seed.score_when_searched) {
        absl::StatusOr<Score> score = space.Evaluate(seed.state);
        if (!score.ok()) continue;
        seed.score = *score;
      }
      // (Once a plan fits, no repair follows: a search from a seed over
      // memory may take the whole budget.)
      SearchOptions seed_options = seed.resumes ? options : other_options;
      if (best_score.feasible()) seed_options.repair_share = 0;
      ASSIGN_OR_RETURN(LocalSearchResult other,
                       RunLocalSearch(&space, coarse->num_groups(), seed_options, deadline, whole,
                                      seed.name, seed.evaluations, seed.state, seed.score));
      budget_ended |= other.stopped_by == "time budget";
      // (A search resumed is described from where it began.)
      const PlanState& began = seed.resumes ? seed.resumes->first : seed.state;
      const Score& began_score = seed.resumes ? seed.resumes->second : seed.score;
      // A search alongside the first (where a plan fits), or one that did
      // not beat it: its plans stay candidates in full, the best keeps.
      const bool alongside = seed.alongside && best_score.feasible();
      if (alongside || !other.score.BetterThan(best_score)) {
        // (What each group's choice saves is measured against the start
        // the seed was regrouped from, where it was: the first search's.)
        const PlanState& from = seed.regrouped ? start_state : began;
        const std::string against = seed.regrouped ? result.start : "";
        if (alongside) {
          // (Its plan is simulated in full four times over: only where
          // the coarse model finds it about as fast as the first search's
          // or faster.)
          if (other.score.feasible() && !(other.best == best) &&
              other.score.time_s < best_score.time_s * (1 + kAlongsideWithin)) {
            others.push_back({from, seed.name, began_score.time_s, other.best, other.score, true,
                              against, began_score.feasible()});
          }
        } else if (other.score.feasible() || unfit_candidates()) {
          others.push_back({from, seed.name, began_score.time_s, other.best, other.score, false,
                            against, began_score.feasible()});
        }
        // And the plan it kept from over its memory share, where faster on
        // the coarse model than the best that fits, or where none fits (it
        // may fit in full).
        if (other.near.has_value() &&
            (!best_score.feasible() || other.near->second.time_s < best_score.time_s)) {
          others.push_back({from, seed.name, began_score.time_s, other.near->first,
                            other.near->second, false, against, began_score.feasible()});
        }
        continue;
      }
      // (The plan it replaces stays a candidate in full with each way of
      // forming collectives, as it was.)
      if (best_score.feasible()) {
        others.push_back({start_state, result.start, result.start_s, best, best_score, true, "",
                          result.start_fits});
      } else if (unfit_candidates() && !(best == other.best)) {
        others.push_back({start_state, result.start, result.start_s, best, best_score, false, "",
                          result.start_fits});
      }
      // And so does the plan it kept from over its memory share, where
      // faster than the new plan on the coarse model or the new plan does
      // not fit there either (it may fit in full).
      if (nearest.has_value() &&
          (!other.score.feasible() || nearest->second.time_s < other.score.time_s)) {
        others.push_back({start_state, result.start, result.start_s, nearest->first,
                          nearest->second, false, "", result.start_fits});
      }
      best = other.best;
      best_score = other.score;
      start_state = began;
      result.start = seed.name;
      result.start_s = began_score.time_s;
      result.start_fits = began_score.feasible();
      result.stopped_by = other.stopped_by;
      earlier = other.earlier;
      // (The plans the explanation shows are described against the start
      // of the search they come from: this one's.)
      nearest = other.near;
    }
    if (budget_ended) result.stopped_by = "time budget";
    if (nearest.has_value() &&
        (!best_score.feasible() || nearest->second.time_s < best_score.time_s)) {
      near = nearest->first;
      near_score = nearest->second;
      result.near_s = nearest->second.time_s;
    }
  }
  // Over memory on the coarsened graph: repaired on the full one, which
  // may find it over by little, or not at all.
  std::vector<OpMove> op_moves;     // for the plan's variants
  std::optional<GraphIndex> index;  // of the full graph, for the repair
  if (!best_score.feasible() && options.repair_simulations > 0) {
    const absl::Time repair_start = WorkNow();
    if (options.progress) {
      SearchProgress p;
      p.start = result.start;
      p.repairing = true;
      p.evaluated = space.evaluations();
      p.ruled_out = space.ruled_out();
      p.overflow_bytes = best_score.overflow_bytes;
      options.progress(p);
    }
    ASSIGN_OR_RETURN(index, GraphIndex::Build(g));
    ASSIGN_OR_RETURN(
        RepairOutcome repaired,
        RepairMemory(&space, *index, topo, cost, batch, best,
                     std::max(deadline, repair_start + absl::Seconds(options.repair_share *
                                                                     options.time_budget_s)),
                     options.repair_simulations));
    result.memory_repair =
        "the search's plan was over memory on its coarse model; on the full model " +
        DescribeRepair(repaired, absl::ToDoubleSeconds(WorkNow() - repair_start));
    if (repaired.moves + repaired.served > 0) {
      absl::StatusOr<Score> score = space.Evaluate(repaired.state);
      if (score.ok()) {
        best = repaired.state;
        best_score = *score;
      }
    }
    op_moves = std::move(repaired.op_moves);
  }
  result.result_s = best_score.time_s;
  result.feasible = best_score.feasible();
  std::vector<int64_t> fusions = {SearchSpace::kFusePerGroup, SearchSpace::kFuseNone};
  fusions.insert(fusions.end(), options.bucket_bytes.begin(), options.bucket_bytes.end());
  result.variants = PlanVariants(space, g, best, fusions, op_moves, index ? &*index : nullptr);
  for (int64_t fusion : fusions) result.variant_collectives.push_back(FusionLabel(fusion));
  if (best_score.feasible() && options.repair_simulations > 0) {
    result.repair = [space_owner, coarse, &g, &topo, &cost, batch, best, fusions, start_state,
                     simulations = options.repair_simulations](
                        double budget_s, size_t variant) -> absl::StatusOr<RepairedPlan> {
      const absl::Time start = WorkNow();
      ASSIGN_OR_RETURN(const GraphIndex index, GraphIndex::Build(g));
      ASSIGN_OR_RETURN(
          RepairOutcome r,
          RepairMemory(space_owner.get(), index, topo, cost, batch, best,
                       start + absl::Seconds(budget_s), simulations,
                       variant < fusions.size() ? fusions[variant] : SearchSpace::kFusePerGroup));
      RepairedPlan out;
      out.changed = r.moves + r.served + r.shifts > 0;
      out.fits = r.fits;
      out.description = DescribeRepair(r, absl::ToDoubleSeconds(WorkNow() - start));
      if (!out.changed) return out;
      out.variants = PlanVariants(*space_owner, g, r.state, fusions, r.op_moves, &index);
      for (int k = 0; k < coarse->num_groups(); ++k) {
        GroupChoice c;
        c.group = k;
        DescribeOps(out.variants[0].groups(k), &c);
        c.placement = space_owner->options()[r.state.place[k]].label;
        c.aggregation = space_owner->AggregationLabel(r.state, k);
        c.as_start = r.state.place[k] == start_state.place[k] &&
                     (coarse->grouping().params[k].empty() ||
                      (r.state.method[k] == start_state.method[k] &&
                       r.state.ServerNode(k) == start_state.ServerNode(k)));
        c.saved_not_measured = !c.as_start;
        out.choices.push_back(std::move(c));
      }
      return out;
    };
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
      result.mixed_fits = mixed_score->feasible();
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
  for (const Outcome& o : others) {
    SearchResult::OtherSearch other;
    other.variant = result.variants.size();
    other.start = o.start_name;
    other.against = o.against.empty() ? o.start_name : o.against;
    other.start_s = o.start_s;
    other.start_fits = o.start_fits;
    other.result_s = o.score.time_s;
    other.result_fits = o.score.feasible();
    for (int64_t fusion :
         o.every_fusion ? fusions : std::vector<int64_t>{SearchSpace::kFusePerGroup}) {
      result.variants.push_back(space.FineStrategy(g, o.plan, "heterog", fusion));
      result.variant_collectives.push_back(FusionLabel(fusion) + ", the plan of the search from " +
                                           o.start_name);
    }
    other.variant_end = result.variants.size();
    result.other_searches.push_back(other);
  }
  for (const auto& [state, score] : earlier) {
    result.fallbacks.push_back(space.FineStrategy(g, state, "heterog", SearchSpace::kFusePerGroup));
    result.fallback_s.push_back(score.time_s);
    result.fallback_fits.push_back(score.feasible());
  }
  // What each group's choice is worth: the step with that group put back
  // as the start had it.
  auto describe = [&](const PlanState& state, int k, GroupChoice* c) {
    const PlacementOption& o = space.options()[state.place[k]];
    c->placement = o.label;
    c->aggregation = space.AggregationLabel(state, k);
  };
  // The step with each group of `plan` that differs from `base` put back
  // as there, kSearchWindow at a time while the budget lasts (each costs a
  // simulation: seconds on large clusters).
  // (A group without parameters aggregates nothing: its method is moot.)
  auto differs_from = [&](const PlanState& plan, const PlanState& base, int k) {
    return plan.place[k] != base.place[k] ||
           (!grouping.params[k].empty() &&
            (plan.method[k] != base.method[k] || plan.ServerNode(k) != base.ServerNode(k)));
  };
  auto put_back_each = [&](const PlanState& plan, const PlanState& base) {
    std::vector<int> changed;
    for (int k = 0; k < coarse->num_groups(); ++k) {
      if (differs_from(plan, base, k)) changed.push_back(k);
    }
    std::map<int, absl::StatusOr<Score>> out;
    for (size_t i = 0; i < changed.size() && WorkNow() < deadline; i += kSearchWindow) {
      std::vector<PlanState> backs;
      for (size_t j = i; j < std::min(changed.size(), i + kSearchWindow); ++j) {
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
    if (!differs_from(plan, base, k)) {
      c->as_start = true;
    } else if (auto it = backs.find(k); it != backs.end()) {
      const absl::StatusOr<Score>& s = it->second;
      // (A plan over memory on the coarse model, which may fit in full,
      // is compared by time alone.)
      if (s.ok() && (s->feasible() || !score.feasible())) c->saved_s = s->time_s - score.time_s;
      if (s.ok() && !score.feasible()) c->saved_over_memory = true;
      if (s.ok() && !s->feasible() && score.feasible()) c->needed_to_fit = true;
    } else {
      c->saved_not_measured = true;  // the budget ran out first
    }
  };
  const std::map<int, absl::StatusOr<Score>> put_back = put_back_each(best, start_state);
  // (The plan may become the starting placement with the plan's
  // aggregation: its choices are worth their own figures.)
  std::map<int, absl::StatusOr<Score>> mixed_put_back;
  if (mixed_state.has_value()) mixed_put_back = put_back_each(*mixed_state, start_state);
  // (Or another search's plan, against its own start.)
  std::vector<std::map<int, absl::StatusOr<Score>>> others_put_back;
  for (const Outcome& o : others) others_put_back.push_back(put_back_each(o.plan, o.start));
  // (Or the plan kept from over the coarse model's memory share.)
  std::map<int, absl::StatusOr<Score>> near_put_back;
  if (near.has_value()) near_put_back = put_back_each(*near, start_state);
  for (int k = 0; k < coarse->num_groups(); ++k) {
    GroupChoice c;
    c.group = k;
    c.ops = static_cast<int>(grouping.forward_ops[k].size());
    c.first_op = g.ops[grouping.forward_ops[k].front()].name;
    c.last_op = g.ops[grouping.forward_ops[k].back()].name;
    GroupChoice as_start = c;
    // (The plan's groups, where the memory repair shifted ops.)
    if (!op_moves.empty()) DescribeOps(result.variants[0].groups(k), &c);
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
    for (size_t i = 0; i < others.size(); ++i) {
      GroupChoice f = as_start;
      describe(others[i].plan, k, &f);
      worth(others_put_back[i], others[i].plan, others[i].start, k, others[i].score, &f);
      result.other_searches[i].choices.push_back(f);
    }
    if (near.has_value()) {
      GroupChoice n = as_start;
      describe(*near, k, &n);
      worth(near_put_back, *near, start_state, k, near_score, &n);
      result.near_choices.push_back(n);
    }
    // (What an earlier plan's choices save is not simulated: it is shown
    // only where the later ones overflow in full.)
    result.fallback_choices.resize(earlier.size());
    for (size_t e = 0; e < earlier.size(); ++e) {
      GroupChoice f = as_start;
      describe(earlier[e].first, k, &f);
      worth({}, earlier[e].first, start_state, k, earlier[e].second, &f);
      result.fallback_choices[e].push_back(f);
    }
  }
  result.evaluated = space.evaluations();
  result.ruled_out = space.ruled_out();
  result.search_wall_s = absl::ToDoubleSeconds(absl::Now() - wall_start);
  return result;
}

}  // namespace quilt
