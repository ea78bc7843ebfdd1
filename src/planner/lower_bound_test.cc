// The compute lower bound: its linear program against optima worked out by
// hand, no simulated plan below it, and tight where the answer is plain
// (identical devices).
#include "src/planner/lower_bound.h"

#include <random>

#include "src/planner/planner_test_util.h"

namespace quilt {
namespace {

using ::quilt::testing::Make;
using ::quilt::testing::World;

TEST(BalanceBound, MatchesOptimaWorkedOutByHand) {
  // Each op is twice as fast on one device as on the other: each goes
  // where it is fast (1), not both halved as a whole-model split would
  // (1.5).
  EXPECT_NEAR(BalanceBound({{1, 2}, {2, 1}}, {1, 1}), 1.0, 1e-6);
  // One op, three times as fast on the first device: x = 3 (1 - x).
  EXPECT_NEAR(BalanceBound({{1, 3}}, {1, 1}), 0.75, 1e-6);
  // A class of four equal devices shares the work evenly.
  EXPECT_NEAR(BalanceBound({{4}}, {4}), 1.0, 1e-6);
  EXPECT_NEAR(BalanceBound({{6, 6}, {6, 6}}, {2, 1}), 4.0, 1e-6);
  // Three ops, each fast on its own device.
  EXPECT_NEAR(BalanceBound({{1, 10, 10}, {10, 1, 10}, {10, 10, 1}}, {1, 1, 1}), 1.0, 1e-6);
  // Each device takes the op it is faster at and they share the third: 1.5.
  // (Weights inverse to each device's whole work give only 1.4: the
  // program's solution is needed.)
  EXPECT_NEAR(BalanceBound({{1, 4}, {2, 1}, {1, 1}}, {1, 1}), 1.5, 1e-6);
  // Two slow devices and one four times faster: the fast one takes 2/3.
  EXPECT_NEAR(BalanceBound({{3, 12}}, {1, 2}), 2.0, 1e-6);
  EXPECT_EQ(BalanceBound({}, {1}), 0);
  EXPECT_EQ(BalanceBound({{1}}, {}), 0);
}

TEST(LeastTimePerRow, FindsTheCheapestRowCountOfAMeasuredTable) {
  // An op measured at 4, 8 and 16 rows: 1, 0.6 and 0.8 ms per row (linear
  // between, proportional outside).
  std::unique_ptr<World> plain = Make("mlp");
  int op = -1;
  for (size_t i = 0; i < plain->graph.ops.size() && op < 0; ++i) {
    if (plain->cost->Batched(static_cast<int>(i))) op = static_cast<int>(i);
  }
  ASSERT_GE(op, 0);
  quilt::v1::ClusterSpec spec = testing::TwoNodes();
  for (auto [rows, seconds] : {std::pair{4, 4e-3}, std::pair{8, 4.8e-3}, std::pair{16, 12.8e-3}}) {
    auto* t = spec.mutable_nodes(0)->mutable_devices(0)->add_op_times();
    t->set_op(plain->graph.ops[op].name);
    t->set_batch(rows);
    t->set_time_s(seconds);
  }
  std::unique_ptr<World> w = Make("mlp", spec);
  EXPECT_NEAR(w->cost->LeastTimePerRow(op, 0, 64), 0.6e-3, 1e-12);
  // Up to 6 rows: 6 rows take 4.4 ms.
  EXPECT_NEAR(w->cost->LeastTimePerRow(op, 0, 6), 4.4e-3 / 6, 1e-12);
  EXPECT_NEAR(w->cost->LeastTimePerRow(op, 0, 3), 1e-3, 1e-12);
  // Never more than any row count's own rate.
  for (int64_t r = 1; r <= 40; ++r) {
    EXPECT_LE(w->cost->LeastTimePerRow(op, 0, 40), w->cost->OpTime(op, 0, r) / r * (1 + 1e-12));
    // And, on the roofline (no table), the same.
    EXPECT_LE(w->cost->LeastTimePerRow(op, 1, 40), w->cost->OpTime(op, 1, r) / r * (1 + 1e-12));
  }
}

// The strategy with `rows[d]` replicas per device, lowered and simulated.
double Simulated(const World& w, const std::vector<int64_t>& rows, int64_t batch) {
  const quilt::v1::Strategy s = DataParallelStrategy(
      w.graph, w.topo, rows, quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, "split");
  absl::StatusOr<quilt::v1::DistributedProgram> p = Lower(w.graph, s, w.topo, w.cost.get(), batch);
  EXPECT_THAT(p.status(), IsOk());
  if (!p.ok()) return 0;
  absl::StatusOr<SimResult> r = Simulate(*p, w.graph, w.topo, *w.cost);
  EXPECT_THAT(r.status(), IsOk());
  return r.ok() ? r->step_time_s : 0;
}

TEST(ComputeLowerBound, NoSplitSimulatesBelowIt) {
  // Fast and slow devices (TwoNodes) differ in FLOP/s but not in memory
  // bandwidth, so memory-bound ops gain nothing on the fast ones: the
  // bound counts that, and lies above the FLOP bound.
  std::mt19937 rng(7);
  for (const char* model : {"cnn", "transformer"}) {
    SCOPED_TRACE(model);
    std::unique_ptr<World> w = Make(model);
    const int64_t batch = 512;
    const double bound = ComputeLowerBound(w->graph, *w->cost, w->topo, batch);
    const double flops = FlopsLowerBound(w->graph, *w->cost, w->topo, batch);
    EXPECT_GT(bound, flops * 1.001);
    double best = 0;
    for (int trial = 0; trial < 12; ++trial) {
      // Random replica counts over the devices (some unused), summing to
      // the batch.
      std::vector<int64_t> rows(w->topo.num_devices(), 0);
      for (int64_t b = 0; b < batch; ++b) {
        ++rows[std::uniform_int_distribution<int>(0, trial % 4 == 0 ? 1 : 3)(rng)];
      }
      const double step = Simulated(*w, rows, batch);
      EXPECT_GE(step, bound) << "split " << trial;
      if (best == 0 || step < best) best = step;
    }
    // Not vacuous: some split comes within 3× of it.
    EXPECT_LT(best, 3 * bound) << best / bound;
  }
}

TEST(ComputeLowerBound, IsOneDevicesComputeSharedOverIdenticalDevices) {
  // Four identical devices: the bound is the whole batch's computation on
  // one of them, over four (the per-row cost is least at the whole batch).
  quilt::v1::ClusterSpec spec = testing::TwoNodes();
  for (auto& node : *spec.mutable_nodes()) {
    for (auto& d : *node.mutable_devices()) d.set_peak_fp32_flops_per_s(1.4e13);
  }
  for (const char* model : {"mlp", "transformer"}) {
    SCOPED_TRACE(model);
    std::unique_ptr<World> w = Make(model, spec);
    const int64_t batch = 64;
    absl::StatusOr<quilt::v1::DistributedProgram> p =
        Lower(w->graph,
              DataParallelStrategy(w->graph, w->topo, {1, 0, 0, 0},
                                   quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, "one"),
              w->topo, w->cost.get(), batch);
    ASSERT_THAT(p.status(), IsOk());
    absl::StatusOr<SimResult> one = Simulate(*p, w->graph, w->topo, *w->cost);
    ASSERT_THAT(one.status(), IsOk());
    ASSERT_EQ(one->devices.size(), 1u);
    const double bound = ComputeLowerBound(w->graph, *w->cost, w->topo, batch);
    EXPECT_NEAR(bound, one->devices[0].busy_s / 4, one->devices[0].busy_s * 1e-6);
  }
}

}  // namespace
}  // namespace quilt
