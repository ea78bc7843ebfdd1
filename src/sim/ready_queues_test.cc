// ReadyQueues against a plain priority queue of (priority, -node): the same
// node taken at every step, over random priorities with ties, devices of
// more than 64 nodes, and nodes readied after better ones were taken.
#include "src/sim/ready_queues.h"

#include <algorithm>
#include <queue>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace quilt::sim_internal {
namespace {

TEST(ReadyQueues, TakesWhatAPriorityQueueTakes) {
  std::mt19937 rng(7);
  const int devices = 3, nodes = 700;
  std::vector<double> priority(nodes);
  std::vector<int> device(nodes);
  for (int n = 0; n < nodes; ++n) {
    priority[n] = static_cast<double>(rng() % 50);  // many ties
    device[n] = n % 5 == 4 ? -1 : static_cast<int>(rng() % devices);
  }
  ReadyQueues q;
  q.Rank(devices, priority, [&](int n) { return device[n]; });
  std::vector<std::priority_queue<std::pair<double, int>>> reference(devices);
  std::vector<int> unqueued;
  for (int n = 0; n < nodes; ++n) {
    if (device[n] >= 0) unqueued.push_back(n);
  }
  std::shuffle(unqueued.begin(), unqueued.end(), rng);
  size_t next = 0;
  int taken = 0;
  while (taken < static_cast<int>(unqueued.size())) {
    // Ready a few, then take one from a device with something queued.
    for (int k = static_cast<int>(rng() % 4); k > 0 && next < unqueued.size(); --k, ++next) {
      const int n = unqueued[next];
      q.Push(device[n], n);
      reference[device[n]].push({priority[n], -n});
    }
    for (int d = 0; d < devices; ++d) {
      ASSERT_EQ(q.Empty(d), reference[d].empty()) << "device " << d;
    }
    const int d = static_cast<int>(rng() % devices);
    if (reference[d].empty()) continue;
    const int expected = -reference[d].top().second;
    reference[d].pop();
    ASSERT_EQ(q.Pop(d), expected) << "step " << taken << ", device " << d;
    ++taken;
  }
  for (int d = 0; d < devices; ++d) EXPECT_TRUE(q.Empty(d));
}

TEST(ReadyQueues, ANodeReadiedTwiceIsQueuedOnce) {
  std::vector<double> priority = {1.0, 2.0};
  ReadyQueues q;
  q.Rank(1, priority, [](int) { return 0; });
  q.Push(0, 0);
  q.Push(0, 0);
  EXPECT_EQ(q.Pop(0), 0);
  EXPECT_TRUE(q.Empty(0));
}

}  // namespace
}  // namespace quilt::sim_internal
