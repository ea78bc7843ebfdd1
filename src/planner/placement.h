// Where every op of a training graph runs under a Strategy: the devices of
// its op group and, for ops on the batch, the rows of the global batch each
// device computes (contiguous slices in proportion to the replica counts).
// Also where each parameter lives (its update's devices, or its parameter
// servers) and how its gradient is aggregated. The lookups of a table
// aggregated by sparse lookup run on each of the table's devices over the
// whole batch.
#ifndef QUILT_SRC_PLANNER_PLACEMENT_H_
#define QUILT_SRC_PLANNER_PLACEMENT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/quilt/v1/strategy.pb.h"
#include "src/cluster/topology.h"
#include "src/graph/graph.h"
#include "src/graph/graph_index.h"

namespace quilt {

struct Slice {
  int device = 0;
  // Rows [begin, end) of the global batch; 0, 0 = the op is not on the batch.
  int64_t begin = 0, end = 0;
};

struct ParamPlacement {
  quilt::v1::AggregationMethod method = quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE;
  // Parameter servers (PS) or the devices holding replicas (all-reduce).
  std::vector<int> devices;
  // PS: rows [begin, end) of dim 0 on each server (aligned with devices).
  std::vector<std::pair<int64_t, int64_t>> shards;
  int bucket = 0;
  int64_t partition_bytes = 0;  // all-reduce slices of at most this (0 = whole)
};

struct Placement {
  int64_t global_batch = 0;
  // Per op (graph order): the group it belongs to and where it runs.
  std::vector<int> group_of_op;
  std::vector<std::vector<Slice>> op_slices;
  // Per trainable parameter (by tensor name).
  std::map<std::string, ParamPlacement> params;
  // Group placements in strategy order: (device, replicas).
  std::vector<std::vector<std::pair<int, int>>> groups;
  // Per group, the split of its weight-gradient ops
  // (GroupPlacement.weight_gradient_replicas; empty: as `groups`).
  std::vector<std::vector<std::pair<int, int>>> weight_gradient_groups;
};

// Batch rows of each device for replica counts (device, r): B · r / R
// rounded down, the rows left over one each to the devices with the largest
// remainders (ties: the most replicas, then the earlier), as contiguous
// slices in the given order.
// A device with no rows gets no slice.
std::vector<Slice> SplitBatch(const std::vector<std::pair<int, int>>& replicas, int64_t batch);

// Errors: INVALID_ARGUMENT when the strategy names unknown devices or ops,
// leaves a forward op without a group, has no replicas in a group, or
// aggregates a parameter that is no embedding table by sparse lookup.
absl::StatusOr<Placement> Place(const Graph& graph, const quilt::v1::Strategy& strategy,
                                const Topology& topology, int64_t global_batch);
// The same for the graph `index` resolves (built once by the caller).
absl::StatusOr<Placement> Place(const GraphIndex& index, const quilt::v1::Strategy& strategy,
                                const Topology& topology, int64_t global_batch);

// Where micro-batches differ by a row (micro_batches.h), the smaller ones'
// placement, from the larger ones' (`larger`, of strategy `s`): every
// group's devices keep the rows `larger` gives them but for one device of
// the most rows, which gives one up. (The strategy's own split at one row
// less is not that: B · r / R with its remainders is not monotone in B, so
// it can give a device rows of a group the larger split gives none, whose
// gradients would miss the step's aggregation.)
absl::StatusOr<Placement> PlaceSmallerMicroBatches(const GraphIndex& index,
                                                   const quilt::v1::Strategy& s,
                                                   const Topology& topology,
                                                   const Placement& larger);

// The op whose group an op belongs to: its forward op, or itself.
const std::string& GroupKey(const Op& op);

// Whether Place splits op `op` by rows of the batch: a tensor it reads or
// writes carries the batch (else it runs whole on each of its devices).
bool SplitByRows(const GraphIndex& ix, int op);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_PLACEMENT_H_
