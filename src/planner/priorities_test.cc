// Priorities: lowering ranks instructions by the ops and peers it knows
// (HeftPriorities' hints); ranking the lowered program again by the names
// in its instructions (Reprioritize) gives the same ranks, for
// computations, transfers, parameter-server pushes and pulls, and
// collectives, in both execution orders.
#include "src/planner/priorities.h"

#include <set>

#include "gtest/gtest.h"
#include "src/planner/baselines.h"
#include "src/planner/lower.h"
#include "src/planner/planner_test_util.h"

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

}  // namespace
}  // namespace quilt
