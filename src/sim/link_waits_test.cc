// Links shared by communications (link_waits.cc): parameter-server fan-in
// paced by the server's link, transfers sharing a NIC, and waiting
// transfers started by priority as their links free.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/graph/graph_builder.h"
#include "src/sim/sim_test_util.h"
#include "src/sim/simulator.h"

namespace quilt {
namespace {

constexpr int64_t kRows = 10;
constexpr int64_t kWidth = 1000;

TEST(Simulator, ParameterServerFanIn_IsLimitedByTheServersLink) {
  const int64_t m = 8 << 20;
  const int k = 4;
  // Nodes 0..k-1 hold one server each, nodes k..2k-1 one worker each. The
  // servers' NICs are slower (1 Gbyte/s) than the workers' (10 Gbyte/s).
  std::vector<NodeShape> nodes;
  for (int i = 0; i < 2 * k; ++i) {
    NodeShape n{1};
    n.nic_bw = i < k ? 1e9 : 1e10;
    nodes.push_back(n);
  }
  auto w = MakeWorld(TensorGraph(m), Spec(nodes));
  const double push = 2e-6 + 1e-5 + m / 1e9;  // fabric + NIC latency, server NIC bandwidth
  const DeviceSpeed& s = w->cost.speed(0);
  auto accumulate = [&](int pushes) {
    return pushes * static_cast<double>(m) / s.memory_bytes_per_s + s.overhead_s +
           static_cast<double>(m) / s.memory_bytes_per_s;
  };
  {
    // Every worker pushes to server 0: the pushes queue on its link.
    ProgramBuilder p(w->topo, 1);
    std::vector<int> workers;
    for (int i = k; i < 2 * k; ++i) {
      workers.push_back(i);
      p.Persistent(i, "g");
    }
    p.PushAll(workers, 0, "g", m);
    EXPECT_NEAR(MustSimulate(*w, p.program()).step_time_s, k * push + accumulate(k), 1e-9);
  }
  {
    // Each worker pushes to its own server: the pushes run at once.
    ProgramBuilder p(w->topo, 1);
    for (int i = 0; i < k; ++i) {
      p.Persistent(k + i, "g");
      p.PushAll({k + i}, i, "g", m);
    }
    EXPECT_NEAR(MustSimulate(*w, p.program()).step_time_s, push + accumulate(1), 1e-9);
  }
}

TEST(Simulator, TransfersSharingALink_TakeTwiceAsLong) {
  const int64_t m = 16 << 20;
  NodeShape node{2};
  node.nic_bw = 2e9;
  node.nic_lat = 1e-5;
  node.fabric_bw = 1e11;
  node.fabric_lat = 2e-6;
  auto w = MakeWorld(TensorGraph(m), Spec({node, node}));
  const double one = 2e-6 + 1e-5 + m / 2e9;
  {
    ProgramBuilder p(w->topo, 1);
    p.Persistent(0, "g");
    p.Transfer(0, 2, "g", m);
    EXPECT_NEAR(MustSimulate(*w, p.program()).step_time_s, one, 1e-12);
  }
  {
    // n0/gpu:0 → n1/gpu:0 and n0/gpu:1 → n1/gpu:1 share both NICs.
    ProgramBuilder p(w->topo, 1);
    p.Persistent(0, "g");
    p.Persistent(1, "g");
    p.Transfer(0, 2, "g", m);
    p.Transfer(1, 3, "g", m);
    const SimResult r = MustSimulate(*w, p.program());
    EXPECT_NEAR(r.step_time_s, 2 * one, 1e-12);
    bool nic_busy = false;
    for (const LinkUsage& l : r.links) {
      if (l.resource == "n0 nic out") {
        nic_busy = true;
        EXPECT_NEAR(l.utilization, 1.0, 1e-9);
      }
    }
    EXPECT_TRUE(nic_busy);
  }
  {
    // Within each node: disjoint links, concurrent.
    ProgramBuilder p(w->topo, 1);
    p.Persistent(0, "g");
    p.Persistent(2, "g");
    p.Transfer(0, 1, "g", m);
    p.Transfer(2, 3, "g", m);
    EXPECT_NEAR(MustSimulate(*w, p.program()).step_time_s, 2e-6 + m / 1e11, 1e-12);
  }
}

// Three transfers wait out of node 0 while another holds its NIC: when
// the NIC frees, the highest-priority one whose links are all free starts
// (the highest of all waits for a port still busy), and the next waits
// for the port they share.
TEST(Simulator, WaitingTransfersStartByPriorityOnceTheirLinksFree) {
  const int64_t big = int64_t{8} << 30;
  Graph g;
  GraphBuilder b(&g);
  ASSERT_THAT(b.AddInput("x", DType::kF32, Shape({Dim::Batch(), Dim::Fixed(kWidth)})), IsOk());
  ASSERT_THAT(b.Add("Relu", {"x"}, {}, "a"), IsOk());
  for (const char* t : {"ga", "gb", "gc", "gd", "ge"}) {
    ASSERT_THAT(g.AddTensor({t, DType::kF32, Shape::Fixed({1024}), TensorRole::kGradient}), IsOk());
  }
  NodeShape node{2};
  node.nic_bw = 1e9;
  quilt::v1::ClusterSpec spec = Spec({node, node, node});
  auto* timing = spec.mutable_nodes(0)->mutable_devices(1)->add_op_times();
  timing->set_op("a");
  timing->set_batch(kRows);
  timing->set_time_s(1e-3);
  auto w = MakeWorld(std::move(g), spec);
  const int64_t m = 16 << 20;
  const double across = 2e-6 + 1e-5 + m / 1e9;  // fabric + NIC latency, NIC bandwidth
  for (bool c_first : {true, false}) {
    ProgramBuilder p(w->topo, kRows);
    for (const char* t : {"ga", "gb", "gc", "gd"}) p.Persistent(t[1] == 'a' ? 0 : 1, t);
    p.Persistent(4, "ge");
    // n0/gpu:0 → n1/gpu:0 holds n0's NIC from 0; n2/gpu:0 → n2/gpu:1
    // holds n2/gpu:1's port far longer.
    p.Transfer(0, 2, "ga", m);
    p.Transfer(4, 5, "ge", big);
    // After 1 ms on n0/gpu:1, from it: gd to n2/gpu:1 (highest), gc to
    // n1/gpu:0 and gb to n1/gpu:1.
    p.Feed(1, "x", 0, kRows);
    const int64_t ready = p.Compute(1, "a", 0, kRows);
    const std::vector<std::pair<std::string, int>> waiting = {{"gd", 5}, {"gc", 2}, {"gb", 3}};
    for (const auto& [t, to] : waiting) {
      p.Transfer(1, to, t, m);
      const double priority = t == "gd" ? 3 : (t == "gc") == c_first ? 2 : 1;
      auto& sends = *p.device(1).mutable_instructions();
      Instruction* send = sends.Mutable(sends.size() - 1);
      send->add_deps(ready);
      send->set_priority(priority);
      auto& recvs = *p.device(to).mutable_instructions();
      recvs.Mutable(recvs.size() - 1)->set_priority(priority);
    }
    const SimResult r = MustSimulate(*w, p.program(), /*trace=*/true);
    std::map<std::string, double> began;
    for (const TraceEvent& e : r.trace) {
      if (e.category == "comm" && !began.count(e.name)) began[e.name] = e.start_s;
    }
    const std::string first = c_first ? "transfer gc" : "transfer gb";
    const std::string second = c_first ? "transfer gb" : "transfer gc";
    EXPECT_NEAR(began["transfer ga"], 0, 1e-12);
    EXPECT_NEAR(began[first], across, 1e-9) << (c_first ? "gc first" : "gb first");
    EXPECT_NEAR(began[second], 2 * across, 1e-9) << (c_first ? "gc first" : "gb first");
    EXPECT_GT(began["transfer gd"], 2 * across);  // after ge frees n2/gpu:1's port
  }
}

}  // namespace
}  // namespace quilt
