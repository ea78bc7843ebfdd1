// Embedding tables whose gradient can be gathered rather than summed
// (AGGREGATION_METHOD_SPARSE_LOOKUP): trainable parameters that a Gather
// along axis 0 reads as its table, with ids that carry the batch. The
// lookups' part of such a gradient is a scatter of the batch's rows, so
// every replica can compute it for the whole batch from every row's ids
// and the other replicas' row gradients (bytes in proportion to the
// batch's tokens) instead of all-reducing a table-sized sum. A tied table
// still all-reduces its other part (the output projection's, table-sized),
// but that sum is complete early in the backward pass and overlaps it.
#ifndef QUILT_SRC_PLANNER_LOOKUPS_H_
#define QUILT_SRC_PLANNER_LOOKUPS_H_

#include <map>
#include <string>
#include <vector>

#include "proto/quilt/v1/strategy.pb.h"
#include "src/graph/graph_index.h"

namespace quilt {

// Table parameter name → the GatherGrad ops (indices, graph order) of its
// lookups by per-sample ids (lookups whose ids interleave the samples
// along their rows, time-major, left out). A table also read another way (an output
// projection tied to it) is included: those parts of its gradient are
// summed apart. Frozen parameters are not.
std::map<std::string, std::vector<int>> LookupTables(const GraphIndex& index);

// `strategy` with the tables worth trying gathered aggregated by sparse
// lookup (their servers, buckets and slices dropped), named in *tables:
// those whose lookups' row gradients for `batch` samples take fewer bytes
// than the table (what a replica receives at most, against about twice
// the table that a ring all-reduce moves per device; a rough cut that
// leaves out tables of a few rows, such as token types, whose rows would
// cost more than their sum; the simulation decides). None when *tables
// is empty.
quilt::v1::Strategy GatherLookups(const GraphIndex& index, const quilt::v1::Strategy& strategy,
                                  int64_t batch, std::vector<std::string>* tables);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_LOOKUPS_H_
