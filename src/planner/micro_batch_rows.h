// Which rows of a step's batch each micro-batch (gradient accumulation,
// DistributedProgram.micro_batches) holds: what the lowering, the
// validator and the executor agree on. The first micro_batches -
// batch % micro_batches micro-batches hold batch / micro_batches rows, the
// rest one more.
#ifndef QUILT_SRC_PLANNER_MICRO_BATCH_ROWS_H_
#define QUILT_SRC_PLANNER_MICRO_BATCH_ROWS_H_

#include <algorithm>
#include <cstdint>

namespace quilt {

struct MicroBatchSpan {
  int64_t begin = 0;
  int64_t end = 0;
};

// Micro-batch j (0-based) of `micro_batches` (1 <= micro_batches <= batch)
// over `batch` rows: its rows [begin, end). With none or one micro-batch,
// the whole batch.
inline MicroBatchSpan MicroBatchRange(int64_t batch, int micro_batches, int j) {
  if (micro_batches <= 1) return {0, batch};
  const int64_t k = micro_batches, base = batch / k, first_larger = k - batch % k;
  const int64_t begin = j * base + std::max<int64_t>(0, j - first_larger);
  return {begin, begin + base + (j >= first_larger ? 1 : 0)};
}

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_MICRO_BATCH_ROWS_H_
