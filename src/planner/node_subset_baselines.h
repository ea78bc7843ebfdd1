// Data parallelism over the fastest nodes alone: starts for the HeteroG
// search besides the baselines, and plans its result is checked against
// in full. Where slow nodes sit behind slow links, or add more
// communication than computation, data parallelism over the fastest
// nodes can beat data parallelism over every device (gpt2 on a random
// 26-device cluster: over its 5 fastest nodes 821 ms per step, over all
// 827 ms), and a user would compare with that too. Nodes are ranked by
// their devices' mean modeled speed, fastest first; each prefix of 1 to
// all but one of them, of two devices or more, gets the speed-proportional
// split over its devices (ProportionalSplitOver) with ring all-reduce and
// with parameter servers (their own split, ParameterServerSplitOver, where
// all-reduce's fits no batch or fills a device), one collective per
// gradient, as the dp-proportional baselines have over every device. Only on clusters of up
// to kNodeSubsetDevices devices, where a simulation in full costs
// milliseconds to tenths of a second (the splits alone take a second on
// 64 devices).
#ifndef QUILT_SRC_PLANNER_NODE_SUBSET_BASELINES_H_
#define QUILT_SRC_PLANNER_NODE_SUBSET_BASELINES_H_

#include <cstdint>
#include <vector>

#include "src/cluster/topology.h"
#include "src/cost/cost_model.h"
#include "src/graph/graph.h"
#include "src/planner/baselines.h"

namespace quilt {

inline constexpr int kNodeSubsetDevices = 32;

// Named "dp-proportional-ring over the fastest node", "… over the K
// fastest nodes", then the same with "-ps"; those whose split fits no
// memory are left out (none on a single node, or on more than
// kNodeSubsetDevices devices).
std::vector<NamedStrategy> NodeSubsetBaselines(const Graph& graph, const Topology& topo,
                                               const CostModel& cost, const RowLoadModel& load,
                                               int64_t batch);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_NODE_SUBSET_BASELINES_H_
