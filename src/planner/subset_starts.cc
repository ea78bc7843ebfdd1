#include "src/planner/subset_starts.h"

#include <set>
#include <vector>

#include "absl/time/clock.h"
#include "src/common/work_clock.h"
#include "src/planner/priorities.h"

namespace quilt {

std::optional<SubsetStart> BestSubsetStart(SearchSpace* space, int groups, const Score& best,
                                           absl::Time deadline) {
  std::optional<SubsetStart> found;
  Score beat = best;
  std::set<int> seen;
  for (int option : space->SubsetOptions()) {
    if (!seen.insert(option).second) continue;
    if (WorkNow() >= deadline) break;
    std::vector<PlanState> orders;
    for (auto order : kExecutionOrders) {
      PlanState s;
      s.place.assign(groups, option);
      s.method.assign(groups, space->MethodsFor(option).front());
      s.order = order;
      if (beat.feasible() && space->StartCannotBeat(s, beat.time_s)) continue;
      orders.push_back(std::move(s));
    }
    if (orders.empty()) continue;
    std::vector<absl::StatusOr<Score>> scores = space->EvaluateAll(orders);
    for (size_t i = 0; i < orders.size(); ++i) {
      if (!scores[i].ok() || !scores[i]->feasible() || !scores[i]->BetterThan(beat)) continue;
      beat = *scores[i];
      found = SubsetStart{orders[i], *scores[i],
                          "data parallelism over " + space->options()[option].label};
    }
  }
  return found;
}

}  // namespace quilt
