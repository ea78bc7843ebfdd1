#include "src/planner/node_subset_baselines.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "absl/strings/str_cat.h"

namespace quilt {

std::vector<NamedStrategy> NodeSubsetBaselines(const Graph& graph, const Topology& topo,
                                               const CostModel& cost, const RowLoadModel& load,
                                               int64_t batch) {
  std::vector<NamedStrategy> out;
  const int nodes = topo.num_nodes();
  if (nodes < 2 || topo.num_devices() > kNodeSubsetDevices) return out;
  std::vector<double> mean(nodes, 0);
  for (int node = 0; node < nodes; ++node) {
    const std::vector<int>& devices = topo.NodeDevices(node);
    for (int d : devices) mean[node] += cost.speed(d).flops_per_s;
    mean[node] /= std::max<size_t>(1, devices.size());
  }
  std::vector<int> order(nodes);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return mean[a] > mean[b]; });
  std::vector<int> devices;
  std::vector<std::pair<std::string, std::vector<int64_t>>> splits;
  for (int k = 0; k + 1 < nodes; ++k) {
    for (int d : topo.NodeDevices(order[k])) devices.push_back(d);
    if (devices.size() < 2 || static_cast<int64_t>(devices.size()) > batch) continue;
    absl::StatusOr<std::vector<int64_t>> split = ProportionalSplitOver(load, topo, batch, devices);
    if (!split.ok()) continue;
    splits.push_back({k == 0 ? std::string(" over the fastest node")
                             : absl::StrCat(" over the ", k + 1, " fastest nodes"),
                      std::move(*split)});
  }
  // (All-reduce's first: where the budget ends, those are simulated.)
  for (auto [method, prefix] :
       {std::pair{quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, "dp-proportional-ring"},
        std::pair{quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER, "dp-proportional-ps"}}) {
    for (const auto& [over, split] : splits) {
      const std::string name = prefix + over;
      out.push_back({name, DataParallelStrategy(graph, topo, split, method, name), ""});
    }
  }
  return out;
}

}  // namespace quilt
