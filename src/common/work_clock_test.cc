// WorkClock: reads its start plus the work charged, whatever the wall does;
// installed per thread; follows the wall only once the wall is far ahead.
#include "src/common/work_clock.h"

#include <thread>

#include "gtest/gtest.h"

namespace quilt {
namespace {

TEST(WorkClock, ReadsWorkChargedNotWallTime) {
  WorkClock clock;
  EXPECT_EQ(clock.Now(), clock.start());
  clock.Charge(absl::Milliseconds(250));
  clock.Charge(absl::Milliseconds(-5));  // (nothing: work is never negative)
  EXPECT_EQ(clock.Now(), clock.start() + absl::Milliseconds(250));
  // Wall time passing without work leaves the reading as it was.
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_EQ(clock.Now(), clock.start() + absl::Milliseconds(250));
  EXPECT_DOUBLE_EQ(clock.WorkSeconds(), 0.25);
  EXPECT_FALSE(clock.FollowedWall());
}

TEST(WorkClock, FollowsTheWallWhenFarBehindIt) {
  // Started long ago with little work: the wall is past kWallFactor times the
  // work plus the grace.
  WorkClock clock(absl::Now() - absl::Seconds(60));
  clock.Charge(absl::Seconds(1));
  const absl::Time read = clock.Now();
  EXPECT_TRUE(clock.FollowedWall());
  EXPECT_GT(read, clock.start() + absl::Seconds(59));
  // Never back, even once the work would not be behind any more.
  clock.Charge(absl::Seconds(30));
  EXPECT_GE(clock.Now(), read);
}

TEST(WorkClock, InstalledPerThreadAndRestored) {
  EXPECT_EQ(WorkClock::Current(), nullptr);
  WorkClock outer, inner;
  {
    WorkClock::Scope a(&outer);
    EXPECT_EQ(WorkClock::Current(), &outer);
    {
      WorkClock::Scope b(&inner);
      ChargeWork(absl::Milliseconds(7));
      EXPECT_EQ(WorkNow(), inner.start() + absl::Milliseconds(7));
    }
    EXPECT_EQ(WorkClock::Current(), &outer);
    // Another thread sees no clock until it installs one; its charges then
    // add to the same clock.
    std::thread t([&] {
      EXPECT_EQ(WorkClock::Current(), nullptr);
      ChargeWork(absl::Seconds(5));  // (no clock: nothing charged)
      WorkClock::Scope c(&outer);
      ChargeWork(absl::Milliseconds(3));
    });
    t.join();
    ChargeWork(absl::Milliseconds(2));
  }
  EXPECT_EQ(WorkClock::Current(), nullptr);
  EXPECT_EQ(outer.Now(), outer.start() + absl::Milliseconds(5));
  EXPECT_EQ(inner.Now(), inner.start() + absl::Milliseconds(7));
}

TEST(WorkTimer, CountsAllThreadsOrThisThreadsWork) {
  WorkClock clock;
  WorkClock::Scope scope(&clock);
  const WorkTimer all;
  const WorkTimer mine(/*own_thread=*/true);
  std::thread t([&] {
    WorkClock::Scope s(&clock);
    ChargeWork(absl::Milliseconds(40));
  });
  t.join();
  ChargeWork(absl::Milliseconds(10));
  EXPECT_DOUBLE_EQ(all.Seconds(), 0.05);
  EXPECT_DOUBLE_EQ(mine.Seconds(), 0.01);
}

TEST(WorkTimer, ReadsTheWallWithoutAClock) {
  const WorkTimer t;
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_GE(t.Seconds(), 0.019);
}

}  // namespace
}  // namespace quilt
