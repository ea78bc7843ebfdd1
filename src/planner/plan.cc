#include "src/planner/plan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "src/common/logging.h"
#include "src/common/status.h"
#include "src/common/units.h"
#include "src/planner/arena_program.h"
#include "src/planner/batch_hint.h"
#include "src/planner/estimate_many.h"
#include "src/planner/exchange_parts.h"
#include "src/planner/lookups.h"
#include "src/planner/lower.h"
#include "src/planner/lower_bound.h"
#include "src/planner/memory_floor.h"
#include "src/planner/placement.h"
#include "src/planner/plan_budget.h"
#include "src/planner/program_validator.h"
#include "src/planner/search_summary.h"
#include "src/planner/weight_gradient_balance.h"

namespace quilt {

namespace {

constexpr char kHeteroG[] = "heterog";
constexpr int kBothOrdersDevices = 16;
// A plan's step within this share of the best baseline's is the same step
// (the two sum the same times in another order: rounding, not a saving),
// and the baseline is kept.
constexpr double kSameStep = 1e-9;

// The proportional baseline's counterpart with the even split.
std::string EvenCounterpart(const std::string& name) {
  const std::string prefix = "dp-proportional-";
  if (name.rfind(prefix, 0) != 0) return "";
  return "dp-even-" + name.substr(prefix.size());
}

// Bytes over capacity, summed over the devices.
int64_t Overflow(const quilt::v1::StrategyEstimate& e) {
  int64_t over = 0;
  for (const auto& m : e.memory()) {
    if (m.capacity_bytes() > 0) over += std::max<int64_t>(0, m.peak_bytes() - m.capacity_bytes());
  }
  return over;
}

using EvaluateFn = std::function<absl::Status(const NamedStrategy&)>;
// Several at once (in parallel), each as EvaluateFn would; with
// `both_orders` false, only in the execution order its strategy names.
using EvaluateManyFn =
    std::function<absl::Status(const std::vector<NamedStrategy>&, bool both_orders)>;

// The HeteroG search from the baselines, its plan simulated in full, and
// compared with the best baseline simulated in full: never slower.
absl::Status PlanHeteroG(const GraphIndex& ix, const Topology& topo, const CostModel& cost,
                         const std::vector<NamedStrategy>& baselines, double lb,
                         const PlanOptions& o, absl::Time start, const EvaluateFn& evaluate,
                         const EvaluateManyFn& evaluate_many,
                         std::map<std::string, Evaluated>* done) {
  const Graph& g = ix.graph();
  if (o.progress) {
    o.progress(absl::StrFormat("searching hybrid plans (%.1f s so far)",
                               absl::ToDoubleSeconds(absl::Now() - start)));
  }
  // The search gets what is left of the planning budget, less the full
  // simulations' share (plan_budget.h).
  const PlanBudget budget(start, o.search.time_budget_s);
  SearchOptions search = o.search;
  search.time_budget_s = budget.SearchSeconds(absl::Now());
  search.lower_bound_s = lb;
  if (o.progress && !search.progress) {
    search.progress = [&](const SearchProgress& p) {
      if (p.raising_share > 0) {
        o.progress(absl::StrFormat(
            "no baseline fits the search's share of memory on its coarse model: simulating %s "
            "in full, to let the search fill as much as those that fit (%.1f s so far)",
            p.raising_share == 1 ? std::string("the closest")
                                 : absl::StrCat("the ", p.raising_share, " closest"),
            absl::ToDoubleSeconds(absl::Now() - start)));
        return;
      }
      if (p.repairing) {
        o.progress(absl::StrFormat(
            "no plan found fits on the search's coarse model (the closest is %s over the "
            "devices' memory in all): moving ops off the devices over their memory on the full "
            "model (%.1f s so far)",
            HumanBytes(static_cast<int64_t>(p.overflow_bytes)),
            absl::ToDoubleSeconds(absl::Now() - start)));
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
          absl::ToDoubleSeconds(absl::Now() - start)));
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
  for (const auto& [name, s] : sr.baseline_coarse_s) {
    if (fastest < 0 || s < fastest) fastest = s;
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
  RETURN_IF_ERROR(evaluate_many(plan_and_start, /*both_orders=*/true));
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
  // Each variant's step in full, as simulate_variants last found them.
  std::vector<double> variant_step;
  auto simulate_variants = [&](const SearchResult& r) -> absl::StatusOr<size_t> {
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
    RETURN_IF_ERROR(evaluate_many(variants, topo.num_devices() <= kBothOrdersDevices));
    size_t chosen = 0;
    for (size_t v = 1; v < r.variants.size(); ++v) {
      const std::string& name = variants[v - 1].name;
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
  ASSIGN_OR_RETURN(size_t chosen, simulate_variants(sr));
  // None fits in full: the search's earlier bests, latest (fastest) first.
  int fallback = -1;
  for (size_t k = 0; k < sr.fallbacks.size() && !done->at(kHeteroG).estimate.feasible(); ++k) {
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
  const double repair_s = budget.FitSeconds(absl::Now(), nothing_fits());
  const bool over_in_full = sr.feasible && sr.repair && !done->at(kHeteroG).estimate.feasible();
  if (over_in_full && repair_s <= 0) {
    sr.memory_repair = budget_ended;
  } else if (over_in_full) {
    if (o.progress) {
      o.progress(absl::StrFormat(
          "the plan overflows memory in full; moving ops off the devices over their memory on "
          "the full model (%.1f s so far%s)",
          absl::ToDoubleSeconds(absl::Now() - start),
          repair_s > budget.LeftSeconds(absl::Now())
              ? ", past the planning budget: no plan fits yet"
              : ""));
    }
    // (On the plan's variant that simulated fastest: the search's own
    // collectives can be far slower than buckets.)
    size_t fastest = 0;
    for (size_t v = 1; v < sr.first_start_variant && v < variant_step.size(); ++v) {
      if (variant_step[v] < variant_step[fastest]) fastest = v;
    }
    ASSIGN_OR_RETURN(RepairedPlan rp,
                     sr.repair(std::min(repair_s, 0.25 * budget.budget_s()), fastest));
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
      ASSIGN_OR_RETURN(size_t repaired_chosen, simulate_variants(repaired));
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
    const absl::Time now = absl::Now();
    again.time_budget_s = budget.FitSeconds(now, nothing_fits());
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
    ASSIGN_OR_RETURN(size_t retry_chosen, simulate_variants(retry));
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
      const absl::Status st = evaluate_many({tries[0]}, small);
      if (!st.ok()) QLOG_WARN("embedding gradients not gathered: {}", st.ToString());
      if (st.ok() && tries.size() > 1) {
        const std::vector<NamedStrategy> rest(tries.begin() + 1, tries.end());
        if (const absl::Status more = evaluate_many(rest, small); !more.ok()) {
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
    if (!small) balanced->resize(1);
    if (o.progress) o.progress("simulating the plan with weight gradients' rows moved");
    std::vector<NamedStrategy> tries;
    for (size_t k = 0; k < balanced->size(); ++k) {
      tries.push_back(
          NamedStrategy{absl::StrCat(kHeteroG, "+wg", round, "#", k), (*balanced)[k].strategy, ""});
    }
    // (A candidate that cannot be lowered is a planner bug, not the
    // user's: the plan without it stands.)
    const absl::Status st = evaluate_many(tries, small);
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
  SearchSummaryOf of = SummarizeSearch(sr, chosen, fallback, done->at(kHeteroG).estimate.strategy(),
                                       gathered_in, gathered_tries + wg_tries);
  quilt::v1::SearchSummary& summary = of.summary;
  const std::vector<GroupChoice>& decided = *of.decided;
  summary.set_weight_gradient_moves(wg_moves);
  summary.set_weight_gradient_saved_s(wg_saved_s);
  for (const std::string& t : gathered) summary.add_gathered_tables(t);
  summary.set_gathered_saved_s(gathered_saved_s);
  // The plan shown is another's: nothing of the search's plan describes it.
  auto forget_search_plan = [&summary, &sr](const std::string& collectives,
                                            const std::string& shown) {
    if (!sr.memory_repair.empty()) {
      summary.set_memory_repair(sr.memory_repair + "; the plan below is " + shown +
                                "'s, which the full simulation preferred");
    }
    summary.clear_decisions();
    summary.clear_gathered_tables();
    summary.clear_gathered_saved_s();
    summary.clear_weight_gradient_moves();
    summary.clear_weight_gradient_saved_s();
    summary.set_gradient_collectives(collectives);
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
    const std::string why =
        h.estimate.feasible()
            ? "the search's best plan simulated at " + HumanSeconds(h.estimate.step_time_s())
            : "the search's best plan does not fit (" + h.estimate.infeasible_reason() + ")";
    h = *best;
    h.estimate.set_name(kHeteroG);
    h.estimate.mutable_strategy()->set_name(kHeteroG);
    if (!h.program.empty()) h.program->mutable_strategy()->set_name(kHeteroG);
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
    // alone (the baselines sum each gradient on its own).
    bool as_start = !of.from_other;
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
    }
    h.estimate.set_note(note);
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
      h.estimate.set_name(kHeteroG);
      h.estimate.mutable_strategy()->set_name(kHeteroG);
      if (!h.program.empty()) h.program->mutable_strategy()->set_name(kHeteroG);
      h.estimate.set_infeasible_reason(reason);
      h.estimate.set_note(why);
      forget_search_plan("as " + nearest->estimate.name() + " forms them",
                         nearest->estimate.name());
    }
  }
  (void)lb;
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

}  // namespace

absl::StatusOr<PlanResult> Plan(const Graph& g, const Topology& topo, const PlanOptions& o) {
  const absl::Time start = absl::Now();
  if (!g.has_backward) return absl::InvalidArgumentError("planning needs a training graph");
  if (o.global_batch < 1) return absl::InvalidArgumentError("the batch must be at least 1");
  RETURN_IF_ERROR(CheckGlobalBatch(o.global_batch));
  RETURN_IF_ERROR(CheckStateFits(g, topo));
  ASSIGN_OR_RETURN(CostModel cost, CostModel::Create(&g, &topo));
  ASSIGN_OR_RETURN(const GraphIndex ix, GraphIndex::Build(g));
  PlanResult result;
  quilt::v1::PlanReport& rep = result.report;
  rep.set_model(g.name);
  rep.set_global_batch(o.global_batch);
  const double lb = ComputeLowerBound(g, cost, topo, o.global_batch);
  rep.set_lower_bound_s(lb);
  ASSIGN_OR_RETURN(const MemoryFloor floor, ComputeMemoryFloor(g));
  {
    quilt::v1::MemoryFloor& f = *rep.mutable_memory_floor();
    const int64_t capacity = TotalMemoryBytes(topo);
    f.set_resident_bytes(floor.resident_bytes);
    f.set_fixed_bytes(floor.fixed_bytes);
    f.set_bytes_per_row(floor.bytes_per_row);
    f.set_capacity_bytes(capacity);
    f.set_devices(topo.num_devices());
    f.set_largest_batch(floor.LargestBatch(capacity));
  }
  if (o.progress) o.progress("building the baselines (fitting memory and compute per device)");
  std::optional<RowLoadModel> load;
  // (Parameter servers' own split only where it is simulated: planned, or a
  // start of the search.)
  const bool ps_split =
      o.strategy == "all" || o.strategy == kHeteroG || o.strategy == "dp-proportional-ps";
  const std::vector<NamedStrategy> strategies =
      Baselines(g, topo, cost, o.global_batch, &load, ps_split);
  for (const NamedStrategy& ns : o.given) {
    if (ns.name == kHeteroG ||
        absl::c_any_of(strategies, [&](const NamedStrategy& b) { return b.name == ns.name; })) {
      return absl::InvalidArgumentError("a given strategy is named '" + ns.name +
                                        "', as one Quilt plans: name it otherwise");
    }
  }
  // (Given strategies always are.)
  auto wanted = [&](const std::string& name) {
    return o.strategy == "all" || o.strategy == name ||
           absl::c_any_of(o.given, [&](const NamedStrategy& ns) { return ns.name == name; });
  };
  std::map<std::string, Evaluated> done;
  auto evaluate_many = [&](const std::vector<NamedStrategy>& list,
                           bool both_orders) -> absl::Status {
    EstimateManyOptions eo;
    eo.batch = o.global_batch;
    eo.lower_bound = lb;
    eo.trace = o.trace;
    eo.both_orders = both_orders;
    eo.progress = o.progress;
    eo.heartbeat_s = o.simulation_progress_every_s;
    eo.start = start;
    return EstimateMany(ix, topo, cost, list, eo, &done);
  };
  auto evaluate = [&](const NamedStrategy& ns) -> absl::Status {
    if (done.count(ns.name)) return absl::OkStatus();
    return evaluate_many({ns}, /*both_orders=*/true);
  };
  // Only whether a plan fits: where all-reduce's speed-proportional
  // baseline (on one device, the device alone) fits, that is the answer,
  // without simulating the others (parameter servers on hundreds of
  // devices take many seconds each).
  if (o.fit_check_only && o.strategy == "all") {
    const std::string quick = topo.num_devices() < 2 ? "single-device" : "dp-proportional-ring";
    for (const NamedStrategy& ns : strategies) {
      if (ns.name != quick || !ns.infeasible_reason.empty()) continue;
      RETURN_IF_ERROR(evaluate(ns));
      const Evaluated& e = done.at(quick);
      if (!e.estimate.feasible()) break;
      rep.set_best(quick);
      *rep.add_estimates() = e.estimate;
      if (!e.program.empty()) result.best_program = *e.program;
      rep.set_planning_wall_s(absl::ToDoubleSeconds(absl::Now() - start));
      return result;
    }
  }
  // The wanted baselines and the even counterparts of proportional ones,
  // simulated at once.
  std::vector<NamedStrategy> first;
  for (const NamedStrategy& ns : strategies) {
    bool counterpart = false;
    for (const NamedStrategy& other : strategies) {
      counterpart |= wanted(other.name) && EvenCounterpart(other.name) == ns.name;
    }
    if ((wanted(ns.name) || counterpart) && !done.count(ns.name)) first.push_back(ns);
  }
  RETURN_IF_ERROR(evaluate_many(first, /*both_orders=*/true));
  bool found = false;
  for (const NamedStrategy& ns : strategies) {
    if (!wanted(ns.name)) continue;
    found = true;
    RETURN_IF_ERROR(evaluate(ns));
    // The proportional split is meant to beat the even one; where the
    // simulation disagrees (communication-bound steps, or a split the memory
    // fit misjudged), the even split is the better proportional plan.
    const std::string even = EvenCounterpart(ns.name);
    if (even.empty()) continue;
    for (const NamedStrategy& other : strategies) {
      if (other.name == even) RETURN_IF_ERROR(evaluate(other));
    }
    auto it = done.find(even);
    if (it == done.end()) continue;
    Evaluated& prop = done[ns.name];
    const Evaluated& ev = it->second;
    const bool better =
        ev.estimate.feasible() &&
        (!prop.estimate.feasible() || ev.estimate.step_time_s() < prop.estimate.step_time_s());
    if (!better) continue;
    std::string note = prop.estimate.feasible()
                           ? absl::StrFormat(
                                 "the speed-proportional split simulated slower (%.4g s); "
                                 "the even split is kept",
                                 prop.estimate.step_time_s())
                           : "the speed-proportional split does not fit (" +
                                 prop.estimate.infeasible_reason() + "); the even split is kept";
    prop = ev;
    prop.estimate.set_name(ns.name);
    prop.estimate.mutable_strategy()->set_name(ns.name);
    prop.estimate.set_note(note);
    if (!prop.program.empty()) prop.program->mutable_strategy()->set_name(ns.name);
  }
  std::vector<std::string> names;
  for (const NamedStrategy& ns : strategies) names.push_back(ns.name);
  bool baseline_fits = false;
  for (const auto& [name, e] : done) baseline_fits |= e.estimate.feasible();
  // Well past the memory floor no plan fits (none was found past it by
  // one row: docs/BENCHMARKS.md): said at once, not after a search of the
  // whole budget. (Where a baseline fits, the floor is wrong: searched.)
  const int64_t floor_batch = rep.memory_floor().largest_batch();
  // (A floor's batch of -1: any batch.)
  const bool past_floor = !baseline_fits && floor_batch >= 0 && o.global_batch > floor_batch &&
                          static_cast<double>(o.global_batch) > 1.1 * floor_batch;
  if (wanted(kHeteroG) && past_floor) {
    found = true;
    names.push_back(kHeteroG);
    RETURN_IF_ERROR(evaluate(NamedStrategy{
        kHeteroG,
        {},
        floor_batch == 0
            ? std::string("not searched: by the memory model no plan holds one batch row here")
            : absl::StrCat("not searched: by the memory model no plan holds more than about ",
                           floor_batch, " batch rows here at once, and ", o.global_batch,
                           " is over 10% more")}));
  } else if (wanted(kHeteroG) && !(o.fit_check_only && o.strategy == "all" && baseline_fits)) {
    found = true;
    names.push_back(kHeteroG);
    rep.set_time_budget_s(o.search.time_budget_s);
    rep.set_search_began_s(absl::ToDoubleSeconds(absl::Now() - start));
    RETURN_IF_ERROR(
        PlanHeteroG(ix, topo, cost, strategies, lb, o, start, evaluate, evaluate_many, &done));
  }
  for (const NamedStrategy& ns : o.given) {
    names.push_back(ns.name);
    RETURN_IF_ERROR(evaluate(ns));
  }
  found |= o.strategy == "given" && !o.given.empty();
  if (o.strategy == "given" && o.given.empty()) {
    return absl::InvalidArgumentError("strategy 'given' needs a strategy of the caller's own");
  }
  const bool data_parallel = absl::c_linear_search(kDataParallelBaselines, o.strategy);
  if (!found && topo.num_devices() < 2 && data_parallel) {
    return absl::InvalidArgumentError(absl::StrCat(
        "strategy '", o.strategy, "' splits the batch over at least 2 devices; the cluster has ",
        topo.num_devices(), " (known here: all, ", kHeteroG, ", ", absl::StrJoin(names, ", "),
        ")"));
  }
  if (!found) {
    return absl::InvalidArgumentError("unknown strategy '" + o.strategy + "'; known: all, " +
                                      std::string(kHeteroG) + ", " + absl::StrJoin(names, ", "));
  }
  double best = -1;
  Evaluated* chosen = nullptr;
  for (const std::string& name : names) {
    if (!wanted(name)) continue;
    Evaluated& e = done.at(name);
    if (e.estimate.feasible() && (best < 0 || e.estimate.step_time_s() < best)) {
      best = e.estimate.step_time_s();
      rep.set_best(name);
      chosen = &e;
    }
    *rep.add_estimates() = e.estimate;
  }
  // (Copied out of its arena once, whichever it is.)
  if (chosen != nullptr) {
    if (!chosen->program.empty()) result.best_program = *chosen->program;
    result.best_sim = std::move(chosen->sim);
  }
  if (!rep.best().empty()) {
    RETURN_IF_ERROR(
        Annotate(ValidateProgram(result.best_program, ix, topo), "validating " + rep.best()));
  }
  if (rep.best().empty() && load.has_value() && o.check_batch_hint) {
    // (batch_hint.h: the memory model's batch, checked by planning.)
    const std::string baseline = topo.num_devices() < 2 ? "single-device" : "dp-proportional-ring";
    PlanOptions check;
    check.strategy = baseline;
    check.program_with_graph = false;
    check.check_batch_hint = false;
    auto fits = [&](int64_t batch) {
      if (o.progress) {
        o.progress(absl::StrFormat("checking the batch to suggest: %s at batch %d (%.1f s so far)",
                                   baseline, batch, absl::ToDoubleSeconds(absl::Now() - start)));
      }
      check.global_batch = batch;
      absl::StatusOr<PlanResult> r = Plan(g, topo, check);
      return r.ok() && r->report.best() == baseline;
    };
    const absl::Time checks_start = absl::Now();
    auto refine = [&] { return absl::Now() - checks_start < absl::Seconds(kBatchHintRefineS); };
    rep.set_data_parallel_batch_limit(CheckedBatch(LargestDataParallelBatch(*load, topo),
                                                   o.global_batch, kBatchHintChecks, fits, refine));
  }
  if (!rep.best().empty() && o.program_with_graph) {
    *result.best_program.mutable_graph() = g.ToProto();
  }
  rep.set_planning_wall_s(absl::ToDoubleSeconds(absl::Now() - start));
  return result;
}

}  // namespace quilt
