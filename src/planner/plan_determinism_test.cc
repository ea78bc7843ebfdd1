// A seed gives one plan whatever the machine's load: the planner's budget
// is counted on its clock of work (src/common/work_clock.h), so a search
// that its budget ends, and a batch planned as micro-batches where nothing
// fits, come out the same with both cores busy with other work as on an
// idle machine.
#include <atomic>
#include <thread>
#include <vector>

#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/planner/plan.h"
#include "src/planner/planner_test_util.h"

namespace quilt {
namespace {

using google::protobuf::util::MessageDifferencer;

// Threads that keep every core busy while alive.
class Load {
 public:
  Load() {
    const unsigned n = std::max(2u, std::thread::hardware_concurrency());
    for (unsigned i = 0; i < n; ++i) {
      threads_.emplace_back([this] {
        volatile uint64_t x = 1;
        while (!stop_.load(std::memory_order_relaxed)) x = x * 6364136223846793005ULL + 1;
      });
    }
  }
  ~Load() {
    stop_ = true;
    for (std::thread& t : threads_) t.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

void ExpectSamePlan(const PlanResult& a, const PlanResult& b) {
  EXPECT_EQ(a.report.best(), b.report.best());
  const quilt::v1::StrategyEstimate* x = testing::FindEstimate(a.report, "heterog");
  const quilt::v1::StrategyEstimate* y = testing::FindEstimate(b.report, "heterog");
  ASSERT_NE(x, nullptr);
  ASSERT_NE(y, nullptr);
  EXPECT_TRUE(MessageDifferencer::Equals(x->strategy(), y->strategy()))
      << x->strategy().ShortDebugString() << "\nvs\n"
      << y->strategy().ShortDebugString();
  EXPECT_EQ(x->step_time_s(), y->step_time_s());
  EXPECT_EQ(x->search().plans_evaluated(), y->search().plans_evaluated());
  EXPECT_EQ(x->search().plans_ruled_out(), y->search().plans_ruled_out());
  EXPECT_EQ(x->search().untried(), y->search().untried());
  EXPECT_EQ(a.report.planning_work_s(), b.report.planning_work_s());
  EXPECT_FALSE(a.report.planning_clock_followed_wall());
  EXPECT_FALSE(b.report.planning_clock_followed_wall());
}

TEST(PlanDeterminism, SearchEndedByItsBudgetGivesOnePlanUnderLoad) {
  auto w = testing::OnShippedCluster("inception_v3", "hap_cluster");
  ASSERT_NE(w, nullptr);
  PlanOptions o;
  o.global_batch = 256;
  o.strategy = "heterog";
  o.search.time_budget_s = 0.5;
  o.search.seed = 7;
  absl::StatusOr<PlanResult> idle = Plan(w->graph, w->topo, o);
  ASSERT_THAT(idle.status(), IsOk());
  const quilt::v1::StrategyEstimate* e = testing::FindEstimate(idle->report, "heterog");
  ASSERT_NE(e, nullptr);
  // (The budget, not the search's end, stopped it: what the wall's time
  // would make vary.)
  ASSERT_EQ(e->search().stopped_by(), "time budget");
  absl::StatusOr<PlanResult> loaded;
  {
    const Load load;
    loaded = Plan(w->graph, w->topo, o);
  }
  ASSERT_THAT(loaded.status(), IsOk());
  ExpectSamePlan(*idle, *loaded);
}

// Four devices of 2 GiB: vgg19 at 160 fits only as micro-batches, whose
// tries are begun by the budget.
TEST(PlanDeterminism, MicroBatchTriesGiveOnePlanUnderLoad) {
  auto w = testing::Make("vgg19", testing::TwoNodesWithMemory({int64_t{2} << 30}));
  ASSERT_NE(w, nullptr);
  PlanOptions o;
  o.global_batch = 160;
  o.strategy = "heterog";
  o.search.time_budget_s = 0.5;
  absl::StatusOr<PlanResult> idle = Plan(w->graph, w->topo, o);
  ASSERT_THAT(idle.status(), IsOk());
  ASSERT_EQ(idle->report.best(), "heterog");
  EXPECT_GT(idle->report.accumulation_wall_s(), 0);
  absl::StatusOr<PlanResult> loaded;
  {
    const Load load;
    loaded = Plan(w->graph, w->topo, o);
  }
  ASSERT_THAT(loaded.status(), IsOk());
  ExpectSamePlan(*idle, *loaded);
}

}  // namespace
}  // namespace quilt
