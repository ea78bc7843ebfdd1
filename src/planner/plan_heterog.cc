#include "src/planner/plan_heterog.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "src/common/logging.h"
#include "src/common/status.h"
#include "src/common/units.h"
#include "src/common/work_clock.h"
#include "src/planner/exchange_parts.h"
#include "src/planner/heterog.h"
#include "src/planner/lookups.h"
#include "src/planner/node_subset_baselines.h"
#include "src/planner/pipelined_plan.h"
#include "src/planner/placement.h"
#include "src/planner/plan_budget.h"
#include "src/planner/search_summary.h"
#include "src/planner/weight_gradient_balance.h"

namespace quilt {

namespace {

constexpr int kBothOrdersDevices = 16;
// A plan's step within this share of the best baseline's is the same step
// (the two sum the same times in another order: rounding, not a saving),
// and the baseline is kept.
constexpr double kSameStep = 1e-9;

// Bytes over capacity, summed over the devices.
int64_t Overflow(const quilt::v1::StrategyEstimate& e) {
  int64_t over = 0;
  for (const auto& m : e.memory()) {
    if (m.capacity_bytes() > 0) over += std::max<int64_t>(0, m.peak_bytes() - m.capacity_bytes());
  }
  return over;
}

}  // namespace

absl::Status PlanHeteroG(const GraphIndex& ix, const Topology& topo, const CostModel& cost,
                         const std::vector<NamedStrategy>& baselines,
                         const std::function<std::vector<NamedStrategy>()>& subsets_of, double lb,
                         const PlanOptions& o, absl::Time start, const EvaluateFn& evaluate,
                         const EvaluateManyFn& evaluate_many,
                         std::map<std::string, Evaluated>* done) {
  const Graph& g = ix.graph();
  if (o.progress) {
    o.progress(absl::StrFormat("searching hybrid plans (%.1f s so far)",
                               absl::ToDoubleSeconds(WorkNow() - start)));
  }
  // The search gets what is left of the planning budget, less the full
  // simulations' share (plan_budget.h).
  const PlanBudget budget(start, o.search.time_budget_s);
  SearchOptions search = o.search;
  search.time_budget_s = budget.SearchSeconds(WorkNow());
  search.lower_bound_s = lb;
  if (o.progress && !search.progress) {
    search.progress = [&](const SearchProgress& p) {
      if (p.raising_share > 0) {
        o.progress(absl::StrFormat(
            "no baseline fits the search's share of memory on its coarse model: simulating %s "
            "in full, to let the search fill as much as those that fit (%.1f s so far)",
            p.raising_share == 1 ? std::string("the closest")
                                 : absl::StrCat("the ", p.raising_share, " closest"),
            absl::ToDoubleSeconds(WorkNow() - start)));
        return;
      }
      if (p.repairing) {
        o.progress(absl::StrFormat(
            "no plan found fits on the search's coarse model (the closest is %s over the "
            "devices' memory in all): moving ops off the devices over their memory on the full "
            "model (%.1f s so far)",
            HumanBytes(static_cast<int64_t>(p.overflow_bytes)),
            absl::ToDoubleSeconds(WorkNow() - start)));
        return;
      }
      o.progress(absl::StrFormat(
          "searching from %s%s: %d plans simulated, %d ruled out, %s (%.1f s so far)", p.start,
          p.other_seed ? " too" : "", p.evaluated, p.ruled_out,
          p.feasible
              ? "the fastest from there " + HumanSeconds(p.best_s) + " per step on the coarse model"
              : "none fits from there yet (the closest is " +
                    HumanBytes(static_cast<int64_t>(p.overflow_bytes)) +
                    " over the devices' memory in all)",
          absl::ToDoubleSeconds(WorkNow() - start)));
    };
  }
  ASSIGN_OR_RETURN(SearchResult sr,
                   SearchHeteroG(g, topo, cost, o.global_batch, baselines, search));
  // The plan and the baselines it is compared with below, simulated in
  // full at once: every one but those the coarse model (or, for a start
  // the search passed over, its lower bound there) puts at more than
  // kCoarseMargin times the fastest baseline's time (a full simulation on
  // a large cluster costs seconds; the coarse model errs by percents, and
  // on what fits memory, so baselines that do not fit there are simulated).
  constexpr double kCoarseMargin = 1.5;
  double fastest = -1;
  for (const NamedStrategy& ns : baselines) {
    auto it = sr.baseline_coarse_s.find(ns.name);
    if (it != sr.baseline_coarse_s.end() && (fastest < 0 || it->second < fastest)) {
      fastest = it->second;
    }
  }
  std::vector<NamedStrategy> plan_and_start{NamedStrategy{kHeteroG, sr.variants[0], ""}};
  for (const NamedStrategy& ns : baselines) {
    if (done->count(ns.name)) continue;
    double coarse_s = -1;
    if (auto it = sr.baseline_coarse_s.find(ns.name); it != sr.baseline_coarse_s.end()) {
      coarse_s = it->second;
    } else if (auto b = sr.baseline_bound_s.find(ns.name); b != sr.baseline_bound_s.end()) {
      coarse_s = b->second;
    }
    const bool far =
        coarse_s > 0 && fastest > 0 && coarse_s > kCoarseMargin * fastest && ns.name != sr.start;
    if (!far) plan_and_start.push_back(ns);
  }
  RETURN_IF_ERROR(evaluate_many(plan_and_start, /*both_orders=*/true, {}));
  // Each variant of a search's plan simulated in full; the fastest feasible
  // one (or the first, when none fits) becomes done[kHeteroG]. On clusters
  // of more than kBothOrdersDevices devices, where a full simulation costs
  // seconds, only in the execution order the first variant ran faster in
  // (they place the ops alike). Returns the variant chosen.
  // Makes the estimate `name` the plan's.
  auto adopt = [&](const std::string& name) {
    Evaluated& e = done->at(name);
    e.estimate.set_name(kHeteroG);
    e.estimate.mutable_strategy()->set_name(kHeteroG);
    done->at(kHeteroG) = std::move(e);
  };
  // Each variant's step in full, as simulate_variants last found them
  // (infinite for one not simulated).
  std::vector<double> variant_step;
  // The variants the budget left unsimulated, of how many.
  size_t variants_untried = 0, variants_in_all = 0;
  // `may_begin`, where set, is asked before each variant is begun.
  auto simulate_variants = [&](const SearchResult& r,
                               const std::function<bool()>& may_begin) -> absl::StatusOr<size_t> {
    variant_step.assign(r.variants.size(), std::numeric_limits<double>::infinity());
    variant_step[0] = done->at(kHeteroG).estimate.step_time_s();
    std::vector<NamedStrategy> variants;
    const quilt::v1::ExecutionOrder order = done->at(kHeteroG).estimate.strategy().order();
    for (size_t v = 1; v < r.variants.size(); ++v) {
      variants.push_back(NamedStrategy{absl::StrCat(kHeteroG, "#", v), r.variants[v], ""});
      // Start variants place the ops otherwise: they keep the start's order
      // (and the plan from over the memory share its own).
      if (v < r.first_start_variant) variants.back().strategy.set_order(order);
    }
    RETURN_IF_ERROR(evaluate_many(variants, topo.num_devices() <= kBothOrdersDevices, may_begin));
    size_t chosen = 0;
    variants_untried = 0;
    variants_in_all = variants.size();
    for (size_t v = 1; v < r.variants.size(); ++v) {
      const std::string& name = variants[v - 1].name;
      if (!done->count(name)) {
        ++variants_untried;
        continue;
      }
      const quilt::v1::StrategyEstimate& first = done->at(kHeteroG).estimate;
      const quilt::v1::StrategyEstimate& other = done->at(name).estimate;
      variant_step[v] = other.step_time_s();
      if (other.feasible() && (!first.feasible() || other.step_time_s() < first.step_time_s())) {
        adopt(name);
        chosen = v;
      }
      done->erase(name);
    }
    return chosen;
  };
  // What simulating the plan in full took (both orders), and its
  // variants: what a plan repaired or searched again costs to simulate.
  const double plan_sim_s = done->at(kHeteroG).wall_s;
  // A variant's simulation as measured on the plan: on large clusters in
  // one order (the plan's less its second replay's work).
  const double variant_sim_s =
      topo.num_devices() <= kBothOrdersDevices
          ? plan_sim_s
          : std::max(0.0, plan_sim_s - absl::ToDoubleSeconds(ReplayWork(done->at(kHeteroG).sim)));
  // The steps below are each begun only where a simulation of the plan in
  // full, as measured, fits what is left of the budget (or costs next to
  // nothing; plan_budget.h), but for fitting a plan to memory where
  // nothing fits (at least a share of the budget); the summary names those
  // left untried.
  std::vector<std::string> untried;
  auto affords = [&](const std::string& what) {
    if (budget.Affords(WorkNow(), plan_sim_s)) return true;
    untried.push_back(what);
    return false;
  };
  const std::function<bool()> variant_affordable = [&] {
    return budget.Affords(WorkNow(), variant_sim_s);
  };
  const absl::Time variants_from = WorkNow();
  ASSIGN_OR_RETURN(size_t chosen, simulate_variants(sr, variant_affordable));
  if (variants_untried > 0) {
    untried.push_back(absl::StrFormat(
        "%d of the search plan's %d other forms (its gradients' collectives formed otherwise, or "
        "other seeds' plans)",
        variants_untried, variants_in_all));
  }
  const double resim_s = plan_sim_s + absl::ToDoubleSeconds(WorkNow() - variants_from);
  // None fits in full: the search's earlier bests, latest (fastest) first.
  int fallback = -1;
  for (size_t k = 0; k < sr.fallbacks.size() && !done->at(kHeteroG).estimate.feasible(); ++k) {
    if (!affords(absl::StrFormat("%d of the search's earlier plans (none of those simulated fits)",
                                 sr.fallbacks.size() - k))) {
      break;
    }
    const std::string name = absl::StrCat(kHeteroG, "~", k + 1);
    RETURN_IF_ERROR(evaluate(NamedStrategy{name, sr.fallbacks[k], ""}));
    if (done->at(name).estimate.feasible()) {
      adopt(name);
      fallback = static_cast<int>(k);
    }
    done->erase(name);
  }
  // Whether nothing simulated in full fits: then fitting the plan to
  // memory may go on past the budget.
  auto nothing_fits = [&] {
    return std::none_of(done->begin(), done->end(),
                        [](const auto& e) { return e.second.estimate.feasible(); });
  };
  // Said where the budget ended the fitting with a baseline that fits.
  const std::string budget_ended = absl::StrFormat(
      "the time budget (%.3g s) ended before the plan was fitted to memory in full (a longer "
      "--time-budget may find one that fits)",
      budget.budget_s());
  // The coarsened graph misses tensors that live briefly inside a group: a
  // plan that fits there can overflow in full. Then it is first repaired
  // on the full graph (RepairMemory: groups moved, ops shifted), in what
  // is left of the budget, and its variants simulated in full.
  const absl::Time repair_from = WorkNow();
  const double repair_s = budget.FitSeconds(repair_from, nothing_fits(), resim_s);
  const bool over_in_full = sr.feasible && sr.repair && !done->at(kHeteroG).estimate.feasible();
  if (over_in_full && repair_s <= 0) {
    sr.memory_repair = budget_ended;
  } else if (over_in_full) {
    // (The repair takes at most a quarter of the budget.)
    const double repair_for_s = std::min(repair_s, PlanBudget::kLeastShare * budget.budget_s());
    if (o.progress) {
      o.progress(absl::StrFormat(
          "the plan overflows memory in full; moving ops off the devices over their memory on "
          "the full model (%.1f s so far%s)",
          absl::ToDoubleSeconds(WorkNow() - start),
          repair_for_s > budget.LeftSeconds(repair_from)
              ? ", past the planning budget: no plan fits yet"
              : ""));
    }
    // (On the plan's variant that simulated fastest: the search's own
    // collectives can be far slower than buckets.)
    size_t fastest = 0;
    for (size_t v = 1; v < sr.first_start_variant && v < variant_step.size(); ++v) {
      if (variant_step[v] < variant_step[fastest]) fastest = v;
    }
    ASSIGN_OR_RETURN(RepairedPlan rp, sr.repair(repair_for_s, fastest));
    const std::string said =
        "the search's plan fit on its coarse model but not in full; on the full model " +
        rp.description;
    if (rp.changed) {
      SearchResult repaired = sr;
      for (size_t v = 0; v < rp.variants.size() && v < repaired.first_start_variant; ++v) {
        repaired.variants[v] = rp.variants[v];
      }
      Evaluated before = std::move(done->at(kHeteroG));
      done->erase(kHeteroG);
      RETURN_IF_ERROR(evaluate(NamedStrategy{kHeteroG, repaired.variants[0], ""}));
      ASSIGN_OR_RETURN(size_t repaired_chosen,
                       simulate_variants(repaired, nothing_fits() ? std::function<bool()>()
                                                                  : variant_affordable));
      // (Kept where it fits, or is at least nearer to fitting.)
      if (done->at(kHeteroG).estimate.feasible() ||
          Overflow(done->at(kHeteroG).estimate) < Overflow(before.estimate)) {
        repaired.choices = rp.choices;
        sr = std::move(repaired);
        chosen = repaired_chosen;
      } else {
        done->at(kHeteroG) = std::move(before);
      }
    }
    sr.memory_repair = said;
  }
  // Still over: search again with more
  // headroom, up to three times, each with 15 % less of each device, in
  // what is left of the time budget (where nothing fits, at least a
  // quarter of it); the fastest plan that fits in full, of every search,
  // is kept.
  SearchOptions again = search;
  double searched_s = sr.search_wall_s;
  for (int attempt = 0; attempt < 3 && sr.feasible && !done->at(kHeteroG).estimate.feasible();
       ++attempt) {
    again.memory_fraction *= 0.85;
    const absl::Time now = WorkNow();
    again.time_budget_s = budget.FitSeconds(now, nothing_fits(), resim_s);
    if (again.time_budget_s <= 0) {
      // (Said once, where the repair was not begun either.)
      if (!absl::StrContains(sr.memory_repair, budget_ended)) {
        sr.memory_repair =
            sr.memory_repair.empty() ? budget_ended : sr.memory_repair + "; " + budget_ended;
      }
      break;
    }
    if (o.progress) {
      o.progress(absl::StrFormat(
          "the plan overflows memory in full; searching again with %.0f %% of each device's "
          "(%.1f s of search budget%s)",
          100 * again.memory_fraction, again.time_budget_s,
          again.time_budget_s > budget.LeftSeconds(now)
              ? ", past the planning budget: no plan fits yet"
              : ""));
    }
    ASSIGN_OR_RETURN(SearchResult retry,
                     SearchHeteroG(g, topo, cost, o.global_batch, baselines, again));
    searched_s += retry.search_wall_s;
    if (!retry.feasible) continue;
    Evaluated before = std::move(done->at(kHeteroG));
    done->erase(kHeteroG);
    RETURN_IF_ERROR(evaluate(NamedStrategy{kHeteroG, retry.variants[0], ""}));
    // It may have started from another baseline.
    for (const NamedStrategy& ns : baselines) {
      if (ns.name == retry.start && !done->count(ns.name)) RETURN_IF_ERROR(evaluate(ns));
    }
    ASSIGN_OR_RETURN(
        size_t retry_chosen,
        simulate_variants(retry, nothing_fits() ? std::function<bool()>() : variant_affordable));
    retry.evaluated += sr.evaluated;
    retry.ruled_out += sr.ruled_out;
    retry.search_wall_s = searched_s;
    if (done->at(kHeteroG).estimate.feasible()) {
      sr = std::move(retry);
      chosen = retry_chosen;
      fallback = -1;
    } else {
      // No better: the earlier attempt's plan stays (its searches counted).
      done->at(kHeteroG) = std::move(before);
      sr.evaluated = retry.evaluated;
      sr.ruled_out = retry.ruled_out;
      sr.search_wall_s = searched_s;
    }
  }
  // Data parallelism over the fastest nodes alone (node_subset_baselines.h:
  // on clusters of up to 32 devices), simulated in full within the budget;
  // the fastest that fits becomes the plan where faster than it. (As starts
  // of the search, they led it to slower plans as often as to faster
  // ones: docs/BENCHMARKS.md.)
  std::string subset_kept;     // its name, where one became the plan
  double replaced_step_s = 0;  // the step of the plan it replaced
  {
    const bool begun = budget.Affords(WorkNow(), plan_sim_s);
    const std::vector<NamedStrategy> subsets = begun ? subsets_of() : std::vector<NamedStrategy>{};
    if (!begun && topo.num_nodes() > 1 && topo.num_devices() <= kNodeSubsetDevices) {
      untried.push_back("data parallelism over the fastest nodes alone");
    }
    RETURN_IF_ERROR(evaluate_many(subsets, /*both_orders=*/true,
                                  [&] { return budget.Affords(WorkNow(), plan_sim_s); }));
    size_t not_simulated = 0;
    const Evaluated* fastest_subset = nullptr;
    for (const NamedStrategy& ns : subsets) {
      auto it = done->find(ns.name);
      if (it == done->end()) {
        ++not_simulated;
        continue;
      }
      const quilt::v1::StrategyEstimate& e = it->second.estimate;
      if (e.feasible() &&
          (fastest_subset == nullptr || e.step_time_s() < fastest_subset->estimate.step_time_s())) {
        fastest_subset = &it->second;
      }
    }
    if (not_simulated > 0) {
      untried.push_back(absl::StrFormat("%d of %d plans of data parallelism over the fastest nodes",
                                        not_simulated, subsets.size()));
    }
    const quilt::v1::StrategyEstimate& plan = done->at(kHeteroG).estimate;
    if (fastest_subset != nullptr &&
        (!plan.feasible() || fastest_subset->estimate.step_time_s() < plan.step_time_s())) {
      subset_kept = fastest_subset->estimate.name();
      replaced_step_s = plan.feasible() ? plan.step_time_s() : 0;
      adopt(subset_kept);
    }
    for (const NamedStrategy& ns : subsets) done->erase(ns.name);
  }
  // Embedding tables' gradients gathered rather than summed (sparse
  // lookup; the baselines sum them dense, as data-parallel frameworks do a
  // tied table's): the plan with each table worth it so aggregated,
  // simulated in full, kept when faster and within memory.
  std::vector<std::string> gathered;
  double gathered_saved_s = 0;
  int gathered_tries = 0;                               // variants simulated with tables gathered
  std::map<int, std::vector<std::string>> gathered_in;  // group → its gathered tables
  if (done->at(kHeteroG).estimate.feasible()) {
    const quilt::v1::Strategy sparse =
        GatherLookups(ix, done->at(kHeteroG).estimate.strategy(), o.global_batch, &gathered);
    if (!gathered.empty() && !affords("the plan with embedding lookups' gradients gathered"))
      gathered.clear();
    if (!gathered.empty()) {
      if (o.progress) o.progress("simulating the plan with embedding lookups' gradients gathered");
      // The chosen plan gathered, and on small clusters every other variant
      // of the search's plan too (how gradients form collectives decides
      // what gathering saves: the fastest plain variant need not be the
      // fastest gathered one).
      std::vector<NamedStrategy> tries{
          NamedStrategy{absl::StrCat(kHeteroG, "+lookups"), sparse, ""}};
      std::vector<size_t> variant_of{chosen};
      const bool small = topo.num_devices() <= kBothOrdersDevices;
      for (size_t v = 0; small && fallback < 0 && v < sr.variants.size(); ++v) {
        if (v == chosen) continue;
        std::vector<std::string> tables;
        quilt::v1::Strategy variant = sr.variants[v];
        if (v >= 1 && v < sr.first_start_variant) {
          variant.set_order(done->at(kHeteroG).estimate.strategy().order());
        }
        quilt::v1::Strategy gathered_variant = GatherLookups(ix, variant, o.global_batch, &tables);
        if (tables == gathered) {
          tries.push_back(NamedStrategy{absl::StrCat(kHeteroG, "+lookups#", v),
                                        std::move(gathered_variant), ""});
          variant_of.push_back(v);
        }
      }
      // (A variant that cannot be lowered is a planner bug, not the
      // user's: the plan without it stands.)
      // As the variants were: both execution orders only on small clusters
      // (the plan's own order otherwise).
      // The chosen plan's first, so that another variant's failure costs
      // only that variant.
      const absl::Status st = evaluate_many({tries[0]}, small, {});
      if (!st.ok()) QLOG_WARN("embedding gradients not gathered: {}", st.ToString());
      if (st.ok() && tries.size() > 1) {
        const std::vector<NamedStrategy> rest(tries.begin() + 1, tries.end());
        if (const absl::Status more = evaluate_many(rest, small, {}); !more.ok()) {
          QLOG_WARN("embedding gradients not gathered in the other variants: {}", more.ToString());
          for (const NamedStrategy& t : rest) done->erase(t.name);
          tries.resize(1);
        }
      }
      gathered_tries = static_cast<int>(tries.size());
      const double plain = done->at(kHeteroG).estimate.step_time_s();
      std::string name;
      for (size_t k = 0; k < tries.size(); ++k) {
        if (!st.ok() || !done->count(tries[k].name)) continue;
        const quilt::v1::StrategyEstimate& e = done->at(tries[k].name).estimate;
        if (e.feasible() && e.step_time_s() < plain &&
            (name.empty() || e.step_time_s() < done->at(name).estimate.step_time_s())) {
          name = tries[k].name;
          chosen = variant_of[k];
          // (Another variant of the search's plan: no longer the subset's.)
          if (k > 0) subset_kept.clear();
        }
      }
      if (!name.empty()) {
        gathered_saved_s = plain - done->at(name).estimate.step_time_s();
        const quilt::v1::Strategy adopted_groups = done->at(name).estimate.strategy();
        adopt(name);
        // The group each table's update is in (its first reader's).
        for (size_t i = 0; i < g.ops.size(); ++i) {
          if (!ix.Schema(static_cast<int>(i)).is_update ||
              !absl::c_linear_search(gathered, g.ops[i].inputs[0])) {
            continue;
          }
          for (int k = 0; k < adopted_groups.groups_size(); ++k) {
            if (absl::c_linear_search(adopted_groups.groups(k).ops(), GroupKey(g.ops[i]))) {
              gathered_in[adopted_groups.groups(k).group()].push_back(g.ops[i].inputs[0]);
            }
          }
        }
      } else {
        gathered.clear();
      }
      for (const NamedStrategy& t : tries) done->erase(t.name);
    }
  }
  // Weight gradients' rows moved off the busiest devices (whole samples
  // cannot balance them): the candidates simulated in full, the fastest
  // kept when it beats the plan and fits; then again from the plan kept
  // (its simulated work differs from the estimate: the rows' transfers
  // share the links), up to kWeightGradientRounds times. On large
  // clusters, where a full simulation costs seconds, one candidate, in the
  // plan's order, once.
  constexpr int kWeightGradientRounds = 3;
  std::string wg_moves;
  double wg_saved_s = 0;
  int wg_tries = 0;
  const bool small = topo.num_devices() <= kBothOrdersDevices;
  for (int round = 0;
       round < (small ? kWeightGradientRounds : 1) && done->at(kHeteroG).estimate.feasible();
       ++round) {
    std::map<std::string, double> busy;
    for (const DeviceUsage& d : done->at(kHeteroG).sim.devices) busy[d.device] = d.busy_s;
    absl::StatusOr<std::vector<BalancedWeightGradients>> balanced = BalanceWeightGradients(
        ix, done->at(kHeteroG).estimate.strategy(), topo, cost, o.global_batch, busy);
    if (!balanced.ok()) {
      QLOG_WARN("weight gradients not balanced: {}", balanced.status().ToString());
      break;
    }
    if (balanced->empty()) break;
    if (!affords("the plan with weight gradients' rows moved off the busiest devices")) break;
    if (!small) balanced->resize(1);
    if (o.progress) o.progress("simulating the plan with weight gradients' rows moved");
    std::vector<NamedStrategy> tries;
    for (size_t k = 0; k < balanced->size(); ++k) {
      tries.push_back(
          NamedStrategy{absl::StrCat(kHeteroG, "+wg", round, "#", k), (*balanced)[k].strategy, ""});
    }
    // (A candidate that cannot be lowered is a planner bug, not the
    // user's: the plan without it stands.)
    const absl::Status st = evaluate_many(tries, small, {});
    if (!st.ok()) QLOG_WARN("weight gradients not balanced: {}", st.ToString());
    wg_tries += static_cast<int>(tries.size());
    const double plain = done->at(kHeteroG).estimate.step_time_s();
    int pick = -1;
    for (size_t k = 0; st.ok() && k < tries.size(); ++k) {
      if (!done->count(tries[k].name)) continue;
      const quilt::v1::StrategyEstimate& e = done->at(tries[k].name).estimate;
      if (e.feasible() && e.step_time_s() < plain &&
          (pick < 0 || e.step_time_s() < done->at(tries[pick].name).estimate.step_time_s())) {
        pick = static_cast<int>(k);
      }
    }
    if (pick >= 0) {
      wg_saved_s += plain - done->at(tries[pick].name).estimate.step_time_s();
      wg_moves = (*balanced)[pick].moves;
      adopt(tries[pick].name);
    }
    for (const NamedStrategy& t : tries) done->erase(t.name);
    if (pick < 0) break;
  }
  // Pipelined (pipelined_plan.h): where the plan waits, its batch as
  // micro-batches with several in flight, kept when faster and within
  // memory: 2 micro-batches first, 4 only where 2 gained or overflowed.
  std::string pipelined;
  double pipelined_saved_s = 0;
  int pipeline_tries = 0;
  if (o.accumulate && !o.fit_check_only && WorthPipelining(done->at(kHeteroG).estimate) &&
      MicroBatchesRefused(ix, topo).empty()) {
    const quilt::v1::Strategy plan = done->at(kHeteroG).estimate.strategy();
    const double plain = done->at(kHeteroG).estimate.step_time_s();
    std::string pick;
    bool overflowed = false;
    std::vector<std::string> tried;
    for (const int k : {2, 4}) {
      if (k > 2 && pick.empty() && !overflowed) break;
      // (k micro-batches simulate in about k times the plan's time.)
      if (!budget.Affords(WorkNow(), k * plan_sim_s)) {
        untried.push_back(absl::StrCat("the plan pipelined over ", k, " micro-batches"));
        break;
      }
      const std::vector<NamedStrategy> tries =
          PipelinedForms(plan, kHeteroG, o.global_batch, k, small);
      if (tries.empty()) break;
      if (o.progress)
        o.progress(absl::StrCat("simulating the plan pipelined over ", k, " micro-batches"));
      pipeline_tries += static_cast<int>(tries.size());
      // In both execution orders, large clusters too: pipelined, the
      // transfers first can win where the plan ran critical path first
      // (HAP's transformer at 512: 441 against 498 ms). One that cannot be
      // lowered (a micro-batch with fewer rows than a group's replicas)
      // leaves the others: each alone where the list fails.
      if (!evaluate_many(tries, /*both_orders=*/true, {}).ok()) {
        for (const NamedStrategy& t : tries) {
          if (const absl::Status st = evaluate_many({t}, /*both_orders=*/true, {}); !st.ok()) {
            QLOG_DEBUG("{} not pipelined: {}", t.name, st.ToString());
          }
        }
      }
      for (const NamedStrategy& t : tries) {
        if (!done->count(t.name)) continue;
        tried.push_back(t.name);
        const quilt::v1::StrategyEstimate& e = done->at(t.name).estimate;
        if (!e.feasible()) {
          overflowed = true;
        } else if (e.step_time_s() <
                   (pick.empty() ? plain : done->at(pick).estimate.step_time_s())) {
          pick = t.name;
        }
      }
    }
    if (!pick.empty()) {
      pipelined_saved_s = plain - done->at(pick).estimate.step_time_s();
      pipelined = DescribePipelining(done->at(pick).estimate.strategy(), o.global_batch);
      adopt(pick);
    }
    for (const std::string& t : tried) done->erase(t);
  }
  SearchSummaryOf of = SummarizeSearch(sr, chosen, fallback, done->at(kHeteroG).estimate.strategy(),
                                       gathered_in, gathered_tries + wg_tries + pipeline_tries);
  quilt::v1::SearchSummary& summary = of.summary;
  const std::vector<GroupChoice>& decided = *of.decided;
  summary.set_weight_gradient_moves(wg_moves);
  summary.set_weight_gradient_saved_s(wg_saved_s);
  for (const std::string& t : gathered) summary.add_gathered_tables(t);
  summary.set_gathered_saved_s(gathered_saved_s);
  summary.set_pipelined(pipelined);
  summary.set_pipelined_saved_s(pipelined_saved_s);
  if (!untried.empty()) {
    summary.set_untried(absl::StrFormat(
        "the time budget (%.3g s) ended before these were simulated in full: %s (each about %s "
        "here; a longer --time-budget tries them)",
        budget.budget_s(), absl::StrJoin(untried, "; "), HumanSeconds(plan_sim_s)));
  }
  // The plan shown is another's: nothing of the search's plan describes it.
  // (`refined`: the refinements above were made on the plan shown, and
  // stay described.)
  auto forget_search_plan = [&summary, &sr](const std::string& collectives,
                                            const std::string& shown, bool refined = false) {
    if (!sr.memory_repair.empty()) {
      summary.set_memory_repair(sr.memory_repair + "; the plan below is " + shown +
                                "'s, which the full simulation preferred");
    }
    summary.clear_decisions();
    summary.set_gradient_collectives(collectives);
    if (refined) return;
    summary.clear_gathered_tables();
    summary.clear_gathered_saved_s();
    summary.clear_weight_gradient_moves();
    summary.clear_weight_gradient_saved_s();
    summary.clear_pipelined();
    summary.clear_pipelined_saved_s();
  };
  Evaluated& h = done->at(kHeteroG);
  const Evaluated* best = nullptr;
  for (const NamedStrategy& ns : baselines) {
    auto it = done->find(ns.name);
    if (it == done->end() || !it->second.estimate.feasible()) continue;
    if (best == nullptr || it->second.estimate.step_time_s() < best->estimate.step_time_s())
      best = &it->second;
  }
  if (best != nullptr &&
      (!h.estimate.feasible() ||
       h.estimate.step_time_s() >= best->estimate.step_time_s() * (1 - kSameStep))) {
    const std::string plan = subset_kept.empty() ? "the search's best plan" : subset_kept;
    const std::string why = h.estimate.feasible()
                                ? plan + " simulated at " + HumanSeconds(h.estimate.step_time_s())
                                : plan + " does not fit (" + h.estimate.infeasible_reason() + ")";
    h = *best;
    h.Rename(kHeteroG);
    h.estimate.set_note(why + "; " + best->estimate.name() + " is as fast or faster and is kept");
    // The plan is the baseline's: no group choice or collective of the
    // search's plan describes it.
    forget_search_plan("as " + best->estimate.name() + " forms them", best->estimate.name());
  } else if (best != nullptr) {
    const double ratio = best->estimate.step_time_s() / h.estimate.step_time_s();
    // Under 1 % a ratio rounds to 1.00×: say how much, in per cent and time.
    std::string note =
        ratio >= 1.01 ? absl::StrFormat("%.2f× faster than %s", ratio, best->estimate.name())
                      : absl::StrFormat(
                            "%.2g %% faster than %s (%s less per step)", (ratio - 1) * 100,
                            best->estimate.name(),
                            HumanSeconds(best->estimate.step_time_s() - h.estimate.step_time_s()));
    // Placed as its start places the ops: the gain is in the collectives
    // alone (the baseline sums each gradient on its own, or in 25 MiB
    // buckets: bucketed_baselines.h).
    bool as_start = !of.from_other && subset_kept.empty();
    for (size_t k = 0; k < decided.size() && k < sr.start_choices.size(); ++k) {
      as_start = as_start && decided[k].placement == sr.start_choices[k].placement &&
                 decided[k].aggregation == sr.start_choices[k].aggregation;
    }
    if (as_start) {
      absl::StrAppend(&note, "; the ops are placed as ", sr.start,
                      " places them: the gain is in how gradients form collectives (",
                      summary.gradient_collectives(), ")");
      if (!gathered.empty()) {
        absl::StrAppend(&note, " and in the gradient", gathered.size() > 1 ? "s" : "", " of ",
                        absl::StrJoin(gathered, ", "), " gathered rather than summed");
      }
      if (!wg_moves.empty()) {
        absl::StrAppend(&note, ", and in weight gradients' rows moved off the busiest devices");
      }
      if (!pipelined.empty()) {
        absl::StrAppend(&note, ", and in its batch pipelined over micro-batches");
      }
    }
    if (!subset_kept.empty()) {
      // The plan is data parallelism over the fastest nodes: no group
      // choice of the search's plan describes it.
      absl::StrAppend(&note, "; the plan is ", subset_kept,
                      ", data parallelism over those nodes alone, which simulated faster than "
                      "the search's plan",
                      replaced_step_s > 0 ? " (" + HumanSeconds(replaced_step_s) + ")" : "");
      forget_search_plan("one collective per gradient, as " + subset_kept + " forms them",
                         subset_kept, /*refined=*/true);
    }
    h.estimate.set_note(note);
  } else if (!subset_kept.empty()) {
    h.estimate.set_note("the plan is " + subset_kept +
                        ", data parallelism over those nodes alone (no baseline over every "
                        "device fits)");
    forget_search_plan("one collective per gradient, as " + subset_kept + " forms them",
                       subset_kept, /*refined=*/true);
  }
  if (best == nullptr && !h.estimate.feasible()) {
    // Nothing fits: the plan shown is the one nearest to fitting (the
    // search ranks plans that overflow by the coarse model's bytes, which
    // the full simulation can overturn).
    const Evaluated* nearest = nullptr;
    for (const NamedStrategy& ns : baselines) {
      auto it = done->find(ns.name);
      if (it == done->end() || !(it->second.estimate.step_time_s() > 0) ||
          !std::isfinite(it->second.estimate.step_time_s())) {
        continue;
      }
      // (One that fits memory but could not be timed is no nearer.)
      const int64_t over = Overflow(it->second.estimate);
      if (over <= 0 || over >= Overflow(h.estimate)) continue;
      if (nearest == nullptr || Overflow(it->second.estimate) < Overflow(nearest->estimate))
        nearest = &it->second;
    }
    if (nearest != nullptr) {
      const std::string why =
          "no plan fits: " + nearest->estimate.name() + ", shown, is over memory by " +
          HumanBytes(Overflow(nearest->estimate)) + " in all, the search's best plan by " +
          HumanBytes(Overflow(h.estimate));
      const std::string reason = nearest->estimate.infeasible_reason();
      h = *nearest;
      h.Rename(kHeteroG);
      h.estimate.set_infeasible_reason(reason);
      h.estimate.set_note(why);
      forget_search_plan("as " + nearest->estimate.name() + " forms them",
                         nearest->estimate.name());
    }
  }
  if (best != nullptr) {
    quilt::v1::StrategyEstimate* b = summary.mutable_best_baseline();
    *b = best->estimate;
    b->clear_strategy();  // (large; its order is all the explanation shows)
    b->mutable_strategy()->set_order(best->estimate.strategy().order());
    b->clear_search();
  }
  if (!h.program.empty()) summary.set_exchange_parts(ExchangePartsText(*h.program, topo));
  *h.estimate.mutable_search() = std::move(summary);
  return absl::OkStatus();
}

}  // namespace quilt
