// Where a batch tensor's samples lie along its batch dim. A dim of batch
// multiple m holds B·m rows; a reshape that merges the batch with dims
// outside it (the sequence-first [S, B, E] → [S·B, E] of PyTorch's
// attention) interleaves the samples: sample b's rows are b, B + b, … and
// not one block. Each replica reshaping its own rows computes the same
// values, so splitting such a tensor's batch over devices is exact; moving
// a range of samples between devices is not a range of its rows.
// MarkInterleavedBatches sets TensorInfo::interleaved_batch on every such
// tensor (the lowering refuses to re-split them), following reshapes
// (Reshape, Flatten, Squeeze, Unsqueeze) by row-major order and keeping the
// layout through every other op; an op that changes a batch multiple some
// other way (a concat along the batch) interleaves.
#ifndef QUILT_SRC_GRAPH_BATCH_LAYOUT_H_
#define QUILT_SRC_GRAPH_BATCH_LAYOUT_H_

#include "src/graph/graph.h"

namespace quilt {

// Idempotent; a graph with a cycle is left unmarked (validation names it).
void MarkInterleavedBatches(Graph* graph);

}  // namespace quilt

#endif  // QUILT_SRC_GRAPH_BATCH_LAYOUT_H_
