#include "src/planner/node_subset_baselines.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <tuple>

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
  // Per prefix: its name's end, and all-reduce's split and parameter
  // servers' (empty where none fits).
  struct Prefix {
    std::string over;
    std::vector<int64_t> ring, ps;
  };
  std::vector<Prefix> prefixes;
  for (int k = 0; k + 1 < nodes; ++k) {
    for (int d : topo.NodeDevices(order[k])) devices.push_back(d);
    if (devices.size() < 2) continue;
    Prefix p;
    p.over = k == 0 ? std::string(" over the fastest node")
                    : absl::StrCat(" over the ", k + 1, " fastest nodes");
    absl::StatusOr<std::vector<int64_t>> ring = ProportionalSplitOver(load, topo, batch, devices);
    if (ring.ok()) p.ring = p.ps = *ring;
    // As the baselines split for parameter servers: their own split where
    // all-reduce's fits no batch or fills a device (sharded optimizer state
    // leaves more room).
    bool memory_bound = false;
    for (int d : devices) memory_bound |= ring.ok() && (*ring)[d] >= load.MaxRows(d);
    if (!ring.ok() || memory_bound) {
      absl::StatusOr<std::vector<int64_t>> ps =
          ParameterServerSplitOver(graph, topo, cost, load, batch, devices);
      if (ps.ok()) p.ps = *ps;
    }
    if (!p.ring.empty() || !p.ps.empty()) prefixes.push_back(std::move(p));
  }
  // (All-reduce's first: where the budget ends, those are simulated.)
  for (auto [method, prefix, split] : {std::tuple{quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE,
                                                  "dp-proportional-ring", &Prefix::ring},
                                       std::tuple{quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER,
                                                  "dp-proportional-ps", &Prefix::ps}}) {
    for (const Prefix& p : prefixes) {
      if ((p.*split).empty()) continue;
      const std::string name = prefix + p.over;
      out.push_back({name, DataParallelStrategy(graph, topo, p.*split, method, name), ""});
    }
  }
  return out;
}

}  // namespace quilt
