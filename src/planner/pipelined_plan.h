// Pipelining a plan that holds the batch at once. Where the plan puts
// layers on different devices, each device idles while the others work
// on the batch, or waits for the activations sent between them (its
// busiest device's idle time and exposed communication in full
// simulation); the same placements run over micro-batches with several in
// flight (Strategy.micro_batches, micro_batches_in_flight) let a device
// begin the next micro-batch while later devices work on the earlier one
// and the transfers run (micro-batches that exchange rows, as gathered
// embedding gradients do, overlap that too). The planner simulates in
// full, in both execution orders, 2 micro-batches with 2 in flight, and
// only where that fit and gained, or overflowed, 4 with 2 (and 4 with 4
// on small clusters); never more micro-batches than rows. The fastest
// that fits is kept where it beats the plan. Graphs whose passes
// read a sum over the whole batch (batch norm) cannot run as
// micro-batches and are not tried.
#ifndef QUILT_SRC_PLANNER_PIPELINED_PLAN_H_
#define QUILT_SRC_PLANNER_PIPELINED_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "proto/quilt/v1/plan.pb.h"
#include "src/cluster/topology.h"
#include "src/graph/graph_index.h"
#include "src/planner/baselines.h"

namespace quilt {

// A plan is worth pipelining where its busiest device's compute leaves at
// least this share of its step (idle or waiting on communication).
inline constexpr double kPipelineGainShare = 0.05;

// Whether `plan` (simulated in full) may gain from being pipelined: it
// fits, runs its batch at once, and its busiest device's compute is
// under 1 − kPipelineGainShare of its step.
bool WorthPipelining(const quilt::v1::StrategyEstimate& plan);

// The pipelined forms of `plan` at `batch` rows over `micro_batches` (2
// or 4; none where the batch has fewer rows), named NAME+pipelineK#I: 2
// micro-batches with 2 in flight; 4 with 2, and with 4 on a `small`
// cluster (on a large one each form is seconds of simulation).
std::vector<NamedStrategy> PipelinedForms(const quilt::v1::Strategy& plan, const std::string& name,
                                          int64_t batch, int micro_batches, bool small);

// "2 micro-batches of 8 rows, up to 2 in flight on each device".
std::string DescribePipelining(const quilt::v1::Strategy& plan, int64_t batch);

// Why the graph's passes cannot run as micro-batches (the lowering's
// message naming the op that reads a sum over the whole batch), or "" where
// they can: its single-device program lowered over two micro-batches of one
// row.
std::string MicroBatchesRefused(const GraphIndex& index, const Topology& topology);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_PIPELINED_PLAN_H_
