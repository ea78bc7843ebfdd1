// The batch a no-fit plan report suggests instead (PlanReport's
// data_parallel_batch_limit), checked by planning. The baselines' memory
// model extrapolates each device's peak from two probes, affine in the
// rows, and may err either way far from them (vgg19 on one 2 GiB device:
// 8 rows by the model, 6 in full); a suggestion that then runs out of
// memory is worse than none. So the model's batch is only where the check
// starts: the baseline is planned in full there, then lower (in steps that
// double) until one fits, and between the last that fits and the first
// that does not, a few plans in all, each begun only within the planning
// budget (where none was, Plan reports the model's batch, said unchecked).
#ifndef QUILT_SRC_PLANNER_BATCH_HINT_H_
#define QUILT_SRC_PLANNER_BATCH_HINT_H_

#include <cstdint>
#include <functional>
#include <string>

namespace quilt {

// At most this many plans check a suggestion; once one fits, those after
// it begin only within this many seconds of the first.
inline constexpr int kBatchHintChecks = 6;
inline constexpr double kBatchHintRefineS = 0.5;

// The largest batch below `failed` (a batch nothing fits) at which
// `fits(batch)` holds, searched from `estimate` in at most `max_checks`
// calls of `fits`: the largest batch found to fit (with no batch between it
// and one found not to fit when the checks sufficed), or 0 where none of
// the batches checked fits. `fits` must be monotone for the result to be
// the largest; it is called with batches from 1 to failed - 1, each once.
// Each check is begun only where `may_check(found)` says so (`found`: a
// batch that fits is known): the planning budget's end stops the checks,
// and once a batch fits, the search goes on towards the largest only a
// little longer (on hundreds of devices a check takes seconds; a batch
// that fits is what the suggestion needs).
int64_t CheckedBatch(
    int64_t estimate, int64_t failed, int max_checks, const std::function<bool(int64_t)>& fits,
    const std::function<bool(bool found)>& may_check = [](bool) { return true; });

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_BATCH_HINT_H_
