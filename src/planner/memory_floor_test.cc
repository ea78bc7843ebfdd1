// The memory floor: the largest batch is the last whose floor fits; every
// simulated plan of zoo models on shipped clusters holds at least the
// floor across its devices; a batch above the floor's largest fits no
// plan, and the plan report says so.
#include "src/planner/memory_floor.h"

#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/planner/plan.h"
#include "src/planner/planner_test_util.h"

namespace quilt {
namespace {

TEST(MemoryFloor, LargestBatchIsTheLastWhoseFloorFits) {
  MemoryFloor f;
  f.resident_bytes = 1000;
  f.fixed_bytes = 24;
  f.bytes_per_row = 100;
  for (int64_t capacity : {0, 1023, 1024, 1123, 1124, 1125, 99999}) {
    const int64_t b = f.LargestBatch(capacity);
    if (capacity < 1024) {
      EXPECT_EQ(b, 0) << capacity;
      continue;
    }
    EXPECT_LE(f.BytesAt(b), capacity);
    EXPECT_GT(f.BytesAt(b + 1), capacity);
  }
  f.bytes_per_row = 0;
  EXPECT_EQ(f.LargestBatch(1024), -1);
  EXPECT_EQ(f.LargestBatch(1023), 0);
}

// The floor counts what the backward pass reads of the forward pass: a
// forward op's output read only by later forward ops is not counted.
TEST(MemoryFloor, CountsOnlyWhatTheBackwardPassReads) {
  auto w = testing::Make("mlp");
  absl::StatusOr<MemoryFloor> f = ComputeMemoryFloor(w->graph);
  ASSERT_THAT(f.status(), IsOk());
  int64_t all_forward_per_row = 0, params = 0;
  const auto producers = w->graph.Producers();
  for (const TensorInfo& t : w->graph.tensors()) {
    if (t.role == TensorRole::kParameter) params += t.shape.NumElements(1) * DTypeSize(t.dtype);
    auto p = producers.find(t.name);
    if (t.shape.HasBatch() && p != producers.end() && w->graph.ops[p->second].forward_op.empty()) {
      all_forward_per_row += t.shape.NumElements(1) * DTypeSize(t.dtype);
    }
  }
  EXPECT_GT(f->bytes_per_row, 0);
  EXPECT_LT(f->bytes_per_row, all_forward_per_row + 4096);
  EXPECT_GE(f->resident_bytes, params);
  Graph inference;
  inference.name = "no backward";
  EXPECT_FALSE(ComputeMemoryFloor(inference).ok());
}

// Every plan simulated in full (baselines and the planner's, fitting or
// not) holds at least the floor across its devices at its peaks.
TEST(MemoryFloor, EveryPlanHoldsAtLeastTheFloor) {
  struct Case {
    std::string model, cluster;
    int64_t batch;
  };
  int checked = 0;
  for (const Case& c : std::vector<Case>{{"gpt2", "heterog_testbed", 16},
                                         {"bert_large", "hap_cluster", 128},
                                         {"vgg19", "nvlink_2x4_v100", 64},
                                         {"transformer", "heterog_testbed", 64}}) {
    SCOPED_TRACE(c.model + " on " + c.cluster);
    auto w = testing::OnShippedCluster(c.model, c.cluster);
    ASSERT_NE(w, nullptr);
    absl::StatusOr<MemoryFloor> f = ComputeMemoryFloor(w->graph);
    ASSERT_THAT(f.status(), IsOk());
    PlanOptions o;
    o.global_batch = c.batch;
    o.strategy = "all";
    o.search.time_budget_s = 2;
    o.search.max_evaluations = 100;
    absl::StatusOr<PlanResult> plan = Plan(w->graph, w->topo, o);
    ASSERT_THAT(plan.status(), IsOk());
    EXPECT_EQ(plan->report.memory_floor().bytes_per_row(), f->bytes_per_row);
    for (const quilt::v1::StrategyEstimate& e : plan->report.estimates()) {
      if (e.memory().empty()) continue;
      int64_t held = 0;
      for (const quilt::v1::DeviceMemory& m : e.memory()) held += m.peak_bytes();
      EXPECT_GE(held, f->BytesAt(c.batch)) << e.name();
      ++checked;
    }
  }
  EXPECT_GE(checked, 16);
}

// The planner searches up to 2 % and at least one row past the floor's
// largest batch; where not even one row fits, at no batch; where any
// batch fits, at every one.
TEST(MemoryFloor, TheSearchMarginIsTwoPercentAndAtLeastOneRow) {
  EXPECT_FALSE(PastTheFloorMargin(75, 74));
  EXPECT_TRUE(PastTheFloorMargin(76, 74));
  EXPECT_FALSE(PastTheFloorMargin(1020, 1000));
  EXPECT_TRUE(PastTheFloorMargin(1021, 1000));
  EXPECT_FALSE(PastTheFloorMargin(1000, 1000));
  EXPECT_FALSE(PastTheFloorMargin(2, 1));
  EXPECT_TRUE(PastTheFloorMargin(3, 1));
  EXPECT_TRUE(PastTheFloorMargin(1, 0));
  EXPECT_FALSE(PastTheFloorMargin(int64_t{1} << 40, -1));
}

// gpt2 on HeteroG's testbed: above the floor's largest batch no strategy
// holding the batch at once fits (micro-batches may: accumulation_test.cc),
// and the report's floor says which batch that is.
TEST(MemoryFloor, NoPlanFitsAboveTheLargestBatch) {
  auto w = testing::OnShippedCluster("gpt2", "heterog_testbed");
  ASSERT_NE(w, nullptr);
  absl::StatusOr<MemoryFloor> f = ComputeMemoryFloor(w->graph);
  ASSERT_THAT(f.status(), IsOk());
  const int64_t capacity = TotalMemoryBytes(w->topo);
  const int64_t largest = f->LargestBatch(capacity);
  ASSERT_GT(largest, 0);
  PlanOptions o;
  o.global_batch = largest + 1;
  o.strategy = "all";
  o.search.time_budget_s = 3;
  o.accumulate = false;  // (the floor is for a batch held at once)
  absl::StatusOr<PlanResult> plan = Plan(w->graph, w->topo, o);
  ASSERT_THAT(plan.status(), IsOk());
  EXPECT_EQ(plan->report.best(), "");
  EXPECT_EQ(plan->report.memory_floor().largest_batch(), largest);
  EXPECT_EQ(plan->report.memory_floor().capacity_bytes(), capacity);
  // Past its search margin the planner says so without searching (at
  // largest + 1, above, it searched).
  for (int64_t batch : {largest + 2, largest + largest / 5}) {
    o.global_batch = batch;
    plan = Plan(w->graph, w->topo, o);
    ASSERT_THAT(plan.status(), IsOk());
    EXPECT_EQ(plan->report.best(), "");
    const quilt::v1::StrategyEstimate* heterog = testing::FindEstimate(plan->report, "heterog");
    ASSERT_NE(heterog, nullptr);
    EXPECT_FALSE(heterog->feasible());
    const bool skipped = PastTheFloorMargin(batch, largest);
    EXPECT_TRUE(skipped) << batch;
    EXPECT_EQ(heterog->infeasible_reason().find("not searched") != std::string::npos, skipped)
        << batch << ": " << heterog->infeasible_reason();
    EXPECT_EQ(heterog->search().plans_evaluated() == 0, skipped) << batch;
  }
}

}  // namespace
}  // namespace quilt
