// The memory every plan of a training graph holds across the devices at
// the turn from the forward to the backward pass, by the simulator's
// memory model: the parameters, optimizer state and constants (resident,
// at least one copy each) and the tensors the forward pass produces (or
// the step reads in: inputs, labels) that the backward pass reads, which
// live from their production to their backward use. A plan keeps each
// batch row of those somewhere until its backward pass, so a batch whose
// floor exceeds the devices' memory in all fits no plan (about: devices
// that run their backward passes at different times hold their rows at
// different times). It is what the plan report's no-fit hint says.
#ifndef QUILT_SRC_PLANNER_MEMORY_FLOOR_H_
#define QUILT_SRC_PLANNER_MEMORY_FLOOR_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "proto/quilt/v1/plan.pb.h"
#include "src/cluster/topology.h"
#include "src/graph/graph.h"

namespace quilt {

struct MemoryFloor {
  // Parameters (frozen ones too), optimizer state and constants.
  int64_t resident_bytes = 0;
  // What the backward pass reads of the forward pass's tensors without a
  // batch dimension, and per batch row of those with one.
  int64_t fixed_bytes = 0;
  int64_t bytes_per_row = 0;

  int64_t BytesAt(int64_t batch) const {
    return resident_bytes + fixed_bytes + batch * bytes_per_row;
  }
  // The largest batch whose floor is within `capacity_bytes` (0 when not
  // even one row is; -1 when no tensor the backward pass reads has batch
  // rows and the rest fits: any batch).
  int64_t LargestBatch(int64_t capacity_bytes) const;
};

// The devices' memory in all (saturating: a spec's sizes may add up past
// int64), the capacity LargestBatch takes for a cluster.
int64_t TotalMemoryBytes(const Topology& topo);

// Errors: INVALID_ARGUMENT for a graph without a backward pass, or one
// whose ops read a tensor it does not declare.
absl::StatusOr<MemoryFloor> ComputeMemoryFloor(const Graph& training_graph);

// Where no baseline fits, the planner searches at batches up to this share
// (and at least one row) past the floor's largest batch, and says at once
// that none fits beyond (the floor is about, not proved: no plan was found
// past it by one row in the sweeps docs/BENCHMARKS.md records).
inline constexpr double kFloorSearchMargin = 0.02;

// Whether `batch` is past the floor's `largest` batch (LargestBatch) by
// more than that margin: always where not even one row fits (0), never
// where any batch does (-1).
bool PastTheFloorMargin(int64_t batch, int64_t largest);

// Where the report's batch is above its memory floor's largest: why, in
// sizes, as a clause that starts "; by the memory model" ("" otherwise).
std::string AboveTheMemoryFloor(const quilt::v1::PlanReport& report);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_MEMORY_FLOOR_H_
