// Weight-gradient rows moved off a plan's busiest devices: where whole
// samples cannot balance a group's devices (32 rows over devices of
// speeds 1.7 : 1 : 0.9), each group's weight-gradient ops (weight_gradients.h)
// may sum some of a slow device's rows on a faster one. From the per-device
// work of the plan's full simulation and each group's per-row
// weight-gradient time on each device (the cost model), rows move one at a
// time from the device with the most work to the group device that ends
// with the least, while that lowers the most; the moves leave out the
// transfers of the rows' activations and output gradients, so the caller
// simulates the candidates in full and keeps one only when faster.
#ifndef QUILT_SRC_PLANNER_WEIGHT_GRADIENT_BALANCE_H_
#define QUILT_SRC_PLANNER_WEIGHT_GRADIENT_BALANCE_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/quilt/v1/strategy.pb.h"
#include "src/cluster/topology.h"
#include "src/cost/cost_model.h"
#include "src/graph/graph_index.h"

namespace quilt {

struct BalancedWeightGradients {
  quilt::v1::Strategy strategy;
  // What it moves, for the explanation: "N rows of G groups' weight
  // gradients off DEVICE (…)".
  std::string moves;
};

// Candidates for `plan` (none when no move lowers the busiest device's
// work): the greedy moves in full, half of them, and the same with moves
// only between devices of one node. `busy_s`: seconds of work per device
// id in the plan's full simulation.
absl::StatusOr<std::vector<BalancedWeightGradients>> BalanceWeightGradients(
    const GraphIndex& index, const quilt::v1::Strategy& plan, const Topology& topology,
    const CostModel& cost, int64_t global_batch, const std::map<std::string, double>& busy_s);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_WEIGHT_GRADIENT_BALANCE_H_
