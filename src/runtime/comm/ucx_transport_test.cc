// The UCX transport between two processes on this machine (the test and a
// forked child): large and small messages arrive intact both ways over the
// same-machine endpoints, a message of the wrong size is reported (a
// shorter one waiting before the receive too), and a
// peer killed while a large send to it and a receive from it wait fails
// both, naming the peer, within seconds — the endpoint that carries the
// data has no failure handling of its own, so this checks the one that
// watches the peer; messages arrive while the compute waits (the progress
// thread polling) and after; the two-level all-reduce sums over two
// processes, and over four whose nodes' parts follow unequal bandwidths;
// the direct all-reduce sums over two processes.
#include "src/runtime/comm/ucx_transport.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <numeric>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/hierarchical_layout.h"
#include "src/common/status_matchers.h"
#include "src/runtime/comm/collectives.h"
#include "src/runtime/comm/tags.h"
#include "src/testing/temp_dir.h"

namespace quilt {
namespace {

using ::testing::HasSubstr;

constexpr size_t kLarge = size_t{16} << 20;

absl::StatusOr<std::unique_ptr<Transport>> Connect(int rank, const std::string& dir) {
  DirectoryRendezvous rdv(dir);
  return CreateUcxTransport(rank, 2, &rdv, absl::Seconds(30), {"parent", "child"});
}

uint64_t Tag(int i) { return MakeTag(0, TagKind::kTransfer, static_cast<uint64_t>(i)); }

// Runs `body` in a child process as rank 1; returns its pid.
template <typename Body>
pid_t Fork(const std::string& dir, Body body) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  absl::StatusOr<std::unique_ptr<Transport>> t = Connect(1, dir);
  _exit(t.ok() ? body(t->get()) : 10);
}

// An operation's outcome, waited for with a limit.
struct Outcome {
  absl::Notification done;
  absl::Status status;
  CommCallback Callback() {
    return [this](absl::Status s) {
      status = std::move(s);
      done.Notify();
    };
  }
};

TEST(UcxTransportTest, LargeAndSmallMessagesArriveIntactBothWays) {
  testing::TempDir dir;
  const pid_t child = Fork(dir.path(), [](Transport* t) {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    std::vector<float> big(kLarge / sizeof(float));
    int64_t small = 0;
    if (!RecvSync(t, 0, Tag(1), big.data(), kLarge, deadline).ok()) return 1;
    if (!RecvSync(t, 0, Tag(2), &small, sizeof(small), deadline).ok()) return 2;
    for (float& x : big) x += static_cast<float>(small);
    if (!SendSync(t, 0, Tag(3), big.data(), kLarge, deadline).ok()) return 3;
    char oversize[100] = {};
    if (!SendSync(t, 0, Tag(4), oversize, sizeof(oversize), deadline).ok()) return 4;
    // Shorter than expected, and there before the receive is posted.
    char undersize[16] = {};
    if (!SendSync(t, 0, Tag(5), undersize, sizeof(undersize), deadline).ok()) return 6;
    return Barrier(t, 1, deadline).ok() ? 0 : 5;
  });
  absl::StatusOr<std::unique_ptr<Transport>> t = Connect(0, dir.path());
  ASSERT_THAT(t.status(), IsOk());
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  std::vector<float> big(kLarge / sizeof(float));
  std::iota(big.begin(), big.end(), 0.0f);
  const int64_t small = 7;
  ASSERT_THAT(SendSync(t->get(), 1, Tag(1), big.data(), kLarge, deadline), IsOk());
  ASSERT_THAT(SendSync(t->get(), 1, Tag(2), &small, sizeof(small), deadline), IsOk());
  std::vector<float> back(big.size(), -1.0f);
  ASSERT_THAT(RecvSync(t->get(), 1, Tag(3), back.data(), kLarge, deadline), IsOk());
  for (size_t i = 0; i < big.size(); i += 4099) ASSERT_EQ(back[i], big[i] + 7.0f) << i;
  EXPECT_EQ(back.back(), big.back() + 7.0f);
  char expected[64];
  const absl::Status wrong = RecvSync(t->get(), 1, Tag(4), expected, sizeof(expected), deadline);
  EXPECT_EQ(wrong.code(), absl::StatusCode::kDataLoss) << wrong;
  EXPECT_THAT(wrong.message(), HasSubstr("rank 1 (child)"));
  EXPECT_THAT(Barrier(t->get(), 1, deadline), IsOk());
  absl::SleepFor(absl::Milliseconds(100));  // the short message waits, unexpected
  const absl::Status short_one =
      RecvSync(t->get(), 1, Tag(5), expected, sizeof(expected), deadline);
  EXPECT_EQ(short_one.code(), absl::StatusCode::kDataLoss) << short_one;
  EXPECT_THAT(short_one.message(), HasSubstr("16 bytes arrived, 64 expected"));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// While this process's compute waits, the progress thread polls for a
// while and then sleeps again: messages that come within the polling
// window and well after it both arrive, and so do those after the wait.
TEST(UcxTransportTest, MessagesArriveWhileTheComputeWaitsAndAfter) {
  testing::TempDir dir;
  const absl::Duration later = absl::Seconds(3 * kUcxIdleSpinSeconds);
  const pid_t child = Fork(dir.path(), [later](Transport* t) {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    int64_t v = 1;
    if (!Barrier(t, 1, deadline).ok()) return 1;
    if (!SendSync(t, 0, Tag(1), &v, sizeof(v), deadline).ok()) return 2;
    absl::SleepFor(later);
    v = 2;
    if (!SendSync(t, 0, Tag(2), &v, sizeof(v), deadline).ok()) return 3;
    if (!RecvSync(t, 0, Tag(3), &v, sizeof(v), deadline).ok()) return 4;
    return SendSync(t, 0, Tag(4), &v, sizeof(v), deadline).ok() ? 0 : 5;
  });
  absl::StatusOr<std::unique_ptr<Transport>> t = Connect(0, dir.path());
  ASSERT_THAT(t.status(), IsOk());
  (*t)->SetComputeIdle(true);
  int64_t first = 0, second = 0;
  Outcome a, b;
  (*t)->Recv(1, Tag(1), &first, sizeof(first), a.Callback());
  (*t)->Recv(1, Tag(2), &second, sizeof(second), b.Callback());
  ASSERT_THAT(Barrier(t->get(), 1, absl::Now() + absl::Seconds(30)), IsOk());
  ASSERT_TRUE(a.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(b.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_THAT(a.status, IsOk());
  EXPECT_THAT(b.status, IsOk());
  EXPECT_EQ(first, 1);
  EXPECT_EQ(second, 2);
  (*t)->SetComputeIdle(false);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  int64_t v = 40;
  ASSERT_THAT(SendSync(t->get(), 1, Tag(3), &v, sizeof(v), deadline), IsOk());
  ASSERT_THAT(RecvSync(t->get(), 1, Tag(4), &v, sizeof(v), deadline), IsOk());
  EXPECT_EQ(v, 40);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(UcxTransportTest, KilledPeerFailsWaitingSendAndReceiveWithinSeconds) {
  testing::TempDir dir;
  const pid_t child = Fork(dir.path(), [](Transport* t) {
    if (!Barrier(t, 1, absl::Now() + absl::Seconds(30)).ok()) return 1;
    pause();  // never receives what the parent sends
    return 0;
  });
  absl::StatusOr<std::unique_ptr<Transport>> t = Connect(0, dir.path());
  ASSERT_THAT(t.status(), IsOk());
  ASSERT_THAT(Barrier(t->get(), 1, absl::Now() + absl::Seconds(30)), IsOk());
  std::vector<char> big(kLarge, 1), in(64);
  Outcome send, recv;
  (*t)->Send(1, Tag(1), big.data(), big.size(), send.Callback());
  (*t)->Recv(1, Tag(2), in.data(), in.size(), recv.Callback());
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(send.done.HasBeenNotified()) << "nobody received the send";
  ASSERT_EQ(kill(child, SIGKILL), 0);
  waitpid(child, nullptr, 0);
  const absl::Time killed = absl::Now();
  ASSERT_TRUE(send.done.WaitForNotificationWithTimeout(absl::Seconds(10)))
      << "a send to a killed peer still waits";
  ASSERT_TRUE(recv.done.WaitForNotificationWithTimeout(absl::Seconds(10)))
      << "a receive from a killed peer still waits";
  EXPECT_LT(absl::Now() - killed, absl::Seconds(10));
  for (const absl::Status& s : {send.status, recv.status}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_THAT(s.message(), HasSubstr("rank 1 (child)"));
    EXPECT_THAT(s.message(), HasSubstr("the peer failed"));
  }
  EXPECT_TRUE((*t)->PeerFailed(1));
  // Later operations fail at once.
  const absl::Status after =
      SendSync(t->get(), 1, Tag(3), in.data(), in.size(), absl::Now() + absl::Seconds(5));
  EXPECT_EQ(after.code(), absl::StatusCode::kUnavailable) << after;
}

// An all-reduce over UCX (the two-level one unless `method` says), rank
// `rank`'s two members of `nodes` processes of two each (the members of a
// process message each other through the same transport, told apart by
// tag), the nodes' bandwidths `bandwidth` (empty: none given); 0 once both
// have summed.
int RunHierarchical(
    Transport* t, int rank, std::vector<std::vector<float>>* data, int nodes = 2,
    const std::vector<double>& bandwidth = {},
    quilt::v1::AggregationMethod method = quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE) {
  const int64_t count = static_cast<int64_t>((*data)[0].size());
  std::vector<std::unique_ptr<Outcome>> outcomes;
  for (int k = 0; k < 2; ++k) {
    AllReduceSpec spec;
    spec.collective_id = 9;
    spec.step = 1;
    spec.method = method;
    for (int n = 0; n < nodes; ++n) spec.ranks.insert(spec.ranks.end(), {n, n});
    spec.nodes = spec.ranks;
    for (int r : spec.ranks) {
      if (!bandwidth.empty()) spec.node_bytes_per_s.push_back(bandwidth[r]);
    }
    spec.me = rank * 2 + k;
    spec.data = (*data)[k].data();
    spec.count = count;
    outcomes.push_back(std::make_unique<Outcome>());
    StartAllReduce(t, spec, outcomes.back()->Callback());
  }
  for (auto& o : outcomes) {
    if (!o->done.WaitForNotificationWithTimeout(absl::Seconds(60)) || !o->status.ok()) return 1;
  }
  return 0;
}

// Member m's element i (small integers: the sum is exact in any order).
float Value(int m, int64_t i) { return static_cast<float>((i * 3 + m * 5) % 7 + m); }

// An all-reduce of `count` elements by `method` over two processes of two
// members each: every member ends with the exact sum.
void SumsOverTwoProcesses(quilt::v1::AggregationMethod method, int64_t count) {
  testing::TempDir dir;
  auto fill = [count](int rank) {
    std::vector<std::vector<float>> data(2, std::vector<float>(count));
    for (int k = 0; k < 2; ++k) {
      for (int64_t i = 0; i < count; ++i) data[k][i] = Value(rank * 2 + k, i);
    }
    return data;
  };
  auto wrong = [count](const std::vector<std::vector<float>>& data) {
    int64_t bad = 0;
    for (const auto& d : data) {
      for (int64_t i = 0; i < count; ++i) {
        float want = 0;
        for (int m = 0; m < 4; ++m) want += Value(m, i);
        bad += d[i] != want;
      }
    }
    return bad;
  };
  const pid_t child = Fork(dir.path(), [&](Transport* t) {
    std::vector<std::vector<float>> data = fill(1);
    if (RunHierarchical(t, 1, &data, 2, {}, method) != 0) return 1;
    if (wrong(data) != 0) return 2;
    return Barrier(t, 1, absl::Now() + absl::Seconds(60)).ok() ? 0 : 3;
  });
  absl::StatusOr<std::unique_ptr<Transport>> t = Connect(0, dir.path());
  ASSERT_THAT(t.status(), IsOk());
  std::vector<std::vector<float>> data = fill(0);
  ASSERT_EQ(RunHierarchical(t->get(), 0, &data, 2, {}, method), 0);
  EXPECT_EQ(wrong(data), 0);
  EXPECT_THAT(Barrier(t->get(), 1, absl::Now() + absl::Seconds(60)), IsOk());
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// A buffer of three pieces.
TEST(UcxTransportTest, TwoLevelAllReduceSumsOverTwoProcesses) {
  SumsOverTwoProcesses(quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE,
                       2 * kHierarchicalPieceElements + 12345);
}

// A small sum, as the lowering gives the direct all-reduce.
TEST(UcxTransportTest, DirectAllReduceSumsOverTwoProcesses) {
  SumsOverTwoProcesses(quilt::v1::AGGREGATION_METHOD_DIRECT_ALLREDUCE, 1000);
}

// Four processes (nodes) of two members each, the first node's bandwidth
// twice the others': the exchange across nodes sums parts of 0.7 and 0.1
// of each shard over four pieces; every member ends with the exact sum.
TEST(UcxTransportTest, TwoLevelAllReduceWithPartsByBandwidthOverFourProcesses) {
  testing::TempDir dir;
  constexpr int kNodes = 4;
  const int64_t count = 3 * kHierarchicalPieceElements + 777;  // four pieces
  ASSERT_EQ(LayoutHierarchical(kNodes, 2, count).pieces, 4);
  ASSERT_FALSE(ExchangeShares({2e9, 1e9, 1e9, 1e9}, 4).empty());
  auto connect = [&dir](int rank) {
    DirectoryRendezvous rdv(dir.path());
    return CreateUcxTransport(rank, kNodes, &rdv, absl::Seconds(30), {"n0", "n1", "n2", "n3"});
  };
  // Runs rank `rank`'s two members; the number of wrong elements, or -1.
  auto run = [count](Transport* t, int rank) -> int64_t {
    std::vector<std::vector<float>> data(2, std::vector<float>(count));
    for (int k = 0; k < 2; ++k) {
      for (int64_t i = 0; i < count; ++i) data[k][i] = Value(rank * 2 + k, i);
    }
    if (RunHierarchical(t, rank, &data, kNodes, {2e9, 1e9, 1e9, 1e9}) != 0) return -1;
    int64_t bad = 0;
    for (const auto& d : data) {
      for (int64_t i = 0; i < count; ++i) {
        float want = 0;
        for (int m = 0; m < 2 * kNodes; ++m) want += Value(m, i);
        bad += d[i] != want;
      }
    }
    return bad;
  };
  std::vector<pid_t> children;
  for (int rank = 1; rank < kNodes; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      absl::StatusOr<std::unique_ptr<Transport>> t = connect(rank);
      if (!t.ok()) _exit(10);
      const int64_t bad = run(t->get(), rank);
      if (bad != 0) _exit(bad < 0 ? 1 : 2);
      _exit(Barrier(t->get(), 1, absl::Now() + absl::Seconds(60)).ok() ? 0 : 3);
    }
    children.push_back(pid);
  }
  absl::StatusOr<std::unique_ptr<Transport>> t = connect(0);
  ASSERT_THAT(t.status(), IsOk());
  EXPECT_EQ(run(t->get(), 0), 0);
  EXPECT_THAT(Barrier(t->get(), 1, absl::Now() + absl::Seconds(60)), IsOk());
  for (pid_t child : children) {
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
}

}  // namespace
}  // namespace quilt
