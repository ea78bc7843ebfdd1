// The data-parallel baselines every plan is compared with (DESIGN §5):
// single device (the fastest), and data parallelism with an even batch split
// and with a speed-proportional split, each with ring all-reduce and with
// parameter servers. The proportional split gives each device rows in
// proportion to its speed; when that would overflow a device's memory, the
// split is solved as a linear program (COIN-OR CLP): minimize the step's
// compute time subject to every device's memory.
#ifndef QUILT_SRC_PLANNER_BASELINES_H_
#define QUILT_SRC_PLANNER_BASELINES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/quilt/v1/strategy.pb.h"
#include "src/cluster/topology.h"
#include "src/cost/cost_model.h"
#include "src/graph/graph.h"

namespace quilt {

struct NamedStrategy {
  std::string name;
  quilt::v1::Strategy strategy;
  // Set when the strategy cannot be built (e.g. no split fits memory).
  std::string infeasible_reason;
};

// Per-device compute time and memory as affine functions of its batch rows
// (fitted on the cost model): time = t0 + t1·b, memory = m0 + m1·b.
struct DeviceLoadModel {
  double t0 = 0, t1 = 0;
  double m0 = 0, m1 = 0;
};
std::vector<DeviceLoadModel> FitLoadModels(const Graph& graph, const CostModel& cost,
                                           const Topology& topo);

// Rows per device summing to `batch`, proportional to speed; solved as an LP
// when memory caps bind. Errors: FAILED_PRECONDITION when no split fits.
absl::StatusOr<std::vector<int64_t>> ProportionalSplit(const std::vector<DeviceLoadModel>& load,
                                                       const Topology& topo, int64_t batch,
                                                       bool* used_lp);

// Forward ops (the op groups of a data-parallel strategy).
std::vector<std::string> ForwardOps(const Graph& graph);

// One group with `rows[d]` replicas per device (0 = unused).
quilt::v1::Strategy DataParallelStrategy(const Graph& graph, const Topology& topo,
                                         const std::vector<int64_t>& rows,
                                         quilt::v1::AggregationMethod method,
                                         const std::string& name);

std::vector<NamedStrategy> Baselines(const Graph& graph, const Topology& topo,
                                     const CostModel& cost, int64_t batch);

// 3 × forward FLOPs of the global batch / Σ device FLOP/s.
double ComputeLowerBound(const Graph& graph, const CostModel& cost, const Topology& topo,
                         int64_t batch);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_BASELINES_H_
