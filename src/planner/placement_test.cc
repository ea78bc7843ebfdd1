// SplitBatch: a group's rows in proportion to its devices' replica
// counts, contiguous, the leftover rows to the largest remainders (ties:
// the most replicas, then the earlier device).
#include "src/planner/placement.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace quilt {
namespace {

// "device:begin-end" per slice.
std::string Rows(const std::vector<Slice>& slices) {
  std::string out;
  for (const Slice& s : slices) {
    out += (out.empty() ? "" : " ") + std::to_string(s.device) + ":" + std::to_string(s.begin) +
           "-" + std::to_string(s.end);
  }
  return out;
}

TEST(SplitBatch, ProportionalWithTheLeftoverRowsToTheLargestRemainders) {
  // 16 over 3 : 2 : 2 is 6.86, 4.57, 4.57: 7, 5 (the earlier of a tie), 4.
  EXPECT_EQ(Rows(SplitBatch({{0, 3}, {1, 2}, {2, 2}}, 16)), "0:0-7 1:7-12 2:12-16");
  // Exact shares stay exact.
  EXPECT_EQ(Rows(SplitBatch({{4, 1}, {5, 1}, {6, 4}}, 6)), "4:0-1 5:1-2 6:2-6");
}

TEST(SplitBatch, FewerRowsThanReplicas_GoToTheDevicesWithTheMost) {
  // One row over counts 1 and 2: the device of 2 takes it, wherever listed.
  EXPECT_EQ(Rows(SplitBatch({{0, 1}, {1, 2}}, 1)), "1:0-1");
  EXPECT_EQ(Rows(SplitBatch({{1, 2}, {0, 1}}, 1)), "1:0-1");
  // Remainders tie (2 · 1 / 4 and 2 · 3 / 4 both leave 2): the device of 3.
  EXPECT_EQ(Rows(SplitBatch({{0, 1}, {1, 3}}, 2)), "1:0-2");
  // Equal counts: the earlier devices.
  EXPECT_EQ(Rows(SplitBatch({{0, 1}, {1, 1}, {2, 1}}, 2)), "0:0-1 1:1-2");
}

TEST(SplitBatch, EveryRowOnceInOrder) {
  for (int64_t batch = 1; batch <= 40; ++batch) {
    const std::vector<Slice> s = SplitBatch({{0, 5}, {1, 1}, {2, 3}, {3, 2}}, batch);
    int64_t next = 0;
    for (const Slice& r : s) {
      EXPECT_EQ(r.begin, next) << batch;
      EXPECT_GT(r.end, r.begin) << batch;
      next = r.end;
    }
    EXPECT_EQ(next, batch);
  }
}

}  // namespace
}  // namespace quilt
