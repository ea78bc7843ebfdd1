// Priorities: lowering ranks instructions by the ops and peers it knows
// (HeftPriorities' hints); ranking the lowered program again by the names
// in its instructions (Reprioritize) gives the same ranks, for
// computations, transfers, parameter-server pushes and pulls, and
// collectives, in both execution orders.
#include "src/planner/priorities.h"

#include <map>
#include <set>

#include "gtest/gtest.h"
#include "src/planner/baselines.h"
#include "src/planner/lower.h"
#include "src/planner/planner_test_util.h"
#include "src/sim/simulator.h"

namespace quilt {
namespace {

using quilt::v1::DistributedProgram;
using quilt::v1::Instruction;
using quilt::v1::Strategy;

TEST(Priorities, LoweringsHintsRankAsTheNamesDo) {
  auto w = testing::Make("transformer", testing::TwoNodes());
  ASSERT_NE(w, nullptr);
  const std::vector<int64_t> ones(w->topo.num_devices(), 1);
  const std::vector<Strategy> strategies = {
      testing::EvenRing(*w),
      DataParallelStrategy(w->graph, w->topo, ones, quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER,
                           "ps"),
      testing::TiedSplit(w->graph, w->topo)};
  for (Strategy strategy : strategies) {
    for (quilt::v1::ExecutionOrder order : kExecutionOrders) {
      SCOPED_TRACE(strategy.name() + " in order " + std::to_string(order));
      strategy.set_order(order);
      DistributedProgram p = testing::LowerChecked(*w, strategy, 8);
      // Every kind of instruction the hints stand for is there.
      std::set<int> kinds;
      for (const auto& d : p.devices()) {
        for (const Instruction& ins : d.instructions()) kinds.insert(ins.kind_case());
      }
      EXPECT_TRUE(kinds.count(Instruction::kCompute));
      if (strategy.name() == "ps") {
        EXPECT_TRUE(kinds.count(Instruction::kPsPush) && kinds.count(Instruction::kPsPull));
      } else if (strategy.name() == "tied-split") {
        EXPECT_TRUE(kinds.count(Instruction::kSend));
      } else {
        EXPECT_TRUE(kinds.count(Instruction::kAllReduce));
      }
      const std::vector<double> lowered = Priorities(p);
      ASSERT_THAT(Reprioritize(w->graph, w->topo, w->cost.get(), order, &p), IsOk());
      const std::vector<double> again = Priorities(p);
      ASSERT_EQ(lowered.size(), again.size());
      size_t positive = 0;
      for (size_t i = 0; i < lowered.size(); ++i) {
        EXPECT_EQ(lowered[i], again[i]) << i;
        positive += lowered[i] > 0 ? 1 : 0;
      }
      EXPECT_GT(positive, lowered.size() / 2);
    }
  }
}

// The loss, which no op waits for, runs as soon as it is ready: ranked by
// its own time it would run after the whole backward pass, holding the
// logits (gpt2's take a quarter of a device at its peak) all that time.
TEST(Priorities, TheLossRunsAsSoonAsItIsReady) {
  auto w = testing::Make("transformer", testing::TwoNodes());
  ASSERT_NE(w, nullptr);
  const std::string loss = w->graph.loss.output;
  std::string loss_op, loss_grad_op;
  for (const Op& op : w->graph.ops) {
    for (const std::string& out : op.outputs) {
      if (out == loss) loss_op = op.name;
    }
    if (op.type == "SoftmaxCrossEntropyLossGrad") loss_grad_op = op.name;
  }
  ASSERT_FALSE(loss_op.empty());
  ASSERT_FALSE(loss_grad_op.empty());
  for (quilt::v1::ExecutionOrder order : kExecutionOrders) {
    Strategy strategy = testing::EvenRing(*w);
    strategy.set_order(order);
    DistributedProgram p = testing::LowerChecked(*w, strategy, 8);
    SimOptions options;
    options.trace = true;
    absl::StatusOr<SimResult> r = Simulate(p, w->graph, w->topo, *w->cost, options);
    ASSERT_THAT(r.status(), IsOk());
    // Per device: when the loss and the loss's gradient (which the whole
    // backward pass waits for) start.
    std::map<int, double> loss_at, grad_at;
    for (const TraceEvent& e : r->trace) {
      if (e.name == loss_op) loss_at[e.lane] = e.start_s;
      if (e.name == loss_grad_op) grad_at[e.lane] = e.start_s;
    }
    ASSERT_EQ(loss_at.size(), static_cast<size_t>(w->topo.num_devices()));
    for (const auto& [device, at] : loss_at) {
      ASSERT_TRUE(grad_at.count(device)) << device;
      EXPECT_LE(at, grad_at[device]) << "device " << device << " order " << order;
    }
  }
}

}  // namespace
}  // namespace quilt
