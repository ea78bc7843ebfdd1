// Heartbeat beats while it lives, not after, and not at all without a
// function or a positive interval.
#include "src/common/heartbeat.h"

#include <atomic>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace quilt {
namespace {

TEST(Heartbeat, BeatsWhileItLivesAndNeverAfter) {
  std::atomic<int> beats{0};
  {
    Heartbeat h(absl::Milliseconds(1), [&] { ++beats; });
    while (beats.load() < 3) absl::SleepFor(absl::Milliseconds(1));
  }
  const int at_end = beats.load();
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(beats.load(), at_end);
}

TEST(Heartbeat, EndsAtOnceWhenItsIntervalIsLong) {
  std::atomic<int> beats{0};
  const absl::Time start = absl::Now();
  {
    Heartbeat h(absl::Hours(1), [&] { ++beats; });
  }
  EXPECT_EQ(beats.load(), 0);
  // (The destructor does not wait out the interval.)
  EXPECT_LT(absl::Now() - start, absl::Minutes(1));
}

TEST(Heartbeat, NoFunctionOrNoIntervalNoThread) {
  std::atomic<int> beats{0};
  {
    Heartbeat none(absl::Milliseconds(1), nullptr);
    Heartbeat zero(absl::ZeroDuration(), [&] { ++beats; });
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(beats.load(), 0);
}

}  // namespace
}  // namespace quilt
