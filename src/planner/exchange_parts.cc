#include "src/planner/exchange_parts.h"

#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/common/hierarchical_layout.h"
#include "src/common/units.h"
#include "src/planner/group_nodes.h"

namespace quilt {

std::string ExchangePartsText(const quilt::v1::DistributedProgram& program,
                              const Topology& topology) {
  std::map<int64_t, const quilt::v1::DeviceGroup*> groups;
  for (const auto& g : program.groups()) groups[g.id()] = &g;
  std::set<int64_t> seen;
  int two_level = 0, by_bandwidth = 0;
  int64_t largest = -1;
  std::string parts;
  for (const auto& dp : program.devices()) {
    for (const auto& ins : dp.instructions()) {
      if (!ins.has_all_reduce()) continue;
      const auto& ar = ins.all_reduce();
      if (ar.algorithm() != quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE ||
          !seen.insert(ar.collective_id()).second) {
        continue;
      }
      ++two_level;
      auto g = groups.find(ar.group());
      if (g == groups.end() || g->second->node_bytes_per_s_size() != g->second->devices_size()) {
        continue;
      }
      std::vector<int> devices;
      for (const std::string& id : g->second->devices()) {
        const int d = topology.DeviceIndex(id);
        if (d >= 0) devices.push_back(d);
      }
      if (devices.size() != static_cast<size_t>(g->second->devices_size())) continue;
      const GroupNodes nodes = NodesOfGroup(topology, devices);
      std::vector<double> bandwidth;
      for (int m : nodes.first) bandwidth.push_back(g->second->node_bytes_per_s(m));
      const HierarchicalLayout layout = LayoutHierarchical(static_cast<int>(nodes.nodes.size()),
                                                           nodes.MinMembers(), ar.bytes() / 4);
      const std::vector<double> shares = ExchangeShares(bandwidth, layout.pieces);
      if (shares.empty()) continue;
      ++by_bandwidth;
      if (ar.bytes() <= largest) continue;
      largest = ar.bytes();
      parts.clear();
      for (size_t k = 0; k < nodes.nodes.size(); ++k) {
        absl::StrAppendFormat(&parts, "%s%s %.0f %%", k == 0 ? "" : ", ",
                              topology.node_id(nodes.nodes[k]), 100 * shares[k]);
      }
    }
  }
  if (by_bandwidth == 0) return "";
  return absl::StrCat(by_bandwidth, " of the ", two_level, " two-level all-reduces; the largest (",
                      HumanBytes(largest), "): ", parts);
}

}  // namespace quilt
