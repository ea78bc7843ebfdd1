#include "bench/node_subsets.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "src/cluster/topology.h"
#include "src/cost/cost_model.h"
#include "src/planner/plan.h"

namespace quilt {
namespace {

// The mean of its devices' modeled speeds (the cost model's).
double MeanSpeed(const quilt::v1::NodeInfo& node) {
  if (node.devices().empty()) return 0;
  double sum = 0;
  for (const auto& d : node.devices()) sum += SpeedOf(d).flops_per_s;
  return sum / node.devices_size();
}

}  // namespace

std::vector<quilt::v1::ClusterSpec> FastestNodePrefixes(const quilt::v1::ClusterSpec& spec) {
  std::vector<int> order(spec.nodes_size());
  for (int i = 0; i < spec.nodes_size(); ++i) order[i] = i;
  // (Stable: nodes of one speed keep the spec's order.)
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return MeanSpeed(spec.nodes(a)) > MeanSpeed(spec.nodes(b));
  });
  std::vector<quilt::v1::ClusterSpec> out;
  for (int k = 1; k < spec.nodes_size(); ++k) {
    quilt::v1::ClusterSpec sub = spec;
    sub.clear_nodes();
    sub.clear_pair_links();
    absl::flat_hash_set<std::string> kept;
    for (int i = 0; i < k; ++i) {
      *sub.add_nodes() = spec.nodes(order[i]);
      for (const auto& d : spec.nodes(order[i]).devices()) kept.insert(d.id());
    }
    for (const auto& link : spec.pair_links()) {
      if (kept.count(link.src_device()) && kept.count(link.dst_device())) {
        *sub.add_pair_links() = link;
      }
    }
    sub.set_name(spec.name() + "-fastest-" + std::to_string(k));
    out.push_back(std::move(sub));
  }
  return out;
}

nlohmann::json BestNodeSubsetBaseline(const Graph& training_graph,
                                      const quilt::v1::ClusterSpec& spec, int64_t global_batch) {
  nlohmann::json best = nullptr;
  for (const quilt::v1::ClusterSpec& sub : FastestNodePrefixes(spec)) {
    absl::StatusOr<Topology> topo = Topology::Build(sub);
    if (!topo.ok()) continue;
    // (Plan simulates a proportional baseline's even counterpart with it and
    // reports the faster split under the proportional name: the two cover
    // all four. A single device has only the single-device baseline.)
    for (const char* strategy : {"dp-proportional-ring", "dp-proportional-ps", "single-device"}) {
      if ((topo->num_devices() == 1) != (std::string(strategy) == "single-device")) continue;
      PlanOptions po;
      po.global_batch = global_batch;
      po.strategy = strategy;
      absl::StatusOr<PlanResult> plan = Plan(training_graph, *topo, po);
      if (!plan.ok()) continue;
      for (const auto& e : plan->report.estimates()) {
        if (e.name() != strategy || !e.feasible()) continue;
        if (best.is_null() || e.step_time_s() < best["step_s"].get<double>()) {
          best = {{"nodes", sub.nodes_size()},
                  {"devices", topo->num_devices()},
                  {"strategy", e.name()},
                  {"step_s", e.step_time_s()}};
        }
      }
    }
  }
  return best;
}

}  // namespace quilt
