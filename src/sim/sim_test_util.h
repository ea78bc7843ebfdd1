// Test helpers for the simulator's tests: cluster specs of identical
// nodes, a builder of hand-written DistributedPrograms, and a graph, its
// topology and cost model in one place.
#ifndef QUILT_SRC_SIM_SIM_TEST_UTIL_H_
#define QUILT_SRC_SIM_SIM_TEST_UTIL_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/sim/simulator.h"

namespace quilt {

using quilt::v1::DistributedProgram;
using quilt::v1::Instruction;

struct NodeShape {
  int devices = 1;
  double fabric_bw = 1e11, fabric_lat = 2e-6;
  double nic_bw = 1e10, nic_lat = 1e-5;
};

inline quilt::v1::ClusterSpec Spec(const std::vector<NodeShape>& nodes,
                                   int64_t memory = int64_t{1} << 34) {
  quilt::v1::ClusterSpec spec;
  spec.set_name("test");
  for (size_t n = 0; n < nodes.size(); ++n) {
    auto* node = spec.add_nodes();
    node->set_node_id("n" + std::to_string(n));
    node->set_hostname(node->node_id());
    for (int d = 0; d < nodes[n].devices; ++d) {
      auto* dev = node->add_devices();
      dev->set_id(node->node_id() + "/gpu:" + std::to_string(d));
      dev->set_kind(quilt::v1::DEVICE_KIND_GPU);
      dev->set_model("test gpu");
      dev->set_index(d);
      dev->set_peak_fp32_flops_per_s(1e13);
      dev->set_efficiency(1);
      dev->set_memory_bandwidth_bytes_per_s(1e12);
      dev->set_memory_bytes(memory);
    }
    node->mutable_intra_node_link()->set_bandwidth_bytes_per_s(nodes[n].fabric_bw);
    node->mutable_intra_node_link()->set_latency_s(nodes[n].fabric_lat);
    node->mutable_nic()->set_bandwidth_bytes_per_s(nodes[n].nic_bw);
    node->mutable_nic()->set_latency_s(nodes[n].nic_lat);
  }
  return spec;
}

// A program under construction: instructions appended per device with
// increasing ids.
class ProgramBuilder {
 public:
  ProgramBuilder(const Topology& topo, int64_t batch) : topo_(topo) {
    prog_.set_global_batch(batch);
    for (int d = 0; d < topo.num_devices(); ++d) prog_.add_devices()->set_device(topo.device(d).id);
  }
  quilt::v1::DeviceProgram& device(int d) { return *prog_.mutable_devices(d); }
  Instruction* Add(int d, std::vector<int64_t> deps = {}) {
    Instruction* ins = device(d).add_instructions();
    ins->set_id(next_id_++);
    for (int64_t x : deps) ins->add_deps(x);
    return ins;
  }
  int64_t Compute(int d, const std::string& op, int64_t begin, int64_t end,
                  std::vector<int64_t> deps = {}) {
    Instruction* ins = Add(d, std::move(deps));
    ins->mutable_compute()->set_op(op);
    ins->mutable_compute()->set_begin(begin);
    ins->mutable_compute()->set_end(end);
    return ins->id();
  }
  void Persistent(int d, const std::string& tensor) {
    device(d).add_persistent()->set_tensor(tensor);
  }
  void Feed(int d, const std::string& tensor, int64_t begin, int64_t end) {
    auto* r = device(d).add_feeds();
    r->set_tensor(tensor);
    r->set_begin(begin);
    r->set_end(end);
  }
  // A whole-tensor transfer from device a to b.
  void Transfer(int a, int b, const std::string& tensor, int64_t bytes) {
    const int64_t tag = next_tag_++;
    Instruction* s = Add(a);
    s->mutable_send()->mutable_range()->set_tensor(tensor);
    s->mutable_send()->set_peer_device(topo_.device(b).id);
    s->mutable_send()->set_tag(tag);
    s->mutable_send()->set_bytes(bytes);
    Instruction* r = Add(b);
    r->mutable_recv()->mutable_range()->set_tensor(tensor);
    r->mutable_recv()->mutable_into()->set_tensor(tensor);
    r->mutable_recv()->set_peer_device(topo_.device(a).id);
    r->mutable_recv()->set_tag(tag);
    r->mutable_recv()->set_bytes(bytes);
  }
  void AllReduce(
      const std::vector<int>& devices, const std::string& tensor, int64_t bytes,
      quilt::v1::AggregationMethod method = quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE) {
    auto* group = prog_.add_groups();
    group->set_id(prog_.groups_size());
    for (int d : devices) group->add_devices(topo_.device(d).id);
    const int64_t cid = next_collective_++;
    for (int d : devices) {
      Instruction* ins = Add(d);
      auto* ar = ins->mutable_all_reduce();
      ar->set_collective_id(cid);
      ar->set_group(group->id());
      ar->add_tensors(tensor);
      ar->set_bytes(bytes);
      ar->set_algorithm(method);
    }
  }
  // Every worker pushes `bytes` of `tensor` to `server`, which sums them.
  void PushAll(const std::vector<int>& workers, int server, const std::string& tensor,
               int64_t bytes) {
    Instruction acc;
    acc.mutable_ps_accumulate()->mutable_gradient()->set_tensor(tensor);
    for (int w : workers) {
      const int64_t tag = next_tag_++;
      Instruction* p = Add(w);
      p->mutable_ps_push()->mutable_gradient()->set_tensor(tensor);
      p->mutable_ps_push()->set_server_device(topo_.device(server).id);
      p->mutable_ps_push()->set_tag(tag);
      p->mutable_ps_push()->set_bytes(bytes);
      acc.mutable_ps_accumulate()->add_push_tags(tag);
    }
    Instruction* a = Add(server);
    const int64_t id = a->id();
    *a = acc;
    a->set_id(id);
  }
  // Device d pulls `tensor` (`bytes`) from `server`.
  void Pull(int d, int server, const std::string& tensor, int64_t bytes) {
    Instruction* p = Add(d);
    p->mutable_ps_pull()->mutable_parameter()->set_tensor(tensor);
    p->mutable_ps_pull()->set_server_device(topo_.device(server).id);
    p->mutable_ps_pull()->set_tag(next_tag_++);
    p->mutable_ps_pull()->set_bytes(bytes);
  }
  const DistributedProgram& program() const { return prog_; }

 private:
  const Topology& topo_;
  DistributedProgram prog_;
  int64_t next_id_ = 0, next_tag_ = 1, next_collective_ = 1;
};

struct World {
  Graph graph;
  Topology topo;
  CostModel cost;
};

inline std::unique_ptr<World> MakeWorld(Graph g, const quilt::v1::ClusterSpec& spec) {
  auto w = std::make_unique<World>();
  w->graph = std::move(g);
  absl::StatusOr<Topology> topo = Topology::Build(spec);
  EXPECT_THAT(topo.status(), IsOk());
  w->topo = std::move(*topo);
  absl::StatusOr<CostModel> cost = CostModel::Create(&w->graph, &w->topo);
  EXPECT_THAT(cost.status(), IsOk());
  w->cost = std::move(*cost);
  return w;
}

// One non-batch float tensor of `bytes` bytes.
inline Graph TensorGraph(int64_t bytes) {
  Graph g;
  EXPECT_THAT(g.AddTensor({"g", DType::kF32, Shape::Fixed({bytes / 4}), TensorRole::kGradient}),
              IsOk());
  return g;
}

inline SimResult MustSimulate(const World& w, const DistributedProgram& p, bool trace = false) {
  SimOptions o;
  o.trace = trace;
  absl::StatusOr<SimResult> r = Simulate(p, w.graph, w.topo, w.cost, o);
  EXPECT_THAT(r.status(), IsOk());
  return r.ok() ? *r : SimResult{};
}

}  // namespace quilt

#endif  // QUILT_SRC_SIM_SIM_TEST_UTIL_H_
