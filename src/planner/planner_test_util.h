// Helpers of the planner's tests: a cluster of two nodes with two devices
// each, fast and slow (TwoNodes, TwoNodesWithMemory); a zoo model's training graph with its
// topology and cost model (World, Make), on a shipped cluster
// (OnShippedCluster); an estimate of a plan report by name (FindEstimate);
// lowering that also validates and
// simulates (LowerChecked); and a strategy that puts the transformer's tied
// embedding lookup on one device and everything else on all four
// (TiedSplit); one whose first op's devices change with the rows
// (FirstOpsMoveWithRows); a graph whose partial sum one op reads as is and another
// needs summed (PartialReadThenSummed); data parallelism with ring
// all-reduce over every device (EvenRing); a seeded random strategy
// (RandomStrategy).
#ifndef QUILT_SRC_PLANNER_PLANNER_TEST_UTIL_H_
#define QUILT_SRC_PLANNER_PLANNER_TEST_UTIL_H_

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/quilt/v1/plan.pb.h"
#include "src/cluster/cluster_spec.h"
#include "src/common/status_matchers.h"
#include "src/cost/cost_model.h"
#include "src/graph/graph_builder.h"
#include "src/graph/op_registry.h"
#include "src/graph/zoo_training.h"
#include "src/planner/baselines.h"
#include "src/planner/lower.h"
#include "src/planner/program_validator.h"
#include "src/sim/simulator.h"

namespace quilt::testing {

// A GPU "NODE/gpu:INDEX" on `node` of `peak_flops` (efficiency 0.4),
// 800 GB/s of memory bandwidth and 16 GiB.
inline void AddTestGpu(quilt::v1::NodeInfo* node, int index, double peak_flops) {
  auto* dev = node->add_devices();
  dev->set_id(node->node_id() + "/gpu:" + std::to_string(index));
  dev->set_kind(quilt::v1::DEVICE_KIND_GPU);
  dev->set_index(index);
  dev->set_peak_fp32_flops_per_s(peak_flops);
  dev->set_efficiency(0.4);
  dev->set_memory_bandwidth_bytes_per_s(8e11);
  dev->set_memory_bytes(int64_t{16} << 30);
}

// Two nodes: two fast devices, two slow ones.
inline quilt::v1::ClusterSpec TwoNodes() {
  quilt::v1::ClusterSpec spec;
  spec.set_name("two-nodes");
  for (int n = 0; n < 2; ++n) {
    auto* node = spec.add_nodes();
    node->set_node_id(n == 0 ? "fast" : "slow");
    for (int d = 0; d < 2; ++d) AddTestGpu(node, d, n == 0 ? 1.4e13 : 9e12);
    node->mutable_intra_node_link()->set_bandwidth_bytes_per_s(1.2e10);
    node->mutable_nic()->set_bandwidth_bytes_per_s(1.25e9);
  }
  return spec;
}

// TwoNodes with each device's memory: bytes[d] for device d in the
// spec's order, or bytes[0] for every one.
inline quilt::v1::ClusterSpec TwoNodesWithMemory(const std::vector<int64_t>& bytes) {
  quilt::v1::ClusterSpec spec = TwoNodes();
  size_t d = 0;
  for (auto& node : *spec.mutable_nodes()) {
    for (auto& dev : *node.mutable_devices()) {
      dev.set_memory_bytes(bytes[bytes.size() == 1 ? 0 : d++]);
    }
  }
  return spec;
}

struct World {
  Graph graph;
  Topology topo;
  std::unique_ptr<CostModel> cost;
};

// The topology of `spec` and the cost model of `graph` on it (the graph
// and the topology must outlive the model).
inline void TopologyAndCost(const quilt::v1::ClusterSpec& spec, const Graph& graph, Topology* topo,
                            std::unique_ptr<CostModel>* cost) {
  absl::StatusOr<Topology> built = Topology::Build(spec);
  EXPECT_THAT(built.status(), IsOk());
  if (built.ok()) *topo = std::move(*built);
  absl::StatusOr<CostModel> model = CostModel::Create(&graph, topo);
  EXPECT_THAT(model.status(), IsOk());
  if (model.ok()) *cost = std::make_unique<CostModel>(std::move(*model));
}

inline std::unique_ptr<World> Make(const std::string& model,
                                   const quilt::v1::ClusterSpec& spec = TwoNodes()) {
  auto s = std::make_unique<World>();
  absl::StatusOr<Graph> g = zoo::ZooTrainingGraph(model);
  EXPECT_THAT(g.status(), IsOk());
  if (g.ok()) s->graph = std::move(*g);
  TopologyAndCost(spec, s->graph, &s->topo, &s->cost);
  return s;
}

// A zoo model on a cluster of config/clusters, e.g. "hap_cluster" (null
// if the cluster does not load; the test needs the clusters as data).
inline std::unique_ptr<World> OnShippedCluster(const std::string& model,
                                               const std::string& cluster) {
  absl::StatusOr<quilt::v1::ClusterSpec> spec =
      LoadClusterSpec("config/clusters/" + cluster + ".textproto");
  EXPECT_THAT(spec.status(), IsOk());
  if (!spec.ok()) return nullptr;
  return Make(model, *spec);
}

// The estimate named `name` in a plan report (null when it has none).
inline const quilt::v1::StrategyEstimate* FindEstimate(const quilt::v1::PlanReport& report,
                                                       const std::string& name) {
  for (const auto& e : report.estimates()) {
    if (e.name() == name) return &e;
  }
  return nullptr;
}

// Lowers, validates and simulates; returns the program.
inline quilt::v1::DistributedProgram LowerChecked(const World& s,
                                                  const quilt::v1::Strategy& strategy,
                                                  int64_t batch) {
  absl::StatusOr<quilt::v1::DistributedProgram> p =
      Lower(s.graph, strategy, s.topo, s.cost.get(), batch);
  EXPECT_THAT(p.status(), IsOk());
  if (!p.ok()) return {};
  EXPECT_THAT(ValidateProgram(*p, s.graph, s.topo), IsOk());
  absl::StatusOr<SimResult> r = Simulate(*p, s.graph, s.topo, *s.cost);
  EXPECT_THAT(r.status(), IsOk());
  if (r.ok()) {
    EXPECT_GT(r->step_time_s, 0);
  }
  return *p;
}

// The transformer's tied embedding: its lookup alone on fast/gpu:0, every
// other op on all four devices. The embedding's gradient sums the lookup's
// part (whole, on fast/gpu:0) and the output projection's and the second
// lookup's parts (partial sums on all four devices).
inline quilt::v1::Strategy TiedSplit(const Graph& g, const Topology& topo) {
  quilt::v1::Strategy s;
  s.set_name("tied-split");
  const std::vector<std::string> fwd = ForwardOps(g);
  auto* one = s.add_groups();
  one->set_group(0);
  one->add_ops(fwd[0]);
  auto* r = one->add_replicas();
  r->set_device("fast/gpu:0");
  r->set_replicas(1);
  auto* all = s.add_groups();
  all->set_group(1);
  for (size_t i = 1; i < fwd.size(); ++i) all->add_ops(fwd[i]);
  for (int d = 0; d < topo.num_devices(); ++d) {
    auto* rr = all->add_replicas();
    rr->set_device(topo.device(d).id);
    rr->set_replicas(1);
  }
  for (const ParameterSpec& p : g.parameters) {
    auto* a = s.add_aggregations();
    a->set_parameter(p.tensor);
    a->set_method(quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE);
  }
  return s;
}

// Ring all-reduce for the parameter of every update op (trained
// parameters only, unlike g.parameters, which lists frozen ones too).
inline void RingForEveryUpdate(const Graph& g, quilt::v1::Strategy* s) {
  for (const Op& op : g.ops) {
    if (!OpRegistry::Global().Find(op.type)->is_update) continue;
    auto* a = s->add_aggregations();
    a->set_parameter(op.inputs[0]);
    a->set_method(quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE);
  }
}

// Forward ops [0, first) on devices `a` and `b` (a replica each), every
// other forward op on `rest` alone; ring all-reduce. As micro-batches of 1
// and 2 rows, both run the first ops in the larger micro-batches, `a` alone
// in the smaller ones (placed from the larger's rows, the last device of
// the most gives one up): where the rest reads a weight of the first ops
// (a tied embedding, a shared layer), the two sizes fetch it from
// different holders (`rest` beside `b` on its node, which prefers `b` to
// `a` where both hold it), or one keeps it on `rest` (`rest` == `b`) where
// the other fetches it.
inline quilt::v1::Strategy FirstOpsMoveWithRows(const Graph& g, size_t first, const std::string& a,
                                                const std::string& b, const std::string& rest) {
  quilt::v1::Strategy s;
  s.set_name("first-ops-move");
  const std::vector<std::string> fwd = ForwardOps(g);
  auto* head = s.add_groups();
  head->set_group(0);
  for (size_t i = 0; i < first; ++i) head->add_ops(fwd[i]);
  for (const auto& [device, replicas] : {std::pair{a, 1}, std::pair{b, 1}}) {
    auto* r = head->add_replicas();
    r->set_device(device);
    r->set_replicas(replicas);
  }
  auto* others = s.add_groups();
  others->set_group(1);
  for (size_t i = first; i < fwd.size(); ++i) others->add_ops(fwd[i]);
  others->add_replicas()->set_device(rest);
  others->mutable_replicas(0)->set_replicas(1);
  RingForEveryUpdate(g, &s);
  return s;
}

// The forward ops in contiguous stages of like size, stage k on device
// devices[k] alone (layers over devices: a pipeline); ring all-reduce.
inline quilt::v1::Strategy Stages(const Graph& g, const Topology& topo,
                                  const std::vector<int>& devices) {
  quilt::v1::Strategy s;
  s.set_name("stages");
  const std::vector<std::string> fwd = ForwardOps(g);
  const size_t n = devices.size();
  for (size_t k = 0; k < n; ++k) {
    auto* grp = s.add_groups();
    grp->set_group(static_cast<int>(k));
    for (size_t i = fwd.size() * k / n; i < fwd.size() * (k + 1) / n; ++i) grp->add_ops(fwd[i]);
    auto* r = grp->add_replicas();
    r->set_device(topo.device(devices[k]).id);
    r->set_replicas(1);
  }
  RingForEveryUpdate(g, &s);
  return s;
}

// x [B, 4] → t = ReduceSum over the rows (a partial sum when the rows are
// split) → n = Neg(t) (linear: reads the partial as is) and r = Relu(t)
// (needs the sum); no parameters, on TwoNodes.
inline std::unique_ptr<World> PartialReadThenSummed() {
  auto w = std::make_unique<World>();
  GraphBuilder b(&w->graph);
  EXPECT_THAT(b.AddInput("x", DType::kF32, Shape({Dim::Batch(), Dim::Fixed(4)})).status(), IsOk());
  Attrs over_rows;
  over_rows.SetInts("axes", {0});
  over_rows.SetInt("keepdims", 0);
  EXPECT_THAT(b.Add("ReduceSum", {"x"}, over_rows, "t").status(), IsOk());
  EXPECT_THAT(b.Add("Neg", {"t"}, {}, "n").status(), IsOk());
  EXPECT_THAT(b.Add("Relu", {"t"}, {}, "r").status(), IsOk());
  w->graph.has_backward = true;  // no parameters: lowered as it is
  TopologyAndCost(TwoNodes(), w->graph, &w->topo, &w->cost);
  return w;
}

// A seeded random strategy: contiguous op groups (1 to `most_groups`),
// each on a random device subset with random replica counts (1 to
// `most_replicas`; or one device), each group's parameters aggregated by a
// random method.
inline quilt::v1::Strategy RandomStrategy(const Graph& g, const Topology& topo, uint64_t seed,
                                          int most_groups = 3, int most_replicas = 3) {
  std::mt19937_64 rng(seed);
  const std::vector<std::string> fwd = ForwardOps(g);
  const int groups = 1 + static_cast<int>(rng() % most_groups);
  quilt::v1::Strategy s;
  s.set_name("random");
  std::map<std::string, int> group_of;
  for (int k = 0; k < groups; ++k) {
    auto* grp = s.add_groups();
    grp->set_group(k);
    for (size_t i = fwd.size() * k / groups; i < fwd.size() * (k + 1) / groups; ++i) {
      grp->add_ops(fwd[i]);
      group_of[fwd[i]] = k;
    }
    std::vector<int> devices;
    for (int d = 0; d < topo.num_devices(); ++d) {
      if (rng() % 2 == 0) devices.push_back(d);
    }
    if (devices.empty()) devices.push_back(static_cast<int>(rng() % topo.num_devices()));
    for (int d : devices) {
      auto* r = grp->add_replicas();
      r->set_device(topo.device(d).id);
      r->set_replicas(1 + static_cast<int>(rng() % most_replicas));
    }
  }
  for (const Op& op : g.ops) {
    if (!OpRegistry::Global().Find(op.type)->is_update) continue;
    auto* a = s.add_aggregations();
    a->set_parameter(op.inputs[0]);
    switch (rng() % 4) {
      case 0:
        a->set_method(quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE);
        break;
      case 1:
        a->set_method(quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE);
        break;
      case 2:
        a->set_method(quilt::v1::AGGREGATION_METHOD_TREE_ALLREDUCE);
        break;
      default:
        a->set_method(quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER);
        const int first = static_cast<int>(rng() % topo.num_devices());
        a->add_servers(topo.device(first).id);
        if (rng() % 2 == 0 && topo.num_devices() > 1) {
          a->add_servers(topo.device((first + 1) % topo.num_devices()).id);
        }
    }
  }
  return s;
}

inline quilt::v1::Strategy EvenRing(const World& w) {
  return DataParallelStrategy(w.graph, w.topo, std::vector<int64_t>(w.topo.num_devices(), 1),
                              quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, "dp");
}

}  // namespace quilt::testing

#endif  // QUILT_SRC_PLANNER_PLANNER_TEST_UTIL_H_
