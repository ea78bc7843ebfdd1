#include "src/planner/group_nodes.h"

#include <algorithm>
#include <utility>

#include "src/common/hierarchical_layout.h"
#include "src/planner/lower.h"

namespace quilt {

// (Declared in lower.h, beside the lowering's other helpers.)
void SortByNode(const Topology& topo, std::vector<int>* devices) {
  std::sort(devices->begin(), devices->end(), [&](int a, int b) {
    return std::make_pair(topo.device(a).node, a) < std::make_pair(topo.device(b).node, b);
  });
}

GroupNodes NodesOfGroup(const Topology& topology, const std::vector<int>& devices) {
  GroupNodes g;
  for (size_t m = 0; m < devices.size(); ++m) {
    const int node = topology.device(devices[m]).node;
    auto it = std::find(g.nodes.begin(), g.nodes.end(), node);
    if (it == g.nodes.end()) {
      g.nodes.push_back(node);
      g.members.push_back(1);
      g.first.push_back(static_cast<int>(m));
    } else {
      ++g.members[it - g.nodes.begin()];
    }
  }
  return g;
}

int GroupNodes::MinMembers() const { return *std::min_element(members.begin(), members.end()); }

std::vector<double> ExchangeBytesPerS(const Topology& topology, const std::vector<int>& devices) {
  const GroupNodes g = NodesOfGroup(topology, devices);
  const int shards = LayoutHierarchical(static_cast<int>(g.nodes.size()), g.MinMembers(), 0).shards;
  std::vector<double> per_node;
  for (int node : g.nodes) per_node.push_back(topology.NodeBytesPerS(node, shards));
  if (NodeShares(per_node).empty()) return {};
  std::vector<double> out;
  for (int d : devices) {
    const int node = topology.device(d).node;
    out.push_back(per_node[std::find(g.nodes.begin(), g.nodes.end(), node) - g.nodes.begin()]);
  }
  return out;
}

}  // namespace quilt
