// Lower bounds on any plan's step time, from computation alone (no
// communication, no waiting), for the plan report's "vs lower bound":
// - FLOPs: the training graph's forward and backward FLOPs over the
//   devices' summed peak FLOP/s (for comparison; a measured op-time table
//   may beat the peak rate it assumes).
// - Balance: every op's batch rows (an op without the batch: the op once)
//   shared out over the devices as a linear program would, each row at the
//   least per-row time the cost model gives that op on that device; the
//   step is at least the busiest device's share. It counts what the FLOP
//   bound cannot: memory-bound ops, measured op times, and that one op runs
//   relatively faster on some devices. Any plan computes each row of each
//   op somewhere, so none beats it. The bound is evaluated from the
//   program's dual (weights per device), so it stays a bound even when the
//   solver stops short (it has a second, and programs of more than 200k
//   columns are not solved: weights inverse to each device's whole work
//   are used).
#ifndef QUILT_SRC_PLANNER_LOWER_BOUND_H_
#define QUILT_SRC_PLANNER_LOWER_BOUND_H_

#include <cstdint>
#include <vector>

#include "src/cluster/topology.h"
#include "src/cost/cost_model.h"
#include "src/graph/graph.h"

namespace quilt {

double FlopsLowerBound(const Graph& graph, const CostModel& cost, const Topology& topo,
                       int64_t batch);

// `work[o][k]`: seconds op o's whole share (all its rows) takes on one
// device of class k; `devices[k]`: how many devices class k has. The
// least T such that the ops' work, split at will over the classes, leaves
// no device more than T (a lower bound on it, within the solver's
// tolerance below). 0 for no ops or no devices.
double BalanceBound(const std::vector<std::vector<double>>& work, const std::vector<int>& devices);

double BalanceLowerBound(const Graph& graph, const CostModel& cost, const Topology& topo,
                         int64_t batch);

// The balance bound (what plan reports call the compute lower bound).
double ComputeLowerBound(const Graph& graph, const CostModel& cost, const Topology& topo,
                         int64_t batch);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_LOWER_BOUND_H_
