// The all-reduces' sums: every member ends with the sum of every member's
// buffer, for each method, over nodes of unequal sizes, buffers smaller
// than the members and buffers of several pieces. Members on one node share
// a process, as the executor's do: their messages are told apart by tag
// alone. The in-memory network here delivers a message when both ends are
// posted, matching a receiver's messages by tag alone as the real transport
// does, and fails the test when two messages in flight to one process carry
// the same tag (which a real transport would mix up) or a message comes
// from another process than the receive names.
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/common/hierarchical_layout.h"
#include "src/runtime/comm/collectives.h"

namespace quilt {
namespace {

class Network {
 public:
  struct Post {
    int from = 0;
    char* recv_into = nullptr;
    const char* send_from = nullptr;
    size_t bytes = 0;
    CommCallback done;
  };
  using Key = std::pair<int, uint64_t>;  // receiving process, tag

  void Send(int from, int to, uint64_t tag, const void* data, size_t bytes, CommCallback done) {
    Post p;
    p.from = from;
    p.send_from = static_cast<const char*>(data);
    p.bytes = bytes;
    p.done = std::move(done);
    Match(Key{to, tag}, &sends_, &recvs_, std::move(p), true);
  }
  void Recv(int from, int to, uint64_t tag, void* data, size_t bytes, CommCallback done) {
    Post p;
    p.from = from;
    p.recv_into = static_cast<char*>(data);
    p.bytes = bytes;
    p.done = std::move(done);
    Match(Key{to, tag}, &recvs_, &sends_, std::move(p), false);
  }
  const std::vector<std::string>& errors() const { return errors_; }
  size_t pending() const { return sends_.size() + recvs_.size(); }

 private:
  void Match(const Key& k, std::map<Key, Post>* mine, std::map<Key, Post>* theirs, Post p,
             bool is_send) {
    auto it = theirs->find(k);
    if (it == theirs->end()) {
      if (mine->count(k)) {
        errors_.push_back(absl::StrCat("two ", is_send ? "sends" : "receives", " in flight to ",
                                       k.first, " with tag ", k.second));
        return;
      }
      mine->emplace(k, std::move(p));
      return;
    }
    Post other = std::move(it->second);
    theirs->erase(it);
    Post& send = is_send ? p : other;
    Post& recv = is_send ? other : p;
    if (send.from != recv.from) {
      errors_.push_back(absl::StrCat("tag ", k.second, ": a message from ", send.from,
                                     " matched a receive from ", recv.from));
      return;
    }
    if (send.bytes != recv.bytes) {
      errors_.push_back(
          absl::StrCat("tag ", k.second, ": ", send.bytes, " bytes sent into ", recv.bytes));
      return;
    }
    std::copy(send.send_from, send.send_from + send.bytes, recv.recv_into);
    send.done(absl::OkStatus());
    recv.done(absl::OkStatus());
  }

  std::map<Key, Post> sends_, recvs_;
  std::vector<std::string> errors_;
};

class NetworkTransport final : public Transport {
 public:
  NetworkTransport(Network* net, int rank, int size) : net_(net), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  uint64_t Send(int peer, uint64_t tag, const void* data, size_t bytes,
                CommCallback done) override {
    net_->Send(rank_, peer, tag, data, bytes, std::move(done));
    return 0;
  }
  uint64_t Recv(int peer, uint64_t tag, void* data, size_t bytes, CommCallback done) override {
    net_->Recv(peer, rank_, tag, data, bytes, std::move(done));
    return 0;
  }
  void Cancel(uint64_t) override {}
  bool PeerFailed(int) const override { return false; }
  void CancelAll() override {}

 private:
  Network* net_;
  int rank_, size_;
};

struct Case {
  std::string name;
  quilt::v1::AggregationMethod method;
  std::vector<int> per_node;  // members of each node (one process each)
  int64_t count;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class AllReduceSums : public ::testing::TestWithParam<Case> {};

TEST_P(AllReduceSums, EveryMemberEndsWithTheSum) {
  const Case& c = GetParam();
  Network net;
  std::vector<std::unique_ptr<NetworkTransport>> transports;
  std::vector<int> ranks;
  for (int node = 0; node < static_cast<int>(c.per_node.size()); ++node) {
    transports.push_back(
        std::make_unique<NetworkTransport>(&net, node, static_cast<int>(c.per_node.size())));
    for (int k = 0; k < c.per_node[node]; ++k) ranks.push_back(node);
  }
  const int n = static_cast<int>(ranks.size());
  // Small integers: every order of summing gives the exact sum.
  std::vector<std::vector<float>> data(n, std::vector<float>(c.count));
  std::vector<float> want(c.count, 0);
  for (int m = 0; m < n; ++m) {
    for (int64_t i = 0; i < c.count; ++i) {
      data[m][i] = static_cast<float>((i * 7 + m * 13) % 11 + m);
      want[i] += data[m][i];
    }
  }
  std::vector<int> calls(n, 0);
  std::vector<absl::Status> results(n);
  for (int m = 0; m < n; ++m) {
    AllReduceSpec spec;
    spec.collective_id = 5;
    spec.step = 3;
    spec.method = c.method;
    spec.ranks = ranks;
    spec.nodes = ranks;  // one process per node
    spec.me = m;
    spec.data = data[m].data();
    spec.count = c.count;
    spec.segment_elements = 1 << 12;  // several ring segments too
    StartAllReduce(transports[ranks[m]].get(), spec, [&calls, &results, m](absl::Status s) {
      ++calls[m];
      results[m] = s;
    });
  }
  ASSERT_TRUE(net.errors().empty()) << net.errors().front();
  EXPECT_EQ(net.pending(), 0u) << "operations never matched";
  for (int m = 0; m < n; ++m) {
    ASSERT_EQ(calls[m], 1) << "member " << m;
    ASSERT_TRUE(results[m].ok()) << results[m];
    int64_t wrong = 0, first = -1;
    for (int64_t i = 0; i < c.count; ++i) {
      if (data[m][i] != want[i]) {
        ++wrong;
        if (first < 0) first = i;
      }
    }
    EXPECT_EQ(wrong, 0) << "member " << m << ": first wrong element " << first << " = "
                        << (first >= 0 ? data[m][first] : 0) << ", want "
                        << (first >= 0 ? want[first] : 0);
  }
}

constexpr auto kHier = quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE;
// Enough elements for several pieces (kHierarchicalPieceElements each).
constexpr int64_t kPieces = 3 * kHierarchicalPieceElements + 5;

INSTANTIATE_TEST_SUITE_P(
    Methods, AllReduceSums,
    ::testing::Values(
        Case{"ring_3x1", quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, {1, 1, 1}, 1001},
        Case{"tree_2x2", quilt::v1::AGGREGATION_METHOD_TREE_ALLREDUCE, {2, 2}, 1001},
        Case{"hierarchical_2x2", kHier, {2, 2}, 1001},
        // Unequal nodes: the third member of the first node
        // owns no shard.
        Case{"hierarchical_3_2", kHier, {3, 2}, 9999},
        Case{"hierarchical_1_3_2", kHier, {1, 3, 2}, 4097},
        Case{"hierarchical_one_node", kHier, {4}, 1000},
        // Fewer elements than shards × pieces: empty shards.
        Case{"hierarchical_tiny", kHier, {3, 3}, 2},
        Case{"hierarchical_pieces_2x2", kHier, {2, 2}, kPieces},
        Case{"hierarchical_pieces_4_4_3", kHier, {4, 4, 3}, kPieces}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// Tags name a ring by (piece, shard, node) in 8 bits: the layout keeps
// their product within 256 on any cluster.
TEST(HierarchicalLayout, PiecesShardsAndNodesFitTheTag) {
  for (int nodes : {1, 2, 3, 8, 32, 100, 256}) {
    for (int members : {1, 2, 4, 8, 16}) {
      for (int64_t elements : {int64_t{0}, int64_t{10}, int64_t{1} << 26}) {
        const HierarchicalLayout l = LayoutHierarchical(nodes, members, elements);
        EXPECT_GE(l.shards, 1);
        EXPECT_LE(l.shards, members);
        EXPECT_GE(l.pieces, 1);
        EXPECT_LE(l.pieces * l.shards * nodes, std::max(256, nodes))
            << nodes << " nodes of " << members << ", " << elements << " elements";
      }
    }
  }
  EXPECT_EQ(LayoutHierarchical(4, 2, int64_t{1} << 26).pieces, kHierarchicalMaxPieces);
  EXPECT_EQ(LayoutHierarchical(4, 2, 10).pieces, 1);
}

}  // namespace
}  // namespace quilt
