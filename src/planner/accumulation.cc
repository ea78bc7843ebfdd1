#include "src/planner/accumulation.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "src/common/work_clock.h"
#include "src/planner/estimate.h"
#include "src/planner/micro_batches.h"
#include "src/planner/pipelined_plan.h"
#include "src/planner/program_validator.h"

namespace quilt {
namespace {

// Micro-batch sizes tried per kind of plan, at most: the largest
// micro-batch's rows halved from the first until one fits, then the rows
// halfway back to the last that did not and half the rows that fit.
constexpr int kTries = 6;
// Plans at a micro-batch's rows made, at most: searched (each a search of
// its own) and data-parallel.
constexpr int kSearches = 6;
constexpr int kDataParallelPlans = 8;
// What a device that overflowed keeps of its share when planned again,
// and how many times one micro-batch count is planned.
constexpr double kMargin = 0.93;
constexpr int kAttempts = 2;
// More micro-batches in flight are tried where they may save this share
// of the step at least: where the busiest device's compute (which no
// overlap shortens) is below 1 - kWorthwhile of it.
constexpr double kWorthwhile = 0.05;

struct Found {
  quilt::v1::Strategy strategy;
  double step_s = 0;
  std::string what;
  // Where more micro-batches in flight overflowed: how many, and each
  // overflowing device's memory share that would leave them room (the
  // memory they added there taken off its capacity).
  int overflowed_in_flight = 0;
  std::map<std::string, double> room;
  std::map<std::string, double> scale;  // the devices' memory it was planned on
  // Its simulation in full (shared: a Found is copied), as Plan keeps one.
  std::shared_ptr<Evaluated> full;
};

using Estimated = absl::StatusOr<quilt::v1::StrategyEstimate>;

// The kinds of plan tried at a micro-batch's rows.
enum Kind { kSearched = 0, kClosest = 1, kDataParallel = 2 };

// Whether the next step is begun: always until a try fits; after that
// where `may_begin` affords its cost (the first fit's time: when first
// asked after it), as the steps before measured it (a
// plan of its kind, else the costliest plan made, and the costliest
// simulation in full).
class Gate {
 public:
  explicit Gate(const MayBegin& may_begin) : may_begin_(may_begin) {}

  // A step that plans one of `kind` (none: a simulation alone) and
  // simulates it, where `fits` says whether a try has fitted.
  bool Begins(bool fits, std::optional<Kind> kind) {
    if (!fits || !may_begin_) return true;
    if (first_fit_ == absl::InfinitePast()) first_fit_ = WorkNow();
    double s = sim_s_;
    if (kind.has_value()) {
      s += plan_s_[*kind] > 0 ? plan_s_[*kind] : *std::max_element(plan_s_, plan_s_ + 3);
    }
    if (may_begin_(s, first_fit_)) return true;
    cut_short_ = true;
    return false;
  }
  void Planned(Kind kind, absl::Time began) {
    plan_s_[kind] = std::max(plan_s_[kind], absl::ToDoubleSeconds(WorkNow() - began));
  }
  void Simulated(double seconds) { sim_s_ = std::max(sim_s_, seconds); }
  bool cut_short() const { return cut_short_; }

 private:
  MayBegin may_begin_;
  absl::Time first_fit_ = absl::InfinitePast();  // (when first asked after a fit)
  double plan_s_[3] = {0, 0, 0};
  double sim_s_ = 0;
  bool cut_short_ = false;
};

// The tries simulated so far, by strategy (its name aside): a try that
// repeats one (the data-parallel plan the search found too, at the same
// micro-batches; the same plan with as many in flight) takes that one's
// outcome instead of another simulation in full: the simulation is
// deterministic, so it would give the same.
class Seen {
 public:
  const Estimated* Find(const quilt::v1::Strategy& s) const {
    auto it = by_key_.find(Key(s));
    return it == by_key_.end() ? nullptr : &it->second;
  }
  void Add(const quilt::v1::Strategy& s, const Estimated& e) {
    by_key_.insert_or_assign(Key(s), e);
  }

 private:
  static std::string Key(const quilt::v1::Strategy& s) {
    quilt::v1::Strategy unnamed = s;
    unnamed.clear_name();
    return unnamed.SerializeAsString();  // (no maps: deterministic)
  }
  std::map<std::string, Estimated> by_key_;
};

// `s` lowered and simulated in full in its execution order; `full` gets
// the estimate with its program and simulation. Not validated: a try is
// validated where it would become the best (Valid), which most tries
// (over memory, or slower) never are. A repeat of a try (`seen`) gets its
// outcome, `*repeat` set and no `full`.
Estimated SimulateInFull(const GraphIndex& ix, const Topology& topo, const CostModel& cost,
                         const std::string& name, int64_t batch, const quilt::v1::Strategy& s,
                         Gate* gate, Seen* seen, std::shared_ptr<Evaluated>* full, bool* repeat) {
  full->reset();
  *repeat = false;
  if (const Estimated* was = seen->Find(s)) {
    *repeat = true;
    return *was;
  }
  const absl::Time began = WorkNow();
  auto ev = std::make_shared<Evaluated>();
  Estimated e = EstimateOnArena(ix, topo, cost, NamedStrategy{name, s, ""}, batch,
                                /*lower_bound=*/0, &ev->program, &ev->sim, /*trace=*/false,
                                /*both_orders=*/false, /*validate=*/false);
  ev->wall_s = absl::ToDoubleSeconds(WorkNow() - began);
  gate->Simulated(ev->wall_s);
  seen->Add(s, e);
  if (e.ok()) {
    ev->estimate = *e;
    *full = std::move(ev);
  }
  return e;
}

// Whether `full`'s program (that of `s`) validates, as a try that would
// become the best must (validated once: Plan keeps it so); a line says why
// where not, and `seen` keeps why for a repeat of `s`. (A repeat, no
// `full`, never would become the best: the try it repeats was judged so
// already.)
bool Valid(const GraphIndex& ix, const Topology& topo, const std::string& label,
           const std::function<void(const std::string&)>& progress, const quilt::v1::Strategy& s,
           Seen* seen, Evaluated* full) {
  const absl::Status valid = full == nullptr
                                 ? absl::InternalError("a repeated try has no program to validate")
                                 : ValidateProgram(*full->program, ix, topo);
  if (full != nullptr) full->validated = valid.ok();
  if (!valid.ok()) {
    seen->Add(s, absl::InvalidArgumentError(absl::StrCat("not valid: ", valid.message())));
    if (progress) progress(absl::StrFormat("  %s: not valid: %s", label, valid.message()));
  }
  return valid.ok();
}

// A try's line: "  LABEL: 1.234 s per step", or why it does not fit.
// `repeat`: the outcome of the same plan tried before.
std::string Outcome(const std::string& label, const quilt::v1::StrategyEstimate& e, bool repeat) {
  const char* again = repeat ? " (the same plan as tried before: not simulated again)" : "";
  return e.feasible() ? absl::StrFormat("  %s: %.4g s per step%s", label, e.step_time_s(), again)
                      : absl::StrFormat("  %s: %s%s", label, e.infeasible_reason(), again);
}

// Pipelined: `s` (`fitted`: its estimate, fitting with its micro-batches
// in flight; `mine`: whether it is the best) with twice as many in flight,
// and twice that, …, while it fits, gets faster and may beat the best by
// kWorthwhile; each try one simulation in full. Where a try overflows and
// the best is `s` or made from it, the best's overflowed_in_flight and
// room are set.
void TryInFlight(const GraphIndex& ix, const Topology& topo, const CostModel& cost,
                 const std::string& name, int64_t batch, const quilt::v1::Strategy& s,
                 const quilt::v1::StrategyEstimate& fitted, const std::string& what,
                 const std::map<std::string, double>& scale, bool mine,
                 const std::function<void(const std::string&)>& progress, Gate* gate, Seen* seen,
                 std::optional<Found>* best) {
  double step_s = fitted.step_time_s();
  std::map<std::string, int64_t> before;
  for (const quilt::v1::DeviceMemory& m : fitted.memory()) before[m.device()] = m.peak_bytes();
  for (int w = std::max(2, 2 * s.micro_batches_in_flight()); w <= s.micro_batches(); w *= 2) {
    const double best_s = best->has_value() ? std::min(step_s, (*best)->step_s) : step_s;
    if (fitted.compute_s() >= (1 - kWorthwhile) * best_s) return;
    if (!gate->Begins(/*fits=*/true, std::nullopt)) return;
    quilt::v1::Strategy p = s;
    p.set_micro_batches_in_flight(w);
    std::shared_ptr<Evaluated> full;
    bool repeat = false;
    Estimated e = SimulateInFull(ix, topo, cost, name, batch, p, gate, seen, &full, &repeat);
    if (!e.ok()) {
      if (progress) progress(absl::StrFormat("  %d in flight: %s", w, e.status().message()));
      return;
    }
    if (progress) {
      progress(Outcome(absl::StrFormat("%d in flight", w), *e, repeat));
    }
    if (e->feasible() && e->step_time_s() < step_s) {
      mine = !best->has_value() || e->step_time_s() < (*best)->step_s;
      if (mine &&
          !Valid(ix, topo, absl::StrFormat("%d in flight", w), progress, p, seen, full.get())) {
        return;
      }
      step_s = e->step_time_s();
      if (mine) {
        *best = Found{p, step_s, what};
        (*best)->scale = scale;
        (*best)->full = std::move(full);
      }
      continue;
    }
    if (e->feasible() || !mine) return;
    (*best)->overflowed_in_flight = w;
    (*best)->room.clear();
    for (const quilt::v1::DeviceMemory& m : e->memory()) {
      if (m.capacity_bytes() <= 0 || m.peak_bytes() <= m.capacity_bytes()) continue;
      const double added = static_cast<double>(m.peak_bytes() - before[m.device()]);
      (*best)->room[m.device()] =
          std::max(0.1, 1 - added / static_cast<double>(m.capacity_bytes()));
    }
    return;
  }
}

// The best, with more micro-batches in flight, overflowed: planned again
// at its micro-batches' rows with room for them on the devices that
// overflowed, kept where that fits and is faster. Once: a device relieved
// lets others overflow, and another search seldom fits them all.
void ReplanWithRoom(const GraphIndex& ix, const Topology& topo, const CostModel& cost,
                    const std::string& name, int64_t batch, const PlanAt& plan_at,
                    const std::function<void(const std::string&)>& progress, Gate* gate, Seen* seen,
                    std::optional<Found>* best) {
  if (!gate->Begins(/*fits=*/true, kSearched)) return;
  const Found was = **best;
  const int k = was.strategy.micro_batches();
  const int w = was.overflowed_in_flight;
  const int64_t rows = (batch + k - 1) / k;
  std::map<std::string, double> scale = was.scale;
  for (const auto& [device, room] : was.room) {
    scale.try_emplace(device, 1.0).first->second *= room * kMargin;
  }
  if (progress) {
    progress(absl::StrFormat(
        "planning a search for micro-batches of up to %d rows (%d of them), memory kept for %d "
        "of them in flight",
        rows, k, w));
  }
  const absl::Time began = WorkNow();
  std::optional<quilt::v1::Strategy> found = plan_at(rows, "heterog", scale);
  gate->Planned(kSearched, began);
  if (!found.has_value()) return;
  found->set_micro_batches(k);
  found->set_micro_batches_in_flight(w);
  std::shared_ptr<Evaluated> full;
  bool repeat = false;
  Estimated e = SimulateInFull(ix, topo, cost, name, batch, *found, gate, seen, &full, &repeat);
  if (!e.ok()) return;
  if (progress) {
    progress(Outcome(absl::StrFormat("%d in flight", w), *e, repeat));
  }
  if (!e->feasible() || e->step_time_s() >= was.step_s) return;
  if (!Valid(ix, topo, absl::StrFormat("%d in flight", w), progress, *found, seen, full.get())) {
    return;
  }
  const std::string what = absl::StrFormat(
      "the planner's plan for a micro-batch's rows, memory kept for %d in flight", w);
  *best = Found{*found, e->step_time_s(), what};
  (*best)->scale = scale;
  (*best)->full = std::move(full);
  TryInFlight(ix, topo, cost, name, batch, *found, *e, what, scale, /*mine=*/true, progress, gate,
              seen, best);
}

}  // namespace

std::optional<AccumulatedPlan> PlanAccumulation(
    const Graph& g, const GraphIndex& ix, const Topology& topo, const CostModel& cost,
    int64_t batch, const quilt::v1::Strategy* closest, const quilt::v1::PlanReport& rep,
    const std::string& name, const PlanAt& plan_at,
    const std::function<void(const std::string&)>& progress, std::string* why,
    const MayBegin& may_begin) {
  *why = MicroBatchesRefused(ix, topo);
  if (!why->empty()) return std::nullopt;
  std::optional<Found> best;
  Gate gate(may_begin);
  Seen seen;
  const std::string dp = topo.num_devices() < 2 ? "single-device" : "dp-proportional-ring";
  bool replanned = false;
  for (const Kind kind : {kSearched, kClosest, kDataParallel}) {
    if (kind == kClosest && closest == nullptr) continue;
    if (kind != kClosest && !plan_at) continue;
    int64_t limit = kind == kClosest ? rep.hybrid_batch_limit() : rep.data_parallel_batch_limit();
    if (kind == kDataParallel && limit <= 0) limit = rep.data_parallel_batch_unchecked();
    if (kind == kSearched) {
      // (The largest batch anything was found to fit, else the memory
      // floor's.)
      limit = std::max(rep.hybrid_batch_limit(), rep.data_parallel_batch_limit());
      if (limit <= 0) limit = rep.memory_floor().largest_batch();
    }
    const int64_t from = std::max<int64_t>(2, limit > 0 ? (batch + limit - 1) / limit : 2);
    const std::string what = kind == kSearched  ? "the planner's plan for a micro-batch's rows"
                             : kind == kClosest ? "the search's closest plan"
                                                : "the speed-proportional data-parallel split";
    // A plan at a micro-batch's rows, on the devices' memory scaled by
    // `scale` (kept for the held gradients where a try overflowed).
    std::map<std::string, double> scale;
    int plans_left = kind == kSearched ? kSearches : kDataParallelPlans;
    // Tries micro-batches of at most `most` rows (by the fewest
    // micro-batches that give them): whether they fit (false, with `why`
    // set, where the graph cannot run as micro-batches).
    auto try_rows = [&](int64_t most) -> bool {
      const int k = static_cast<int>((batch + most - 1) / most);
      if (k > std::min<int64_t>(batch, kMaxMicroBatches)) return false;
      const int64_t rows = (batch + k - 1) / k;  // the largest micro-batch's
      for (int attempt = 0; attempt < kAttempts && plans_left > 0; ++attempt) {
        if (!gate.Begins(best.has_value(),
                         kind == kClosest ? std::nullopt : std::optional<Kind>(kind))) {
          return false;
        }
        quilt::v1::Strategy s;
        if (kind == kClosest) {
          if (attempt > 0) break;
          s = *closest;
        } else {
          --plans_left;
          if (progress) {
            progress(
                absl::StrFormat("planning %s for micro-batches of up to %d rows (%d of them)%s",
                                kind == kSearched ? "a search" : dp, rows, k,
                                scale.empty() ? "" : ", memory kept for their gradients"));
          }
          const absl::Time began = WorkNow();
          std::optional<quilt::v1::Strategy> found =
              plan_at(rows, kind == kSearched ? std::string("heterog") : dp, scale);
          gate.Planned(kind, began);
          if (!found.has_value()) {
            if (progress) progress(absl::StrFormat("  none fits %d rows", rows));
            return false;
          }
          s = *found;
        }
        s.set_micro_batches(k);
        if (progress) {
          progress(absl::StrFormat("trying %s over %s", what, DescribeMicroBatches(batch, k)));
        }
        std::shared_ptr<Evaluated> full;
        bool repeat = false;
        Estimated e = SimulateInFull(ix, topo, cost, name, batch, s, &gate, &seen, &full, &repeat);
        if (!e.ok()) {
          if (absl::StrContains(e.status().message(), "gradient accumulation")) {
            *why = std::string(e.status().message());
            return false;
          }
          // (e.g. the smaller micro-batches' rows fewer than a group's
          // replicas)
          if (progress) {
            progress(absl::StrFormat("  %d micro-batches: %s", k, e.status().message()));
          }
          return false;
        }
        if (progress) {
          progress(Outcome(absl::StrFormat("%d micro-batches", k), *e, repeat));
        }
        if (e->feasible()) {
          const bool mine = !best.has_value() || e->step_time_s() < best->step_s;
          if (mine && !Valid(ix, topo, absl::StrFormat("%d micro-batches", k), progress, s, &seen,
                             full.get())) {
            return false;
          }
          if (mine) {
            best = Found{s, e->step_time_s(), what};
            best->scale = scale;
            best->full = std::move(full);
          }
          TryInFlight(ix, topo, cost, name, batch, s, *e, what, scale, mine, progress, &gate, &seen,
                      &best);
          return true;
        }
        // Over memory: each device that overflowed planned again with the
        // share it had left.
        for (const quilt::v1::DeviceMemory& m : e->memory()) {
          if (m.capacity_bytes() <= 0 || m.peak_bytes() <= m.capacity_bytes()) continue;
          double& f = scale.try_emplace(m.device(), 1.0).first->second;
          f *= kMargin * static_cast<double>(m.capacity_bytes()) /
               static_cast<double>(m.peak_bytes());
        }
      }
      return false;
    };
    // Halved until one fits; then halfway back to the last that did not (a
    // plan at more rows that may fit too) and half of them (a plan less
    // pressed for memory can be the faster), the fastest kept.
    int64_t rows = (batch + from - 1) / from, missed = 0, fitted = 0;
    for (int tries = 0; rows >= 1 && tries < kTries && fitted == 0; ++tries, rows /= 2) {
      (try_rows(rows) ? fitted : missed) = rows;
      if (!why->empty()) return std::nullopt;
    }
    const int64_t halfway = missed > 0 ? (fitted + missed) / 2 : 0;
    for (int64_t more : {halfway, fitted / 2}) {
      // Where more in flight overflowed the fastest, it is planned once
      // with room for them: among the searched plans, before the smaller
      // micro-batches (it pays far more often than they and the kinds
      // after, which the time budget may leave untried), else at the end.
      if (more != halfway && kind == kSearched && best.has_value() &&
          best->overflowed_in_flight > 0 && !replanned) {
        ReplanWithRoom(ix, topo, cost, name, batch, plan_at, progress, &gate, &seen, &best);
        replanned = true;
      }
      if (fitted == 0 || more <= 0 || more == fitted || more == missed) continue;
      try_rows(more);
      if (!why->empty()) return std::nullopt;
    }
  }
  if (!best.has_value()) return std::nullopt;
  if (!replanned && best->overflowed_in_flight > 0 && plan_at) {
    ReplanWithRoom(ix, topo, cost, name, batch, plan_at, progress, &gate, &seen, &best);
  }
  const int k = best->strategy.micro_batches();
  const int w = best->strategy.micro_batches_in_flight();
  AccumulatedPlan out;
  out.strategy = NamedStrategy{name, best->strategy, ""};
  out.cut_short = gate.cut_short();
  out.full = std::move(best->full);
  if (out.cut_short && progress) {
    progress("  the time budget is spent and a plan fits: the tries left are not begun");
  }
  out.note = absl::StrFormat(
      "no plan holds the batch's activations at once: %s, its batch run as %s %s, their "
      "gradients summed before they are aggregated and applied once",
      best->what, DescribeMicroBatches(batch, k),
      w > 1 ? absl::StrCat("with ", DescribeInFlight(w), " (pipelined)")
            : std::string("one after the other"));
  return out;
}

std::string AccumulationRefusedHint(const quilt::v1::PlanReport& report) {
  if (report.accumulation_refused().empty()) return "";
  return "; gradient accumulation over micro-batches cannot run this graph (" +
         report.accumulation_refused() + ")";
}

}  // namespace quilt
