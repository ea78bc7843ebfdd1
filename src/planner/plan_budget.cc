#include "src/planner/plan_budget.h"

#include <algorithm>

namespace quilt {

double PlanBudget::LeftSeconds(absl::Time now) const {
  return budget_s_ - absl::ToDoubleSeconds(now - start_);
}

double PlanBudget::SearchSeconds(absl::Time now) const {
  return std::max(kLeastShare * budget_s_, LeftSeconds(now) - kFinishShare * budget_s_);
}

double PlanBudget::FitSeconds(absl::Time now, bool nothing_fits) const {
  const double left = LeftSeconds(now);
  if (nothing_fits) return std::max(left, kLeastShare * budget_s_);
  return left < kUsefulShare * budget_s_ ? 0 : left;
}

}  // namespace quilt
