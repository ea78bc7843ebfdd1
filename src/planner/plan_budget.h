// The planner's time budget (SearchOptions::time_budget_s, quiltctl
// --time-budget) shared out over the phases of planning, so that planning
// as a whole takes about the budget: the search gets what is left after
// building the baselines, less a share kept for simulating the plans in
// full; a plan that fits the search's coarse model but not the full one is
// repaired, and searched again with more headroom, in what is left after
// that. Where no plan fits at all (no baseline either), those phases go on
// past the end, each with at least a share of the budget: a plan that fits
// is worth the time, and the progress lines say the budget was passed.
// Where a plan fits, a phase's plan must also leave time to be simulated
// in full (measured on the plan before it: seconds on large clusters).
// Every step after the first full simulations (the plan's variants, the
// search's earlier plans, refinements, the batch a no-fit report
// suggests) is begun only where its simulation, as measured on the plan,
// fits what is left with a margin (a simulation's time varies from run to
// run by half) and a share kept for writing the result out. Planning the
// batch as micro-batches where nothing fits (accumulation.h) goes on until
// a try fits, then begins each try where it fits this budget or
// kAfterFitBudgets of it counted from that fit.
#ifndef QUILT_SRC_PLANNER_PLAN_BUDGET_H_
#define QUILT_SRC_PLANNER_PLAN_BUDGET_H_

#include "absl/time/time.h"

namespace quilt {

class PlanBudget {
 public:
  // Share of the budget kept for the full simulations after the search.
  static constexpr double kFinishShare = 0.25;
  // The least a search, or a phase fitting a plan to memory where nothing
  // fits, gets, as a share of the budget (past its end if need be).
  static constexpr double kLeastShare = 0.25;
  // Where a plan fits, a fitting phase with less than this share left is
  // not begun.
  static constexpr double kUsefulShare = 0.05;
  // A simulation that takes less than this share of the budget is begun
  // whatever is left (small clusters: milliseconds).
  static constexpr double kNegligibleShare = 0.01;
  // A step is begun where this many times its measured simulation fits
  // what is left less kWrapUpShare of the budget (validating the plan
  // chosen and writing it out).
  static constexpr double kSimMargin = 1.5;
  static constexpr double kWrapUpShare = 0.04;
  // Where nothing fits, the batch's micro-batch tries after the first that
  // fits take at most this many budgets more (accumulation.h): with one,
  // some runs left out the tries that made gpt2_xl's plans up to 1.8×
  // faster (docs/BENCHMARKS.md).
  static constexpr double kAfterFitBudgets = 2;

  // Planning that began at `start`, in `budget_s` seconds.
  PlanBudget(absl::Time start, double budget_s) : start_(start), budget_s_(budget_s) {}

  double budget_s() const { return budget_s_; }
  // Seconds left at `now` (negative once passed).
  double LeftSeconds(absl::Time now) const;
  // The search's seconds at `now`: what is left less kFinishShare of the
  // budget, at least kLeastShare of it.
  double SearchSeconds(absl::Time now) const;
  // Seconds a phase that fits a plan to memory may take at `now`, its
  // plan then simulated in full in `after_s` (as measured on the plan
  // before): what is left less that where another plan fits
  // (`nothing_fits` false), 0 where that is under kUsefulShare of the
  // budget; where nothing fits, at least kLeastShare of the budget.
  double FitSeconds(absl::Time now, bool nothing_fits, double after_s = 0) const;
  // Whether a step after the first full simulations, simulated in full in
  // `sim_s` (as measured on the plan), is begun at `now`: where kSimMargin
  // times that fits what is left less kWrapUpShare of the budget, or where
  // it is negligible (under kNegligibleShare of the budget).
  bool Affords(absl::Time now, double sim_s) const;

 private:
  absl::Time start_;
  double budget_s_;
};

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_PLAN_BUDGET_H_
