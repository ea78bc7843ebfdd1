#include "src/common/cpu_affinity.h"

#include <sched.h>

#include <atomic>
#include <thread>

#include "gtest/gtest.h"

namespace quilt {
namespace {

TEST(CpuListTest, ParsesSinglesAndRangesSortedWithoutRepeats) {
  absl::StatusOr<std::vector<int>> cpus = ParseCpuList("5,0-2,1,7-8");
  ASSERT_TRUE(cpus.ok()) << cpus.status();
  EXPECT_EQ(*cpus, (std::vector<int>{0, 1, 2, 5, 7, 8}));
  EXPECT_EQ(FormatCpuList(*cpus), "0-2,5,7-8");
}

TEST(CpuListTest, BadEntriesNameTheProblem) {
  for (const char* bad : {"", "a", "1,,2", "-1", "3-1", "1-", "0-99999"}) {
    absl::StatusOr<std::vector<int>> cpus = ParseCpuList(bad);
    ASSERT_FALSE(cpus.ok()) << bad;
    EXPECT_EQ(cpus.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(ParseCpuList("3-1").status().message().find("'3-1'"), std::string::npos);
}

// Pins the test process itself (its affinity restored at the end).
TEST(PinTest, PinsEveryThreadAndRefusesCpusItMayNotUse) {
  absl::StatusOr<std::vector<int>> before = AllowedCpus();
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_FALSE(before->empty());
  const int last = before->back();

  // A thread started before pinning is pinned too.
  cpu_set_t seen;
  CPU_ZERO(&seen);
  std::atomic<bool> pinned{false}, checked{false};
  std::thread other([&] {
    while (!pinned.load()) std::this_thread::yield();
    sched_getaffinity(0, sizeof(seen), &seen);
    checked.store(true);
  });
  ASSERT_TRUE(PinProcessToCpus({last}).ok());
  pinned.store(true);
  other.join();
  ASSERT_TRUE(checked.load());
  EXPECT_EQ(CPU_COUNT(&seen), 1);
  EXPECT_TRUE(CPU_ISSET(last, &seen));
  absl::StatusOr<std::vector<int>> now = AllowedCpus();
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(*now, std::vector<int>{last});

  // A CPU outside the allowed set is refused and nothing changes.
  const absl::Status refused = PinProcessToCpus({last + 1});
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find(std::to_string(last + 1)), std::string::npos) << refused;
  EXPECT_EQ(*AllowedCpus(), std::vector<int>{last});

  // Widening again is refused too (only the CPUs allowed now count);
  // restored directly.
  EXPECT_FALSE(PinProcessToCpus(*before).ok() && before->size() > 1);
  cpu_set_t all;
  CPU_ZERO(&all);
  for (int c : *before) CPU_SET(c, &all);
  ASSERT_EQ(sched_setaffinity(0, sizeof(all), &all), 0);
  EXPECT_EQ(*AllowedCpus(), *before);
}

}  // namespace
}  // namespace quilt
