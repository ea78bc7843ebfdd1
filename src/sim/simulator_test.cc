// The simulator against closed forms on hand-built programs: a chain of ops
// on one device, ring all-reduce, and memory peaks (links shared by
// communications: link_waits_test.cc).
#include "src/sim/simulator.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "src/common/status_matchers.h"
#include "src/common/units.h"
#include "src/graph/graph_builder.h"
#include "src/sim/sim_test_util.h"

namespace quilt {
namespace {

using quilt::v1::DistributedProgram;
using quilt::v1::Instruction;
using ::testing::HasSubstr;

constexpr int64_t kRows = 10;
constexpr int64_t kWidth = 1000;
constexpr int64_t kActivation = kRows * kWidth * 4;  // bytes of x, a, b, c

// x → a = Relu(x) → b = Relu(a) → c = Add(a, b); a parameter w of 4000
// bytes stays resident. Measured op times make the closed forms exact.
Graph ChainGraph() {
  Graph g;
  GraphBuilder b(&g);
  EXPECT_THAT(b.AddInput("x", DType::kF32, Shape({Dim::Batch(), Dim::Fixed(kWidth)})), IsOk());
  EXPECT_THAT(b.AddParameter("w", Shape::Fixed({1000}), InitializerSpec{}), IsOk());
  EXPECT_THAT(b.Add("Relu", {"x"}, {}, "a"), IsOk());
  EXPECT_THAT(b.Add("Relu", {"a"}, {}, "b"), IsOk());
  EXPECT_THAT(b.Add("Add", {"a", "b"}, {}, "c"), IsOk());
  return g;
}

quilt::v1::ClusterSpec TimedSpec(int devices, int64_t memory = int64_t{1} << 34) {
  quilt::v1::ClusterSpec spec = Spec({NodeShape{devices}}, memory);
  for (auto& dev : *spec.mutable_nodes(0)->mutable_devices()) {
    for (auto [op, t] : {std::pair{"a", 1e-3}, std::pair{"b", 2e-3}, std::pair{"c", 4e-3}}) {
      auto* timing = dev.add_op_times();
      timing->set_op(op);
      timing->set_batch(kRows);
      timing->set_time_s(t);
    }
  }
  return spec;
}

// x fed, w resident, a → b → c on device 0.
DistributedProgram ChainProgram(const Topology& topo) {
  ProgramBuilder p(topo, kRows);
  p.Feed(0, "x", 0, kRows);
  p.Persistent(0, "w");
  const int64_t a = p.Compute(0, "a", 0, kRows);
  const int64_t b = p.Compute(0, "b", 0, kRows, {a});
  p.Compute(0, "c", 0, kRows, {a, b});
  return p.program();
}

TEST(Simulator, ChainOnOneDevice_TakesTheSumOfItsOps) {
  auto w = MakeWorld(ChainGraph(), TimedSpec(1));
  const SimResult r = MustSimulate(*w, ChainProgram(w->topo));
  EXPECT_NEAR(r.step_time_s, 1e-3 + 2e-3 + 4e-3, 1e-12);
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_NEAR(r.devices[0].busy_s, 7e-3, 1e-12);
  EXPECT_NEAR(r.devices[0].idle_s, 0, 1e-12);
  EXPECT_EQ(r.communication_bytes, 0);
}

TEST(Simulator, MeasuredTimesOfOpsWithoutTheBatchDoNotScaleWithIt) {
  // d = Relu(w) reads the weight alone: measured at the batch of kRows, it
  // takes that time at any batch; the batched ops scale with their rows.
  Graph g = ChainGraph();
  GraphBuilder b(&g);
  ASSERT_THAT(b.Add("Relu", {"w"}, {}, "d"), IsOk());
  quilt::v1::ClusterSpec spec = TimedSpec(1);
  auto* timing = spec.mutable_nodes(0)->mutable_devices(0)->add_op_times();
  timing->set_op("d");
  timing->set_batch(kRows);
  timing->set_time_s(3e-3);
  auto w = MakeWorld(std::move(g), spec);
  const int d = static_cast<int>(w->graph.ops.size()) - 1;
  ASSERT_FALSE(w->cost.Batched(d));
  EXPECT_NEAR(w->cost.OpTime(d, 0, 1), 3e-3, 1e-12);
  EXPECT_NEAR(w->cost.OpTime(d, 0, kRows * 4), 3e-3, 1e-12);
  ASSERT_TRUE(w->cost.Batched(0));
  EXPECT_NEAR(w->cost.OpTime(0, 0, kRows * 2), 2e-3, 1e-12);
}

TEST(Simulator, Breakdown_OnTheBusiestDeviceNotTheLastToFinish) {
  // Device 0 computes a and b (3 ms), then sends a to device 1, which
  // computes b from it (2 ms) and finishes last.
  auto w = MakeWorld(ChainGraph(), TimedSpec(2));
  ProgramBuilder p(w->topo, kRows);
  p.Feed(0, "x", 0, kRows);
  const int64_t a = p.Compute(0, "a", 0, kRows);
  const int64_t b = p.Compute(0, "b", 0, kRows, {a});
  p.Transfer(0, 1, "a", kActivation);
  int64_t recv = -1;
  for (auto& ins : *p.device(0).mutable_instructions()) {
    if (ins.has_send()) ins.add_deps(b);
  }
  for (const auto& ins : p.device(1).instructions()) {
    if (ins.has_recv()) recv = ins.id();
  }
  p.Compute(1, "b", 0, kRows, {recv});
  const SimResult r = MustSimulate(*w, p.program());
  ASSERT_EQ(r.devices.size(), 2u);
  EXPECT_GT(r.step_time_s, 5e-3);
  EXPECT_EQ(r.critical_device, w->topo.device(0).id);
  EXPECT_NEAR(r.compute_s, 3e-3, 1e-9);
  EXPECT_NEAR(r.compute_s + r.exposed_communication_s + r.idle_s, r.step_time_s, 1e-9);
}

TEST(Simulator, IndependentOps_SerializeOnOneDeviceAndOverlapOnTwo) {
  auto w = MakeWorld(ChainGraph(), TimedSpec(2));
  ProgramBuilder one(w->topo, kRows);
  one.Feed(0, "x", 0, kRows);
  one.Compute(0, "a", 0, kRows);
  one.Compute(0, "b", 0, kRows);  // reads nothing it waits for: independent
  ProgramBuilder two(w->topo, kRows);
  two.Feed(0, "x", 0, kRows);
  two.Compute(0, "a", 0, kRows);
  two.Compute(1, "b", 0, kRows);
  EXPECT_NEAR(MustSimulate(*w, one.program()).step_time_s, 3e-3, 1e-12);
  EXPECT_NEAR(MustSimulate(*w, two.program()).step_time_s, 2e-3, 1e-12);
}

TEST(Simulator, MeasuredStepOverheadOfTheDevicesUsedIsAddedOnce) {
  quilt::v1::ClusterSpec spec = TimedSpec(2);
  spec.mutable_nodes(0)->mutable_devices(0)->set_measured_step_overhead_s(2e-4);
  spec.mutable_nodes(0)->mutable_devices(1)->set_measured_step_overhead_s(5e-4);
  auto w = MakeWorld(ChainGraph(), spec);
  const SimResult one = MustSimulate(*w, ChainProgram(w->topo));  // device 0 only
  EXPECT_NEAR(one.host_overhead_s, 2e-4, 1e-15);
  EXPECT_NEAR(one.step_time_s, 7e-3 + 2e-4, 1e-12);
  ProgramBuilder two(w->topo, kRows);
  two.Feed(0, "x", 0, kRows);
  two.Compute(0, "a", 0, kRows);
  two.Compute(1, "b", 0, kRows);
  const SimResult both = MustSimulate(*w, two.program());
  EXPECT_NEAR(both.host_overhead_s, 5e-4, 1e-15);
  EXPECT_NEAR(both.step_time_s, 2e-3 + 5e-4, 1e-12);
}

TEST(Simulator, MeasuredOpOverheadReplacesTheDefaultPerOp) {
  auto plain = MakeWorld(ChainGraph(), Spec({NodeShape{1}}));
  quilt::v1::ClusterSpec spec = Spec({NodeShape{1}});
  spec.mutable_nodes(0)->mutable_devices(0)->set_measured_op_overhead_s(1e-4);
  auto measured = MakeWorld(ChainGraph(), spec);
  const double base = MustSimulate(*plain, ChainProgram(plain->topo)).step_time_s;
  const double with = MustSimulate(*measured, ChainProgram(measured->topo)).step_time_s;
  const double default_overhead = SpeedOf(spec.nodes(0).devices(0)).overhead_s == 1e-4
                                      ? SpeedOf(Spec({NodeShape{1}}).nodes(0).devices(0)).overhead_s
                                      : -1;
  ASSERT_GE(default_overhead, 0);
  EXPECT_NEAR(with - base, 3 * (1e-4 - default_overhead), 1e-12);  // three ops
}

// A transfer that finds a transport idle past its spin window pays the
// wake-up; one that follows another within the window does not.
TEST(Simulator, TransportWakeUpIsPaidAfterIdleOnly) {
  constexpr double kWake = 5e-4;
  const double transfer = 2e-6 + kActivation / 1e11;  // fabric latency + bytes / bandwidth
  // x goes to device 1 at once; a (1 ms) is computed meanwhile and follows.
  auto step = [&](double wake, double spin) {
    quilt::v1::ClusterSpec spec = TimedSpec(2);
    for (auto& dev : *spec.mutable_nodes(0)->mutable_devices()) {
      dev.set_measured_transport_wakeup_s(wake);
      dev.set_measured_transport_spin_s(spin);
    }
    auto w = MakeWorld(ChainGraph(), spec);
    ProgramBuilder p(w->topo, kRows);
    p.Feed(0, "x", 0, kRows);
    p.Transfer(0, 1, "x", kActivation);
    const int64_t a = p.Compute(0, "a", 0, kRows);
    p.Transfer(0, 1, "a", kActivation);
    for (auto& ins : *p.device(0).mutable_instructions()) {
      if (ins.has_send() && ins.send().range().tensor() == "a") ins.add_deps(a);
    }
    return MustSimulate(*w, p.program()).step_time_s;
  };
  EXPECT_NEAR(step(0, 0), 1e-3 + transfer, 1e-12);
  // Idle from the end of the first transfer (wake-up included) to 1 ms.
  EXPECT_NEAR(step(kWake, 1e-4), 1e-3 + transfer + kWake, 1e-12);
  // Within a 2 ms window the transports are still polling.
  EXPECT_NEAR(step(kWake, 2e-3), 1e-3 + transfer, 1e-12);
}

TEST(Simulator, HigherPriorityRunsFirst) {
  auto w = MakeWorld(ChainGraph(), TimedSpec(1));
  // b (2 ms) and c (4 ms) are both ready at 0; the finish time of the one
  // that runs first tells the order.
  for (bool c_first : {false, true}) {
    ProgramBuilder p(w->topo, kRows);
    p.Feed(0, "x", 0, kRows);
    Instruction* b = p.Add(0);
    b->mutable_compute()->set_op("b");
    b->mutable_compute()->set_end(kRows);
    b->set_priority(c_first ? 1 : 2);
    Instruction* c = p.Add(0);
    c->mutable_compute()->set_op("c");
    c->mutable_compute()->set_end(kRows);
    c->set_priority(c_first ? 2 : 1);
    SimOptions o;
    o.trace = true;
    absl::StatusOr<SimResult> r = Simulate(p.program(), w->graph, w->topo, w->cost, o);
    ASSERT_THAT(r.status(), IsOk());
    EXPECT_NEAR(r->step_time_s, 6e-3, 1e-12);
    ASSERT_EQ(r->trace.size(), 2u);
    EXPECT_EQ(r->trace[0].name, c_first ? "c" : "b");
  }
}

TEST(Simulator, MemoryPeak_CountsLiveTensorsAndResidentParameters) {
  auto w = MakeWorld(ChainGraph(), TimedSpec(1));
  const SimResult r = MustSimulate(*w, ChainProgram(w->topo));
  // While c runs, a and b (its inputs) and c are live; x was freed after a.
  EXPECT_EQ(r.devices[0].peak_memory_bytes, 4000 + 3 * kActivation);
  EXPECT_FALSE(r.devices[0].out_of_memory);
  EXPECT_TRUE(r.out_of_memory.empty());
}

TEST(Simulator, MemoryPeak_FreesTensorsAfterTheirLastReader) {
  // x → a → b → d = Relu(b): no op reads two activations, so at most an
  // input and an output are live at once.
  Graph g;
  GraphBuilder b(&g);
  ASSERT_THAT(b.AddInput("x", DType::kF32, Shape({Dim::Batch(), Dim::Fixed(kWidth)})), IsOk());
  ASSERT_THAT(b.Add("Relu", {"x"}, {}, "a"), IsOk());
  ASSERT_THAT(b.Add("Relu", {"a"}, {}, "b"), IsOk());
  ASSERT_THAT(b.Add("Relu", {"b"}, {}, "d"), IsOk());
  auto w = MakeWorld(std::move(g), Spec({NodeShape{1}}));
  ProgramBuilder p(w->topo, kRows);
  p.Feed(0, "x", 0, kRows);
  const int64_t i1 = p.Compute(0, "a", 0, kRows);
  const int64_t i2 = p.Compute(0, "b", 0, kRows, {i1});
  p.Compute(0, "d", 0, kRows, {i2});
  EXPECT_EQ(MustSimulate(*w, p.program()).devices[0].peak_memory_bytes, 2 * kActivation);
}

// A read of rows that no instance matches exactly finds the one its
// dependency wrote, not a later copy of some of those rows it does not
// depend on (which it might run before: the executor reads what is there).
// a [10 rows] → copies of rows [0, 5) and [5, 10) (read by nothing) and
// b on rows [0, 2) and [5, 7), which depend on a alone: a is held until
// both b's, each copy only while it is written.
TEST(Simulator, MemoryPeak_AReadFindsTheInstanceItsDependencyWrote) {
  Graph g;
  GraphBuilder b(&g);
  ASSERT_THAT(b.AddInput("x", DType::kF32, Shape({Dim::Batch(), Dim::Fixed(1)})), IsOk());
  ASSERT_THAT(b.AddParameter("w", Shape::Fixed({1, kWidth}), InitializerSpec{}), IsOk());
  ASSERT_THAT(b.Add("MatMul", {"x", "w"}, {}, "a"), IsOk());
  ASSERT_THAT(b.Add("Relu", {"a"}, {}, "b"), IsOk());
  auto w = MakeWorld(std::move(g), Spec({NodeShape{1}}));
  ProgramBuilder p(w->topo, kRows);
  p.Feed(0, "x", 0, kRows);
  p.Persistent(0, "w");
  const int64_t a = p.Compute(0, "a", 0, kRows);
  for (const auto [begin, end] : {std::pair<int64_t, int64_t>{0, 5}, {5, 10}}) {
    Instruction* copy = p.Add(0, {a});
    copy->set_priority(2);
    auto* part = copy->mutable_concat()->add_parts();
    part->set_tensor("a");
    part->set_begin(begin);
    part->set_end(end);
    *copy->mutable_concat()->mutable_target() = *part;
  }
  for (const int64_t begin : {0, 5}) {
    Instruction* read = p.Add(0, {a});
    read->set_priority(1);
    read->mutable_compute()->set_op("b");
    read->mutable_compute()->set_begin(begin);
    read->mutable_compute()->set_end(begin + 2);
  }
  // w, a and one copy (half of a); the b's read a itself (had they read
  // the copies, both copies would be held beside a: w + 2 a).
  EXPECT_EQ(MustSimulate(*w, p.program()).devices[0].peak_memory_bytes,
            4 * kWidth + kActivation + kActivation / 2);
}

TEST(Simulator, OutOfMemory_IsReportedWithTheDevice) {
  auto w = MakeWorld(ChainGraph(), TimedSpec(1, /*memory=*/3 * kActivation));
  const SimResult r = MustSimulate(*w, ChainProgram(w->topo));
  EXPECT_TRUE(r.devices[0].out_of_memory);
  EXPECT_THAT(r.out_of_memory, HasSubstr("n0/gpu:0"));
  // In units that tell the two apart, however small.
  EXPECT_THAT(r.out_of_memory, HasSubstr("at its peak, has " + HumanBytes(3 * kActivation)));
  EXPECT_THAT(r.out_of_memory,
              HasSubstr("needs " + HumanBytes(r.devices[0].peak_memory_bytes) + " at its peak"));
  EXPECT_NE(HumanBytes(r.devices[0].peak_memory_bytes), HumanBytes(3 * kActivation));
}

class RingAllReduce : public ::testing::TestWithParam<int> {};

TEST_P(RingAllReduce, MatchesTwoNMinusOneOverNTimesMOverB) {
  const int n = GetParam();
  const int64_t m = 64 << 20;
  NodeShape node{n};
  node.fabric_bw = 2e10;
  node.fabric_lat = 4e-6;
  auto w = MakeWorld(TensorGraph(m), Spec({node}));
  ProgramBuilder p(w->topo, 1);
  std::vector<int> all;
  for (int d = 0; d < n; ++d) {
    all.push_back(d);
    p.Persistent(d, "g");
  }
  p.AllReduce(all, "g", m);
  const SimResult r = MustSimulate(*w, p.program());
  const double expected = 2.0 * (n - 1) / n * m / 2e10 + 2.0 * (n - 1) * 4e-6;
  EXPECT_NEAR(r.step_time_s, expected, expected * 1e-9);
  EXPECT_EQ(r.communication_bytes, 2 * (n - 1) * m);
}

INSTANTIATE_TEST_SUITE_P(Devices, RingAllReduce, ::testing::Values(2, 3, 4, 8));

TEST(Simulator, RingAcrossNodes_IsPacedByTheSlowestHop) {
  const int64_t m = 32 << 20;
  NodeShape node{2};
  node.fabric_bw = 1e11;
  node.fabric_lat = 2e-6;
  node.nic_bw = 1e9;
  node.nic_lat = 1e-5;
  auto w = MakeWorld(TensorGraph(m), Spec({node, node}));
  ProgramBuilder p(w->topo, 1);
  for (int d = 0; d < 4; ++d) p.Persistent(d, "g");
  p.AllReduce({0, 1, 2, 3}, "g", m);
  // The hops between nodes cross a NIC: fabric latency + NIC latency, NIC
  // bandwidth.
  const double hop = 2e-6 + 1e-5 + (m / 4.0) / 1e9;
  EXPECT_NEAR(MustSimulate(*w, p.program()).step_time_s, 2.0 * 3 * hop, 1e-9);
}

TEST(CostModel, CompositeModelsKeepAllReducesAsThePlainModelComputesThem) {
  NodeShape three{3}, two{2};
  two.nic_bw = 2e9;
  auto w = MakeWorld(TensorGraph(1 << 20), Spec({three, two, three}));
  const CostModel composite = CostModel::Composite(&w->graph, &w->cost, {});
  const std::vector<std::vector<int>> sets = {
      {0, 1}, {0, 3}, {0, 1, 2, 3, 4}, {4, 3, 2, 1, 0}, {0, 1, 2, 3, 4, 5, 6, 7}, {5, 0, 3}};
  for (int round = 0; round < 2; ++round) {  // computed, then kept
    for (auto method : {quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE,
                        quilt::v1::AGGREGATION_METHOD_TREE_ALLREDUCE,
                        quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE}) {
      for (const std::vector<int>& devices : sets) {
        for (double bytes : {4.0, 4096.0, 3e7, 3e7 + 4}) {
          SCOPED_TRACE(::testing::Message() << method << " over " << devices.size() << " devices, "
                                            << bytes << " bytes, round " << round);
          const CostModel::Collective plain = w->cost.AllReduce(method, devices, bytes);
          const CostModel::Collective kept = composite.AllReduce(method, devices, bytes);
          EXPECT_GT(plain.time_s, 0);
          EXPECT_EQ(kept.time_s, plain.time_s);
          EXPECT_EQ(kept.resources, plain.resources);
        }
      }
    }
  }
  // Different bytes or member order are different collectives.
  const auto ring = quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE;
  EXPECT_LT(composite.AllReduce(ring, {0, 3}, 4096).time_s,
            composite.AllReduce(ring, {0, 3}, 3e7).time_s);
  // (A tree's parents follow the order: device 3 as the root takes two
  // children's bytes over its NIC.)
  const auto tree = quilt::v1::AGGREGATION_METHOD_TREE_ALLREDUCE;
  EXPECT_LT(composite.AllReduce(tree, {0, 1, 2, 3}, 3e7).time_s,
            composite.AllReduce(tree, {3, 0, 1, 2}, 3e7).time_s);
  EXPECT_EQ(composite.AllReduce(tree, {3, 0, 1, 2}, 3e7).time_s,
            w->cost.AllReduce(tree, {3, 0, 1, 2}, 3e7).time_s);
}

// The two-level all-reduce's exchange across nodes sizes each node's part
// by its NIC: a node with a NIC twice as fast as the other three's takes a
// larger part and the slow NICs carry 1.2 buffers instead of 1.5, so the
// large all-reduce takes less than when every NIC is slow. Equal parts (a piece alone) gain nothing
// from the fast NIC.
TEST(CostModel, TwoLevelAllReducePartsFollowTheNics) {
  NodeShape slow{2}, fast{2};
  slow.nic_bw = 1e9;
  fast.nic_bw = 2e9;
  slow.fabric_bw = fast.fabric_bw = 1e11;
  auto mixed = MakeWorld(TensorGraph(1 << 20), Spec({fast, slow, slow, slow}));
  auto alike = MakeWorld(TensorGraph(1 << 20), Spec({slow, slow, slow, slow}));
  const auto two_level = quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE;
  const std::vector<int> all = {0, 1, 2, 3, 4, 5, 6, 7};
  const double large = 256e6;  // 16 pieces
  const double t_mixed = mixed->cost.AllReduce(two_level, all, large).time_s;
  const double t_alike = alike->cost.AllReduce(two_level, all, large).time_s;
  // (The first piece's two phases apart, then 15 overlapped: shares 0.7
  // and 0.1 put 2.1 pieces through the fast NIC in a phase, equal shares
  // 0.75 through each.)
  EXPECT_NEAR(t_mixed / t_alike, (2 * 2.1 / 2 + 15 * 1.2) / (2 * 0.75 + 15 * 1.5), 0.005);
  // A fast NIC behind device links that together carry only what the
  // slow NICs do gains nothing.
  NodeShape narrow = fast;
  narrow.fabric_bw = 0.5e9;  // two owners sending at once: 1e9
  NodeShape narrow_slow = narrow;
  narrow_slow.nic_bw = slow.nic_bw;
  auto behind = MakeWorld(TensorGraph(1 << 20), Spec({narrow, slow, slow, slow}));
  auto behind_slow = MakeWorld(TensorGraph(1 << 20), Spec({narrow_slow, slow, slow, slow}));
  EXPECT_DOUBLE_EQ(behind->cost.AllReduce(two_level, all, large).time_s,
                   behind_slow->cost.AllReduce(two_level, all, large).time_s);
  const double small = 1e6;  // one piece
  EXPECT_NEAR(mixed->cost.AllReduce(two_level, all, small).time_s,
              alike->cost.AllReduce(two_level, all, small).time_s, 1e-12);
}

// The direct all-reduce: one message latency, then the busiest resource's
// bytes (a node's NIC carries each of its members' buffers to each member
// elsewhere). It beats the others for small sums and loses for large ones.
TEST(CostModel, DirectAllReduceIsOneLatencyThenTheBusiestResource) {
  NodeShape node{2};
  node.fabric_bw = 1e10;
  node.fabric_lat = 2e-6;
  node.nic_bw = 1e9;
  node.nic_lat = 1e-5;
  auto w = MakeWorld(TensorGraph(1 << 20), Spec({node, node, node}));
  const std::vector<int> all = {0, 1, 2, 3, 4, 5};
  const auto direct = quilt::v1::AGGREGATION_METHOD_DIRECT_ALLREDUCE;
  for (double bytes : {8.0, 4096.0, 4e6}) {
    SCOPED_TRACE(bytes);
    // Each NIC's way out carries 2 members × 4 members elsewhere × bytes;
    // the longest path crosses two fabric ports and two NIC sides.
    const double want = 2e-6 + 1e-5 + 8 * bytes / 1e9;
    EXPECT_NEAR(w->cost.AllReduce(direct, all, bytes).time_s, want, 1e-12);
  }
  for (auto other :
       {quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, quilt::v1::AGGREGATION_METHOD_TREE_ALLREDUCE,
        quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE}) {
    EXPECT_LT(w->cost.AllReduce(direct, all, 8).time_s, w->cost.AllReduce(other, all, 8).time_s);
    // (The tree too moves whole buffers.)
    if (other == quilt::v1::AGGREGATION_METHOD_TREE_ALLREDUCE) continue;
    EXPECT_GT(w->cost.AllReduce(direct, all, 4e6).time_s,
              w->cost.AllReduce(other, all, 4e6).time_s);
  }
}

TEST(Simulator, MemoryCountsTheAllReduceStagingAndTheServersReceiveBuffers) {
  const int64_t m = 8 << 20;
  auto w = MakeWorld(TensorGraph(m), Spec({NodeShape{3}}));
  {
    // The sum goes through a staging buffer of the bucket's size.
    ProgramBuilder p(w->topo, 1);
    for (int d = 0; d < 2; ++d) p.Persistent(d, "g");
    p.AllReduce({0, 1}, "g", m);
    const SimResult r = MustSimulate(*w, p.program());
    for (int d = 0; d < 2; ++d) EXPECT_EQ(r.devices[d].peak_memory_bytes, 2 * m) << d;
  }
  {
    // The direct all-reduce also receives every other member's buffer.
    ProgramBuilder p(w->topo, 1);
    for (int d = 0; d < 3; ++d) p.Persistent(d, "g");
    p.AllReduce({0, 1, 2}, "g", m, quilt::v1::AGGREGATION_METHOD_DIRECT_ALLREDUCE);
    const SimResult r = MustSimulate(*w, p.program());
    for (int d = 0; d < 3; ++d) EXPECT_EQ(r.devices[d].peak_memory_bytes, 4 * m) << d;
  }
  {
    // Device 0 serves two workers: a receive buffer per push, then the sum.
    ProgramBuilder p(w->topo, 1);
    for (int d = 1; d < 3; ++d) p.Persistent(d, "g");
    p.PushAll({1, 2}, 0, "g", m);
    const SimResult r = MustSimulate(*w, p.program());
    EXPECT_EQ(r.devices[0].peak_memory_bytes, 3 * m);
    EXPECT_EQ(r.devices[1].peak_memory_bytes, m);
  }
}

// A pull from the device's own server copies in its memory: no bytes
// between devices. Pulls from another device are.
TEST(Simulator, CommunicationCountsOnlyTransfersBetweenDevices) {
  const int64_t m = 8 << 20;
  auto w = MakeWorld(TensorGraph(m), Spec({NodeShape{2}}));
  ProgramBuilder p(w->topo, 1);
  p.Persistent(0, "g");
  p.Pull(0, 0, "g", m);
  EXPECT_EQ(MustSimulate(*w, p.program()).communication_bytes, 0);
  p.Transfer(0, 0, "g", m);
  EXPECT_EQ(MustSimulate(*w, p.program()).communication_bytes, 0);
  p.Pull(1, 0, "g", m);
  EXPECT_EQ(MustSimulate(*w, p.program()).communication_bytes, m);
}

TEST(Simulator, IsDeterministicAndTracesEveryInstruction) {
  const int64_t m = 1 << 20;
  NodeShape node{2};
  auto w = MakeWorld(TensorGraph(m), Spec({node, node}));
  ProgramBuilder p(w->topo, 1);
  for (int d = 0; d < 4; ++d) p.Persistent(d, "g");
  p.Transfer(0, 2, "g", m);
  p.Transfer(1, 3, "g", m);
  p.Transfer(3, 0, "g", m);
  p.AllReduce({0, 1, 2, 3}, "g", m);
  const SimResult a = MustSimulate(*w, p.program(), true);
  const SimResult b = MustSimulate(*w, p.program(), true);
  EXPECT_EQ(a.step_time_s, b.step_time_s);
  ASSERT_EQ(a.trace.size(), b.trace.size());
  for (size_t i = 0; i < a.trace.size(); ++i) {
    EXPECT_EQ(a.trace[i].name, b.trace[i].name);
    EXPECT_EQ(a.trace[i].start_s, b.trace[i].start_s);
  }
  const nlohmann::json trace = nlohmann::json::parse(ChromeTraceJson(a, w->topo, "t"));
  int complete = 0;
  std::set<std::string> processes;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X") ++complete;
    if (e["ph"] == "M" && e["name"] == "process_name") processes.insert(e["args"]["name"]);
  }
  EXPECT_EQ(complete, static_cast<int>(a.trace.size()));
  EXPECT_TRUE(processes.count("n0/gpu:0"));
  EXPECT_TRUE(processes.count("link n0 nic out"));
}

TEST(Simulator, RejectsBrokenPrograms) {
  auto w = MakeWorld(TensorGraph(1024), Spec({NodeShape{2}}));
  {
    ProgramBuilder p(w->topo, 1);
    p.Persistent(0, "g");
    p.Transfer(0, 1, "g", 1024);
    DistributedProgram broken = p.program();
    broken.mutable_devices(1)->clear_instructions();  // the receive
    EXPECT_THAT(Simulate(broken, w->graph, w->topo, w->cost).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no receiver")));
  }
  {
    ProgramBuilder p(w->topo, 1);
    Instruction* a = p.Add(0, {1});
    a->mutable_compute()->set_op("nope");
    EXPECT_THAT(Simulate(p.program(), w->graph, w->topo, w->cost).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown op 'nope'")));
  }
  {
    // Two instructions waiting for each other never run.
    ProgramBuilder p(w->topo, 1);
    p.Persistent(0, "g");
    p.Persistent(1, "g");
    p.Transfer(0, 1, "g", 1024);
    DistributedProgram cyclic = p.program();
    cyclic.mutable_devices(0)->mutable_instructions(0)->add_deps(1);
    cyclic.mutable_devices(1)->mutable_instructions(0)->add_deps(0);
    EXPECT_THAT(Simulate(cyclic, w->graph, w->topo, w->cost).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("never ran")));
  }
  {
    ProgramBuilder p(w->topo, 1);
    p.AllReduce({0, 1}, "g", 1024);
    DistributedProgram bad = p.program();
    bad.mutable_devices(0)->mutable_instructions(0)->mutable_all_reduce()->set_group(7);
    EXPECT_THAT(Simulate(bad, w->graph, w->topo, w->cost).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown group 7")));
  }
}

}  // namespace
}  // namespace quilt
