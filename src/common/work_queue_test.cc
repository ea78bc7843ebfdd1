// The work queue runs tasks in order, refuses tasks past its bound, and
// runs every accepted task before Shutdown returns.
#include "src/common/work_queue.h"

#include <atomic>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace quilt {
namespace {

TEST(WorkQueue, RunsTasksInOrderOnOneThread) {
  std::vector<int> order;
  {
    WorkQueue q(1, 100);
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(q.Submit([&order, i] { order.push_back(i); }));
  }
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
}

TEST(WorkQueue, RefusesTasksPastTheBoundAndAfterShutdown) {
  WorkQueue q(1, 2);
  absl::Notification started, release;
  ASSERT_TRUE(q.Submit([&] {
    started.Notify();
    release.WaitForNotification();
  }));
  started.WaitForNotification();
  std::atomic<int> ran{0};
  EXPECT_TRUE(q.Submit([&] { ++ran; }));
  EXPECT_TRUE(q.Submit([&] { ++ran; }));
  EXPECT_FALSE(q.Submit([&] { ++ran; }));  // two already wait
  EXPECT_EQ(q.pending(), 3);
  release.Notify();
  q.Shutdown();
  EXPECT_EQ(ran.load(), 2);  // accepted tasks ran; the refused one did not
  EXPECT_FALSE(q.Submit([&] { ++ran; }));
  EXPECT_EQ(q.pending(), 0);
}

}  // namespace
}  // namespace quilt
