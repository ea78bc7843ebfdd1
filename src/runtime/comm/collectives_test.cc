// Buffer ownership of the all-reduces when one of their operations fails:
// `done` reports the first error at once, and the buffer given as the
// spec's owner stays alive until every other send and receive of the same
// all-reduce has finished (they may still read or write it until then).
// The transport here records operations and lets the test finish them one
// by one, in an order a real transport cannot be made to produce on
// demand (one operation failing while the others are still in flight).
#include "src/runtime/comm/collectives.h"

#include <memory>
#include <ostream>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quilt {
namespace {

class RecordingTransport final : public Transport {
 public:
  struct Op {
    bool send = false;
    int peer = 0;
    CommCallback done;
  };
  int rank() const override { return 0; }
  int size() const override { return 4; }
  uint64_t Send(int peer, uint64_t, const void*, size_t, CommCallback done) override {
    ops_.push_back({true, peer, std::move(done)});
    return ops_.size();
  }
  uint64_t Recv(int peer, uint64_t, void*, size_t, CommCallback done) override {
    ops_.push_back({false, peer, std::move(done)});
    return ops_.size();
  }
  void Cancel(uint64_t) override {}
  bool PeerFailed(int) const override { return false; }
  void CancelAll() override {}

  size_t posted() const { return ops_.size(); }
  // Finishes operation i (once) with `s`.
  void Finish(size_t i, const absl::Status& s) {
    CommCallback done = std::move(ops_[i].done);
    ops_[i].done = nullptr;
    done(s);
  }
  bool finished(size_t i) const { return ops_[i].done == nullptr; }

 private:
  std::vector<Op> ops_;
};

struct Case {
  const char* name;
  quilt::v1::AggregationMethod method;
  std::vector<int> ranks, nodes;
  int me;
  // Elements per ring message (0: the default); with several segments,
  // the others go on (receive, add, send) after the first one failed.
  int64_t segment_elements = 0;
  // How the operations after the failed one finish.
  bool others_succeed = false;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class AllReduceOwnership : public ::testing::TestWithParam<Case> {};

TEST_P(AllReduceOwnership, BufferOutlivesTheOperationsAfterAnError) {
  const Case& c = GetParam();
  RecordingTransport t;
  auto buffer = std::make_shared<std::vector<float>>(1024, 1.0f);
  std::weak_ptr<std::vector<float>> alive = buffer;
  AllReduceSpec spec;
  spec.collective_id = 7;
  spec.step = 1;
  spec.method = c.method;
  spec.ranks = c.ranks;
  spec.nodes = c.nodes;
  spec.me = c.me;
  spec.data = buffer->data();
  spec.count = static_cast<int64_t>(buffer->size());
  spec.owner = buffer;
  if (c.segment_elements > 0) spec.segment_elements = c.segment_elements;
  buffer.reset();
  int calls = 0;
  absl::Status result;
  StartAllReduce(&t, spec, [&](absl::Status s) {
    ++calls;
    result = s;
  });
  spec = AllReduceSpec{};  // the collective's own references only
  ASSERT_GE(t.posted(), 2u) << "the case needs two operations in flight at once";
  t.Finish(0, absl::UnavailableError("peer gone"));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(result.code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(alive.expired()) << "the buffer was released while operations were in flight";
  // The others finish (cancelled, as the executor's CancelAll does, or
  // delivered); what they start meanwhile finishes too.
  for (size_t i = 1; i < t.posted(); ++i) {
    EXPECT_FALSE(alive.expired()) << "released before operation " << i << " finished";
    if (!t.finished(i)) {
      t.Finish(i, c.others_succeed ? absl::OkStatus() : absl::CancelledError("cancelled"));
    }
  }
  EXPECT_EQ(calls, 1) << "done runs once";
  EXPECT_TRUE(alive.expired()) << "the buffer outlived every operation";
}

INSTANTIATE_TEST_SUITE_P(
    Methods, AllReduceOwnership,
    ::testing::Values(
        // Ring of two: this member's receive and send of its first step.
        Case{"ring", quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, {0, 1}, {0, 1}, 0},
        // Ring of two in four segments: the three others' receives and
        // sends succeed after the first segment's receive failed, and add
        // into the buffer.
        Case{"ring_segments",
             quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE,
             {0, 1},
             {0, 1},
             0,
             128,
             true},
        // Tree root with two children: both children's sums awaited.
        Case{"tree", quilt::v1::AGGREGATION_METHOD_TREE_ALLREDUCE, {0, 1, 2}, {0, 1, 2}, 0},
        // A node's second member: its send to the leader and the receive
        // of the result.
        Case{"hierarchical_member",
             quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE,
             {0, 1, 2, 3},
             {0, 0, 1, 1},
             1},
        // A leader of a node of three: the two members' sums awaited.
        Case{"hierarchical_leader",
             quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE,
             {0, 1, 2, 3},
             {0, 0, 0, 1},
             0}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace quilt
