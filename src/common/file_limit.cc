#include "src/common/file_limit.h"

#include <sys/resource.h>

#include <algorithm>

#include "src/common/logging.h"

namespace quilt {

int64_t RaiseOpenFileLimit(int64_t want, int64_t warn_below) {
  struct rlimit lim;
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return 0;
  const rlim_t target = lim.rlim_max == RLIM_INFINITY
                            ? static_cast<rlim_t>(want)
                            : std::min<rlim_t>(lim.rlim_max, static_cast<rlim_t>(want));
  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < target) {
    struct rlimit raised = lim;
    raised.rlim_cur = target;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  const int64_t soft = lim.rlim_cur == RLIM_INFINITY ? want : static_cast<int64_t>(lim.rlim_cur);
  if (soft < warn_below) {
    QLOG_WARN(
        "the open-file limit is {} (hard limit {}); many clients, nodes or jobs at once may "
        "exhaust it, and connections are then refused: raise it (LimitNOFILE= in the unit, "
        "ulimit -n)",
        soft, lim.rlim_max == RLIM_INFINITY ? want : static_cast<int64_t>(lim.rlim_max));
  }
  return soft;
}

}  // namespace quilt
