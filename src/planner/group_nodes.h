// The nodes a device group spans, and the per-member node bandwidths its
// two-level all-reduce sizes the parts across nodes by: what the lowering
// writes into a program's groups, the validator checks and the
// explanation reads.
#ifndef QUILT_SRC_PLANNER_GROUP_NODES_H_
#define QUILT_SRC_PLANNER_GROUP_NODES_H_

#include <vector>

#include "src/cluster/topology.h"

namespace quilt {

// A device group's nodes in order of first appearance: per node, its
// topology index, how many of the group's devices it holds, and the
// position in the group of the first of them.
struct GroupNodes {
  std::vector<int> nodes, members, first;
  int MinMembers() const;
};
GroupNodes NodesOfGroup(const Topology& topology, const std::vector<int>& devices);

// The two-level all-reduce over `devices` (a group, non-empty): per member,
// its node's bandwidth to the other nodes in the exchange across them
// (Topology::NodeBytesPerS, the layout's shard owners sending at once),
// which sizes the nodes' parts (src/common/hierarchical_layout.h); empty
// where the parts are equal anyway (fewer than three nodes, or figures
// alike). What a lowered program's groups carry.
std::vector<double> ExchangeBytesPerS(const Topology& topology, const std::vector<int>& devices);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_GROUP_NODES_H_
