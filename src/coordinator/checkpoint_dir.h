// A job's checkpoint directory as written by its executors:
// <dir>/step-<number>/rank-<r>/metrics.json (+ .npy files). A step is
// complete once every rank's metrics.json is there. Entries not named
// step-<digits> (a link named step-latest, a stray copy) are not steps.
#ifndef QUILT_SRC_COORDINATOR_CHECKPOINT_DIR_H_
#define QUILT_SRC_COORDINATOR_CHECKPOINT_DIR_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace quilt {

// The first rank of `world` without `step_dir`/rank-R/metrics.json, or -1
// when every rank wrote its index (the step is complete).
int MissingRank(const std::string& step_dir, int world);

// The complete steps in `dir` for `world` ranks, newest first:
// (step number, directory name). Empty when there is none (or no dir).
// `incomplete` (optional) gets the others, newest first: (step number,
// "step-…: incomplete (no rank-R/metrics.json)").
std::vector<std::pair<int64_t, std::string>> CompleteSteps(
    const std::string& dir, int world,
    std::vector<std::pair<int64_t, std::string>>* incomplete = nullptr);

}  // namespace quilt

#endif  // QUILT_SRC_COORDINATOR_CHECKPOINT_DIR_H_
