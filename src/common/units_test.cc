// Durations for people: µs below a millisecond, ms below ten seconds, s
// above; leftovers of float sums below a nanosecond read as zero, not in
// scientific notation.
#include "src/common/units.h"

#include <limits>

#include "gtest/gtest.h"

namespace quilt {
namespace {

TEST(HumanSeconds, PicksTheUnitAndHidesRoundingLeftovers) {
  EXPECT_EQ(HumanSeconds(5.95e-14), "0 µs");
  EXPECT_EQ(HumanSeconds(0), "0 µs");
  EXPECT_EQ(HumanSeconds(2.5e-4), "250 µs");
  EXPECT_EQ(HumanSeconds(0.0123), "12.3 ms");
  EXPECT_EQ(HumanSeconds(12.5), "12.50 s");
  EXPECT_EQ(HumanSeconds(-1), "-");
  EXPECT_EQ(HumanSeconds(std::numeric_limits<double>::infinity()), "-");
}

}  // namespace
}  // namespace quilt
