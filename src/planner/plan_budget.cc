#include "src/planner/plan_budget.h"

#include <algorithm>

namespace quilt {

double PlanBudget::LeftSeconds(absl::Time now) const {
  return budget_s_ - absl::ToDoubleSeconds(now - start_);
}

double PlanBudget::SearchSeconds(absl::Time now) const {
  return std::max(kLeastShare * budget_s_, LeftSeconds(now) - kFinishShare * budget_s_);
}

double PlanBudget::FitSeconds(absl::Time now, bool nothing_fits, double after_s) const {
  const double left = LeftSeconds(now);
  if (nothing_fits) return std::max(left, kLeastShare * budget_s_);
  const double phase = left - std::max(0.0, after_s);
  return phase < kUsefulShare * budget_s_ ? 0 : phase;
}

bool PlanBudget::Affords(absl::Time now, double sim_s) const {
  return sim_s < kNegligibleShare * budget_s_ ||
         kSimMargin * sim_s <= LeftSeconds(now) - kWrapUpShare * budget_s_;
}

}  // namespace quilt
