#include "src/planner/plan.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "src/common/release_memory.h"
#include "src/common/status.h"
#include "src/common/work_clock.h"
#include "src/planner/accumulation.h"
#include "src/planner/batch_hint.h"
#include "src/planner/bucketed_baselines.h"
#include "src/planner/estimate.h"
#include "src/planner/estimate_many.h"
#include "src/planner/lower.h"
#include "src/planner/lower_bound.h"
#include "src/planner/memory_floor.h"
#include "src/planner/node_subset_baselines.h"
#include "src/planner/placement.h"
#include "src/planner/plan_budget.h"
#include "src/planner/plan_heterog.h"
#include "src/planner/program_validator.h"

namespace quilt {

namespace {

// The proportional baseline's counterpart with the even split.
std::string EvenCounterpart(const std::string& name) {
  const std::string prefix = "dp-proportional-";
  if (name.rfind(prefix, 0) != 0) return "";
  return "dp-even-" + name.substr(prefix.size());
}

// When a check of a batch to suggest may begin (CheckedBatch's may_check):
// where the planning budget affords one more, as long as `check_s` says
// one takes, and once a batch fits, only within kBatchHintRefineS of the
// first check.
std::function<bool(bool)> MayCheckBatch(absl::Time start, double budget_s, const double* check_s) {
  const PlanBudget budget(start, budget_s);
  const absl::Time checks_start = WorkNow();
  return [budget, checks_start, check_s](bool found) {
    return budget.Affords(WorkNow(), *check_s) &&
           (!found || WorkNow() - checks_start < absl::Seconds(kBatchHintRefineS));
  };
}

// Where nothing fits: the largest batch below the one asked, and above the
// data-parallel one found, at which the search's closest plan fits as it
// is, the rows fewer (PlanReport's hybrid_batch_limit), each check one
// simulation in full of that plan, begun only within the time budget.
void CheckHybridBatch(const GraphIndex& ix, const Topology& topo, const CostModel& cost,
                      const PlanOptions& o, absl::Time start,
                      const std::map<std::string, Evaluated>& done, quilt::v1::PlanReport* rep) {
  auto it = done.find(kHeteroG);
  if (it == done.end() || it->second.estimate.strategy().groups().empty()) return;
  const NamedStrategy closest{kHeteroG, it->second.estimate.strategy(), ""};
  double check_s = it->second.wall_s;
  double step_s = 0;
  // (Worth naming only above the batch data parallelism was found to fit.)
  const int64_t data_parallel = rep->data_parallel_batch_limit();
  auto fits = [&](int64_t batch) {
    if (batch <= data_parallel) return false;
    if (o.progress) {
      o.progress(absl::StrFormat(
          "checking the batch to suggest: the closest hybrid plan at batch %d (%.1f s so far)",
          batch, absl::ToDoubleSeconds(WorkNow() - start)));
    }
    const absl::Time began = WorkNow();
    absl::StatusOr<quilt::v1::StrategyEstimate> e =
        Estimate(ix, topo, cost, closest, batch, /*lower_bound=*/0, /*program=*/nullptr,
                 /*sim=*/nullptr, /*trace=*/false, /*both_orders=*/false);
    check_s = std::max(check_s, absl::ToDoubleSeconds(WorkNow() - began));
    // (A batch the plan cannot be lowered at, e.g. fewer rows than a
    // group's replicas, is one it does not fit.)
    if (!e.ok() || !e->feasible()) return false;
    step_s = e->step_time_s();
    return true;
  };
  // The memory model's first guess: the rows scaled by the fullest
  // device's capacity over its peak (an upper guess: the parameters do
  // not shrink with the rows).
  double scale = 1;
  for (const quilt::v1::DeviceMemory& m : it->second.estimate.memory()) {
    if (m.capacity_bytes() > 0 && m.peak_bytes() > m.capacity_bytes()) {
      scale = std::min(
          scale, static_cast<double>(m.capacity_bytes()) / static_cast<double>(m.peak_bytes()));
    }
  }
  const std::function<bool(bool)> may_check =
      MayCheckBatch(start, o.search.time_budget_s, &check_s);
  const auto estimate = static_cast<int64_t>(static_cast<double>(o.global_batch) * scale);
  // (step_s is the last check's that fit: CheckedBatch's answer is the
  // largest batch found to fit, and the batches it checks that fit rise.)
  const int64_t batch = CheckedBatch(estimate, o.global_batch, kBatchHintChecks, fits, may_check);
  if (batch <= 0) return;
  rep->set_hybrid_batch_limit(batch);
  rep->set_hybrid_batch_step_s(step_s);
}

}  // namespace

absl::StatusOr<PlanResult> Plan(const Graph& g, const Topology& topo, const PlanOptions& o) {
  // Every decision by time on the planner's clock (work_clock.h: a seed
  // gives one plan on any machine); nested plans share the outer's.
  const WorkClockIfNone clock;
  // (The outermost hands the memory its simulations freed back when it
  // ends: release_memory.h.)
  const bool outermost = clock.owned();
  const absl::Cleanup release = [outermost] {
    if (outermost) ReleaseFreedMemory();
  };
  const absl::Time wall_start = absl::Now();
  const absl::Time start = WorkNow();
  PlanResult result;
  quilt::v1::PlanReport& rep = result.report;
  auto set_times = [&] {
    rep.set_planning_wall_s(absl::ToDoubleSeconds(absl::Now() - wall_start));
    rep.set_planning_work_s(absl::ToDoubleSeconds(WorkNow() - start));
    rep.set_planning_clock_followed_wall(clock.clock()->FollowedWall());
  };
  if (!g.has_backward) return absl::InvalidArgumentError("planning needs a training graph");
  if (o.global_batch < 1) return absl::InvalidArgumentError("the batch must be at least 1");
  RETURN_IF_ERROR(CheckGlobalBatch(o.global_batch));
  RETURN_IF_ERROR(CheckStateFits(g, topo));
  ASSIGN_OR_RETURN(CostModel cost, CostModel::Create(&g, &topo));
  ASSIGN_OR_RETURN(const GraphIndex ix, GraphIndex::Build(g));
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
  // (What a check of the batch to suggest costs besides its simulation.)
  const double baselines_built_s = absl::ToDoubleSeconds(WorkNow() - start);
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
  auto evaluate_many = [&](const std::vector<NamedStrategy>& list, bool both_orders,
                           const std::function<bool()>& may_begin) -> absl::Status {
    EstimateManyOptions eo;
    eo.batch = o.global_batch;
    eo.lower_bound = lb;
    eo.trace = o.trace;
    eo.both_orders = both_orders;
    eo.progress = o.progress;
    eo.heartbeat_s = o.simulation_progress_every_s;
    eo.start = start;
    eo.may_begin = may_begin;
    // (The all-reduce baselines also in buckets, as frameworks run them,
    // the faster kept: bucketed_baselines.h. Not where only whether one
    // fits is asked.)
    std::vector<NamedStrategy> all = list;
    if (o.bucketed_baselines && !o.fit_check_only) {
      for (NamedStrategy& v : BucketedVariants(g, list, done)) all.push_back(std::move(v));
    }
    absl::Status st = EstimateMany(ix, topo, cost, all, eo, &done);
    // (A bucketed counterpart that fails leaves its baseline as it is.)
    if (!st.ok() && all.size() > list.size()) st = EstimateMany(ix, topo, cost, list, eo, &done);
    KeepFasterBucketed(&done);
    return st;
  };
  auto evaluate = [&](const NamedStrategy& ns) -> absl::Status {
    if (done.count(ns.name)) return absl::OkStatus();
    return evaluate_many({ns}, /*both_orders=*/true, {});
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
      set_times();
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
  RETURN_IF_ERROR(evaluate_many(first, /*both_orders=*/true, {}));
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
    if (!FitsAndBeats(ev.estimate, prop.estimate)) continue;
    std::string note = prop.estimate.feasible()
                           ? absl::StrFormat(
                                 "the speed-proportional split simulated slower (%.4g s); "
                                 "the even split is kept",
                                 prop.estimate.step_time_s())
                           : "the speed-proportional split does not fit (" +
                                 prop.estimate.infeasible_reason() + "); the even split is kept";
    if (!ev.estimate.note().empty()) note += "; " + ev.estimate.note();
    prop = ev;
    prop.Rename(ns.name);
    prop.estimate.set_note(note);
  }
  std::vector<std::string> names;
  for (const NamedStrategy& ns : strategies) names.push_back(ns.name);
  bool baseline_fits = false;
  for (const auto& [name, e] : done) baseline_fits |= e.estimate.feasible();
  // Past the memory floor no plan fits (none was found past it by one
  // row: docs/BENCHMARKS.md): said at once, not after a search of the
  // whole budget. (Where a baseline fits, the floor is wrong: searched.)
  const int64_t floor_batch = rep.memory_floor().largest_batch();
  const bool past_floor = !baseline_fits && PastTheFloorMargin(o.global_batch, floor_batch);
  if (wanted(kHeteroG) && past_floor) {
    found = true;
    names.push_back(kHeteroG);
    rep.set_time_budget_s(o.search.time_budget_s);
    RETURN_IF_ERROR(evaluate(NamedStrategy{
        kHeteroG,
        {},
        floor_batch == 0
            ? std::string("not searched: by the memory model no plan holds one batch row here")
            : absl::StrCat("not searched: by the memory model no plan holds more than about ",
                           floor_batch, " batch rows here at once, and ", o.global_batch,
                           " is over ", kFloorSearchMargin * 100, "% more")}));
  } else if (wanted(kHeteroG) && !(o.fit_check_only && o.strategy == "all" && baseline_fits)) {
    found = true;
    names.push_back(kHeteroG);
    rep.set_time_budget_s(o.search.time_budget_s);
    rep.set_search_began_s(absl::ToDoubleSeconds(absl::Now() - wall_start));
    // (Built after the search, where it is simulated: parameter servers'
    // split over a subset simulates it.)
    auto subsets = [&] {
      return load.has_value() ? NodeSubsetBaselines(g, topo, cost, *load, o.global_batch)
                              : std::vector<NamedStrategy>{};
    };
    RETURN_IF_ERROR(PlanHeteroG(ix, topo, cost, strategies, subsets, lb, o, start, evaluate,
                                evaluate_many, &done));
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
  Evaluated* chosen = nullptr;
  auto choose = [&] {
    double best = -1;
    chosen = nullptr;
    rep.clear_best();
    rep.clear_estimates();
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
  };
  choose();
  if (rep.best().empty() && load.has_value() && o.check_batch_hint) {
    // (batch_hint.h: the memory model's batch, checked by planning, each
    // check begun only within the time budget: plan_budget.h.)
    const std::string baseline = topo.num_devices() < 2 ? "single-device" : "dp-proportional-ring";
    PlanOptions check;
    check.strategy = baseline;
    check.program_with_graph = false;
    check.check_batch_hint = false;
    check.bucketed_baselines = false;  // (only whether it fits)
    // A check's cost: building the baselines and simulating this one, as
    // measured here (the slowest simulated where it was not), then as the
    // checks measure.
    double check_s = 0;
    for (const auto& [name, e] : done) {
      if (name == baseline || !done.count(baseline)) check_s = std::max(check_s, e.wall_s);
    }
    check_s += baselines_built_s;
    int checks = 0;
    auto fits = [&](int64_t batch) {
      if (o.progress) {
        o.progress(absl::StrFormat("checking the batch to suggest: %s at batch %d (%.1f s so far)",
                                   baseline, batch, absl::ToDoubleSeconds(WorkNow() - start)));
      }
      ++checks;
      const absl::Time began = WorkNow();
      check.global_batch = batch;
      absl::StatusOr<PlanResult> r = Plan(g, topo, check);
      check_s = std::max(check_s, absl::ToDoubleSeconds(WorkNow() - began));
      return r.ok() && r->report.best() == baseline;
    };
    const std::function<bool(bool)> may_check =
        MayCheckBatch(start, o.search.time_budget_s, &check_s);
    const int64_t estimate = LargestDataParallelBatch(*load, topo);
    rep.set_data_parallel_batch_limit(
        CheckedBatch(estimate, o.global_batch, kBatchHintChecks, fits, may_check));
    // None checked: the memory model's batch, said to be unchecked.
    if (checks == 0 && estimate > 0 && estimate < o.global_batch) {
      rep.set_data_parallel_batch_unchecked(estimate);
    }
  }
  if (rep.best().empty() && o.check_batch_hint) {
    CheckHybridBatch(ix, topo, cost, o, start, done, &rep);
  }
  if (rep.best().empty() && o.accumulate && wanted(kHeteroG) && done.count(kHeteroG)) {
    // (Gradient accumulation: the planner's plan where nothing else fits.)
    const quilt::v1::Strategy& searched = done.at(kHeteroG).estimate.strategy();
    // A plan at a micro-batch's rows, a search in a third of the time budget,
    // on the devices' memory as scaled.
    const PlanAt plan_at =
        [&](int64_t rows, const std::string& strategy,
            const std::map<std::string, double>& scale) -> std::optional<quilt::v1::Strategy> {
      quilt::v1::ClusterSpec spec = topo.spec();
      for (auto& node : *spec.mutable_nodes()) {
        for (auto& d : *node.mutable_devices()) {
          auto f = scale.find(d.id());
          if (f == scale.end()) continue;
          d.set_memory_bytes(
              static_cast<int64_t>(static_cast<double>(d.memory_bytes()) * f->second));
        }
      }
      absl::StatusOr<Topology> scaled = Topology::Build(spec);
      if (!scaled.ok()) return std::nullopt;
      PlanOptions sub = o;
      sub.global_batch = rows;
      sub.strategy = strategy;
      sub.given.clear();
      sub.accumulate = false;
      sub.check_batch_hint = false;
      sub.program_with_graph = false;
      sub.trace = false;
      sub.fit_check_only = false;
      // (A micro-batch's data-parallel plan: one collective per gradient,
      // as the search's starts; planning time where nothing fits.)
      sub.bucketed_baselines = false;
      sub.progress = nullptr;
      sub.search.time_budget_s = o.search.time_budget_s / 3;
      absl::StatusOr<PlanResult> r = Plan(g, *scaled, sub);
      if (!r.ok() || r->report.best().empty()) return std::nullopt;
      for (const quilt::v1::StrategyEstimate& e : r->report.estimates()) {
        if (e.name() == r->report.best()) return e.strategy();
      }
      return std::nullopt;
    };
    // (Its lines that begin a try say how long planning has taken.)
    const std::function<void(const std::string&)> progress =
        !o.progress ? o.progress : [&](const std::string& line) {
          o.progress(absl::StartsWith(line, " ")
                         ? line
                         : absl::StrFormat("%s (%.1f s so far)", line,
                                           absl::ToDoubleSeconds(WorkNow() - start)));
        };
    const absl::Time accumulation_began = absl::Now();
    std::string why;
    // (Once a try fits, the steps after it within the time budget, or
    // within kAfterFitBudgets of it from that fit: tries past the first fit
    // often make the step much faster, pipelined or at other rows, and cost
    // a search and a simulation each, the simulation alone seconds on large
    // clusters.)
    const PlanBudget budget(start, o.search.time_budget_s);
    const MayBegin may_begin = [&](double seconds, absl::Time first_fit) {
      const absl::Time now = WorkNow();
      return budget.Affords(now, seconds) ||
             PlanBudget(first_fit, PlanBudget::kAfterFitBudgets * o.search.time_budget_s)
                 .Affords(now, seconds);
    };
    std::optional<AccumulatedPlan> acc = PlanAccumulation(
        g, ix, topo, cost, o.global_batch, searched.groups().empty() ? nullptr : &searched, rep,
        kHeteroG, plan_at, progress, &why, may_begin);
    rep.set_accumulation_wall_s(absl::ToDoubleSeconds(absl::Now() - accumulation_began));
    rep.set_accumulation_cut_short(acc.has_value() && acc->cut_short);
    if (acc.has_value()) {
      // (The search's account stays the estimate's.)
      const quilt::v1::SearchSummary summary = done.at(kHeteroG).estimate.search();
      done.erase(kHeteroG);
      if (acc->full != nullptr && !o.trace && !budget.Affords(WorkNow(), acc->full->wall_s)) {
        // (As the tries simulated it in full, in its execution order: not
        // again, in both, past the budget.)
        Evaluated e = std::move(*acc->full);
        e.Rename(kHeteroG);
        e.estimate.set_ratio_to_lower_bound(lb > 0 ? e.estimate.step_time_s() / lb : 0);
        done.emplace(kHeteroG, std::move(e));
      } else {
        RETURN_IF_ERROR(evaluate(acc->strategy));
      }
      done.at(kHeteroG).estimate.set_note(acc->note);
      *done.at(kHeteroG).estimate.mutable_search() = summary;
      choose();
    } else if (!why.empty()) {
      rep.set_accumulation_refused(why);
    }
  }
  // (Copied out of its arena once, whichever it is.)
  bool validated = false;  // (as the micro-batch tries validated it)
  if (chosen != nullptr) {
    if (!chosen->program.empty()) result.best_program = *chosen->program;
    result.best_sim = std::move(chosen->sim);
    validated = chosen->validated;
  }
  if (!rep.best().empty() && !validated) {
    RETURN_IF_ERROR(
        Annotate(ValidateProgram(result.best_program, ix, topo), "validating " + rep.best()));
  }
  if (!rep.best().empty() && o.program_with_graph) {
    *result.best_program.mutable_graph() = g.ToProto();
  }
  set_times();
  return result;
}

}  // namespace quilt
