// Helpers of the search's tests: a random plan state over a search space's
// options (methods, parameter servers and execution orders included), and
// every group on one device.
#ifndef QUILT_SRC_PLANNER_SEARCH_TEST_UTIL_H_
#define QUILT_SRC_PLANNER_SEARCH_TEST_UTIL_H_

#include <random>
#include <vector>

#include "src/planner/priorities.h"
#include "src/planner/search_space.h"

namespace quilt::testing {

inline PlanState RandomState(const SearchSpace& space, int groups, std::mt19937_64* rng) {
  PlanState s;
  for (int k = 0; k < groups; ++k) {
    s.place.push_back(static_cast<int>((*rng)() % space.options().size()));
    const std::vector<Method> methods = space.MethodsFor(s.place.back());
    s.method.push_back(methods[(*rng)() % methods.size()]);
    if (s.method.back() == Method::kParameterServer && !space.ServerNodes().empty() &&
        (*rng)() % 2 == 0) {
      SetServerNode(&s, k, space.ServerNodes()[(*rng)() % space.ServerNodes().size()]);
    }
  }
  s.order = kExecutionOrders[(*rng)() % 2];
  return s;
}

// Every one of `groups` groups on `device` (the space's single-device
// option, its first method).
inline PlanState AllOn(SearchSpace* space, int groups, int device) {
  PlanState s;
  s.place.assign(groups, space->SingleOption(device));
  s.method.assign(groups, space->MethodsFor(s.place[0]).front());
  return s;
}

}  // namespace quilt::testing

#endif  // QUILT_SRC_PLANNER_SEARCH_TEST_UTIL_H_
