#include "src/planner/plan_budget.h"

#include "gtest/gtest.h"

namespace quilt {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1000);

absl::Time At(double s) { return kStart + absl::Seconds(s); }

TEST(PlanBudgetTest, SearchGetsWhatIsLeftLessTheFullSimulationsShare) {
  const PlanBudget b(kStart, 10);
  // Baselines built in 0.6 s: 9.4 s left, 2.5 s of it kept.
  EXPECT_NEAR(b.SearchSeconds(At(0.6)), 6.9, 1e-9);
  EXPECT_NEAR(b.SearchSeconds(At(0)), 7.5, 1e-9);
  // Baselines that took most of the budget: the search still gets its least.
  EXPECT_NEAR(b.SearchSeconds(At(9)), 2.5, 1e-9);
  EXPECT_NEAR(b.SearchSeconds(At(30)), 2.5, 1e-9);
}

TEST(PlanBudgetTest, FittingWhereAPlanFitsStopsAtTheEnd) {
  const PlanBudget b(kStart, 10);
  EXPECT_NEAR(b.FitSeconds(At(7), /*nothing_fits=*/false), 3, 1e-9);
  EXPECT_NEAR(b.FitSeconds(At(9.4), false), 0.6, 1e-9);
  // Under 5 % of the budget left: not begun.
  EXPECT_EQ(b.FitSeconds(At(9.6), false), 0);
  EXPECT_EQ(b.FitSeconds(At(12), false), 0);
}

TEST(PlanBudgetTest, FittingWhereAPlanFitsLeavesTimeToSimulateItsPlan) {
  const PlanBudget b(kStart, 10);
  // 2.5 s left, its plan simulated in full in 1.8 s: 0.7 s to fit it.
  EXPECT_NEAR(b.FitSeconds(At(7.5), /*nothing_fits=*/false, /*after_s=*/1.8), 0.7, 1e-9);
  // (bert_large at batch 2560 on HAP's cluster: 0.7 s left, 1.8 s to
  // simulate; the repair used to begin and end 1.9 s past the budget.)
  EXPECT_EQ(b.FitSeconds(At(9.3), false, 1.8), 0);
  // Under 5 % of the budget left after the simulations: not begun.
  EXPECT_EQ(b.FitSeconds(At(7.5), false, 2.1), 0);
  // Where nothing fits it goes on past the end all the same.
  EXPECT_NEAR(b.FitSeconds(At(9.3), true, 1.8), 2.5, 1e-9);
}

TEST(PlanBudgetTest, FittingWhereNothingFitsGoesOnPastTheEnd) {
  const PlanBudget b(kStart, 10);
  EXPECT_NEAR(b.FitSeconds(At(2), /*nothing_fits=*/true), 8, 1e-9);
  EXPECT_NEAR(b.FitSeconds(At(9), true), 2.5, 1e-9);
  EXPECT_NEAR(b.FitSeconds(At(40), true), 2.5, 1e-9);
  EXPECT_LT(b.LeftSeconds(At(40)), 0);
}

TEST(PlanBudgetTest, AStepIsBegunWhereItsSimulationFitsWhatIsLeftWithAMargin) {
  const PlanBudget b(kStart, 10);
  // 1.5 × 0.5 s, and 0.4 s kept for the wrap-up: begun up to 8.85 s.
  EXPECT_TRUE(b.Affords(At(8.8), 0.5));
  EXPECT_FALSE(b.Affords(At(8.9), 0.5));
  // (Where it would only just fit what is left: not begun.)
  EXPECT_FALSE(b.Affords(At(9), 0.9));
  EXPECT_FALSE(b.Affords(At(12), 0.7));
  // A simulation of milliseconds is begun even past the end.
  EXPECT_TRUE(b.Affords(At(12), 0.005));
  EXPECT_FALSE(PlanBudget(kStart, 0.1).Affords(At(0.2), 0.005));
}

TEST(PlanBudgetTest, SharesScaleWithTheBudget) {
  const PlanBudget b(kStart, 2);
  EXPECT_NEAR(b.SearchSeconds(At(0.2)), 1.3, 1e-9);
  EXPECT_NEAR(b.FitSeconds(At(1.5), false), 0.5, 1e-9);
  EXPECT_EQ(b.FitSeconds(At(1.95), false), 0);
  EXPECT_NEAR(b.FitSeconds(At(1.95), true), 0.5, 1e-9);
}

}  // namespace
}  // namespace quilt
