// Gradient accumulation in the schedule IR: a program lowered at the
// micro-batch's rows becomes the whole step's. Its instructions that work
// on batch rows (the forward and backward passes, their transfers) are
// repeated once per micro-batch, rows moved to that micro-batch's, one
// micro-batch after the other on each device (the next begins on a device
// once the last ran there, so a device holds one micro-batch's
// activations at a time; with Strategy.micro_batches_in_flight, once the
// one that many before it ran there, the earlier micro-batch's ready
// instructions first: pipelining over devices that hold different
// layers); outputs without batch rows (weight gradients,
// partial losses) add up on the device (ComputeInstr.accumulate). The rest
// runs once: what the passes read but no batch row feeds (parameters,
// pulls) before them, what their sums feed (aggregation, updates) after
// them. Micro-batches differ by one row at most where their count does
// not divide the batch. Graphs whose passes read a sum over the whole batch (batch-norm
// statistics, a loss past such a sum) are refused: each micro-batch
// would need the others'.
#ifndef QUILT_SRC_PLANNER_MICRO_BATCHES_H_
#define QUILT_SRC_PLANNER_MICRO_BATCHES_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/quilt/v1/program.pb.h"
#include "src/graph/graph_index.h"
#include "src/planner/micro_batch_rows.h"

namespace quilt {

// Whether op `op` reads or writes batch rows: what runs once per
// micro-batch (the rest runs once per step).
bool WorksOnBatchRows(const GraphIndex& index, int op);

// The most micro-batches a program runs (its passes repeated once each).
inline constexpr int kMaxMicroBatches = 1024;

// The batch a strategy's placements split: the largest micro-batch's rows
// (the smaller micro-batches, where the count does not divide the batch,
// are placed at one row less), or the whole batch without accumulation.
// Errors: INVALID_ARGUMENT for a count below 0, above kMaxMicroBatches, or
// above the batch's rows.
absl::StatusOr<int64_t> MicroBatchRows(int64_t global_batch, int micro_batches);

// "4 micro-batches of 12 rows", "3 micro-batches of 15 or 16 rows".
std::string DescribeMicroBatches(int64_t global_batch, int micro_batches);

// "up to 2 in flight on each device" (Strategy.micro_batches_in_flight),
// or "" for 1 or less (one at a time).
std::string DescribeInFlight(int in_flight);

// Repeats `program` (lowered at MicroBatchRows's rows) over
// `micro_batches` micro-batches, making it a step of `global_batch` rows.
// Where the count does not divide the batch, `smaller` (lowered at one row
// less; else null) gives the passes of the smaller micro-batches, which run
// first; what runs once per step is `program`'s. The micro-batches in
// flight are the program's strategy's. Errors: INVALID_ARGUMENT
// naming the op whose pass needs a sum over the whole batch, ids/tags the
// program repeats, or a per-step instruction of `smaller` that `program`
// lacks.
absl::Status UnrollMicroBatches(const GraphIndex& index, int64_t global_batch, int micro_batches,
                                quilt::v1::DistributedProgram* program,
                                const quilt::v1::DistributedProgram* smaller);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_MICRO_BATCHES_H_
