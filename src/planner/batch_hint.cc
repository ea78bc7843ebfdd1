#include "src/planner/batch_hint.h"

#include <algorithm>

namespace quilt {

int64_t CheckedBatch(int64_t estimate, int64_t failed, int max_checks,
                     const std::function<bool(int64_t)>& fits,
                     const std::function<bool(bool found)>& may_check) {
  int64_t bad = failed;  // the least batch known not to fit
  int64_t good = 0;      // the largest batch known to fit (0: none)
  int checks = 0;
  if (failed <= 1) return 0;
  int64_t next = std::clamp<int64_t>(estimate, 1, failed - 1);
  // Down from the estimate in steps that double, until one fits.
  int64_t step = std::max<int64_t>(1, next / 16);
  while (checks < max_checks && next >= 1 && may_check(false)) {
    ++checks;
    if (fits(next)) {
      good = next;
      break;
    }
    bad = next;
    if (next == 1) break;
    next = std::max<int64_t>(1, next - step);
    step *= 2;
  }
  // Then between the two.
  while (good > 0 && checks < max_checks && bad - good > 1 && may_check(true)) {
    const int64_t mid = good + (bad - good) / 2;
    ++checks;
    if (fits(mid)) {
      good = mid;
    } else {
      bad = mid;
    }
  }
  return good;
}

}  // namespace quilt
