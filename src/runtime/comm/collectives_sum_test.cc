// The all-reduces' sums: every member ends with the sum of every member's
// buffer, for each method, over nodes of unequal sizes, buffers smaller
// than the members and buffers of several pieces. Members on one node share
// a process, as the executor's do: their messages are told apart by tag
// alone. The in-memory network here delivers a message when both ends are
// posted, matching a receiver's messages by tag alone as the real transport
// does, and fails the test when two messages in flight to one process carry
// the same tag (which a real transport would mix up) or a message comes
// from another process than the receive names.
#include <cstring>
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
    if (from != to) {
      if (sent_across_.size() <= static_cast<size_t>(from)) sent_across_.resize(from + 1);
      sent_across_[from] += bytes;
    }
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
  // Bytes process `from` sent to other processes.
  size_t sent_across(int from) const {
    return static_cast<size_t>(from) < sent_across_.size() ? sent_across_[from] : 0;
  }

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
  std::vector<size_t> sent_across_;
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
  std::vector<double> nics = {};  // per node, its NIC's bandwidth (empty: none given)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Runs the all-reduce of case `c` on `net`; every member must end with
// the sum of all members' buffers.
void RunCase(const Case& c, Network& net);

class AllReduceSums : public ::testing::TestWithParam<Case> {};

TEST_P(AllReduceSums, EveryMemberEndsWithTheSum) {
  Network net;
  RunCase(GetParam(), net);
}

void RunCase(const Case& c, Network& net) {
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
    for (int r : ranks) {
      if (!c.nics.empty()) spec.node_bytes_per_s.push_back(c.nics[r]);
    }
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
        Case{"direct_3_2_1", quilt::v1::AGGREGATION_METHOD_DIRECT_ALLREDUCE, {3, 2, 1}, 1001},
        Case{"direct_one_element", quilt::v1::AGGREGATION_METHOD_DIRECT_ALLREDUCE, {2, 2}, 1},
        // Unequal nodes: the third member of the first node
        // owns no shard.
        Case{"hierarchical_3_2", kHier, {3, 2}, 9999},
        Case{"hierarchical_1_3_2", kHier, {1, 3, 2}, 4097},
        Case{"hierarchical_one_node", kHier, {4}, 1000},
        // Fewer elements than shards × pieces: empty shards.
        Case{"hierarchical_tiny", kHier, {3, 3}, 2},
        Case{"hierarchical_pieces_2x2", kHier, {2, 2}, kPieces},
        Case{"hierarchical_pieces_4_4_3", kHier, {4, 4, 3}, kPieces},
        // NICs of different speeds: parts of unequal sizes across nodes
        // (with one piece, and with several), and a node too slow to sum
        // any part.
        Case{"hierarchical_nics_2_2_2_2", kHier, {2, 2, 2, 2}, 5003, {2, 1, 1, 1}},
        Case{"hierarchical_pieces_nics_2_1_3_2", kHier, {2, 1, 3, 2}, kPieces, {1, 4, 1, 2}},
        Case{"hierarchical_pieces_nics_slow_node", kHier, {2, 2, 2, 2}, kPieces, {10, 10, 10, 1}}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// The direct all-reduce adds the members' buffers in member order on every
// member: with values whose sum rounds, every member still ends with the
// same bits (and with the sum in that order).
TEST(DirectAllReduce, EveryMemberEndsWithTheSameBits) {
  Network net;
  const std::vector<int> ranks = {0, 0, 1, 2, 2};  // members' processes
  std::vector<std::unique_ptr<NetworkTransport>> transports;
  for (int r = 0; r < 3; ++r) transports.push_back(std::make_unique<NetworkTransport>(&net, r, 3));
  const int n = static_cast<int>(ranks.size());
  const int64_t count = 777;
  std::vector<std::vector<float>> data(n, std::vector<float>(count));
  std::vector<float> want(count, 0);
  for (int64_t i = 0; i < count; ++i) {
    for (int m = 0; m < n; ++m) {
      data[m][i] = 1.0f / static_cast<float>(3 + 7 * m + i % 13) * (m % 2 == 0 ? 1e4f : 1e-3f);
      want[i] += data[m][i];  // member order
    }
  }
  std::vector<absl::Status> results(n, absl::UnknownError("not run"));
  for (int m = 0; m < n; ++m) {
    AllReduceSpec spec;
    spec.collective_id = 7;
    spec.step = 1;
    spec.method = quilt::v1::AGGREGATION_METHOD_DIRECT_ALLREDUCE;
    spec.ranks = ranks;
    spec.nodes = ranks;
    spec.me = m;
    spec.data = data[m].data();
    spec.count = count;
    StartAllReduce(transports[ranks[m]].get(), spec,
                   [&results, m](absl::Status s) { results[m] = s; });
  }
  ASSERT_TRUE(net.errors().empty()) << net.errors().front();
  for (int m = 0; m < n; ++m) {
    ASSERT_TRUE(results[m].ok()) << m << ": " << results[m];
    EXPECT_EQ(std::memcmp(data[m].data(), want.data(), count * sizeof(float)), 0) << m;
  }
}

// Across nodes, a node sends (1 + (n - 2) f) of the buffer for its share
// f: with a NIC twice as fast as the other three, it sums 0.7 of every
// shard and sends twice their bytes, where equal parts would have every
// node send 1.5 buffers.
TEST(HierarchicalExchange, NodesSendInProportionToTheirNics) {
  for (const std::vector<double>& nics : {std::vector<double>{2, 1, 1, 1}, std::vector<double>{}}) {
    Network net;
    const Case c{"nics", kHier, {2, 2, 2, 2}, kPieces, nics};
    RunCase(c, net);
    const double buffer = static_cast<double>(kPieces) * sizeof(float);
    for (int node = 0; node < 4; ++node) {
      const double want = nics.empty() ? 1.5 : (node == 0 ? 2.4 : 1.2);
      EXPECT_NEAR(static_cast<double>(net.sent_across(node)) / buffer, want, 1e-3)
          << "node " << node << (nics.empty() ? ", equal parts" : ", NICs 2:1:1:1");
    }
  }
}

TEST(HierarchicalExchange, SharesLevelTheNicsLoad) {
  const std::vector<double> nics = {12.5e9, 6.25e9, 6.25e9, 6.25e9};
  const std::vector<double> f = NodeShares(nics);
  ASSERT_EQ(f.size(), 4u);
  EXPECT_NEAR(f[0], 0.7, 1e-9);
  EXPECT_NEAR(f[1], 0.1, 1e-9);
  // Every NIC busy as long: (1 + 2 f) / bandwidth.
  for (int k = 1; k < 4; ++k)
    EXPECT_NEAR((1 + 2 * f[k]) / nics[k], (1 + 2 * f[0]) / nics[0], 1e-20);
  // Less than equal parts over several pieces; a piece alone keeps equal
  // parts, whose two phases take less.
  EXPECT_LT(ExchangeSecondsPerByte(nics, f, 16), ExchangeSecondsPerByte(nics, {}, 16));
  EXPECT_EQ(ExchangeShares(nics, 16), f);
  EXPECT_TRUE(ExchangeShares(nics, 1).empty());
  // A NIC too slow for any part sums none; NICs alike and two nodes keep
  // equal parts.
  const std::vector<double> slow = NodeShares({10, 10, 10, 1});
  ASSERT_EQ(slow.size(), 4u);
  EXPECT_EQ(slow[3], 0);
  EXPECT_NEAR(slow[0], 1.0 / 3, 1e-12);
  EXPECT_TRUE(NodeShares({5, 5, 5}).empty());
  EXPECT_TRUE(NodeShares({1, 9}).empty());
  // Parts cover the shard in order.
  EXPECT_EQ(ShareBegin(f, 0, 4, 1000), 0);
  EXPECT_EQ(ShareBegin(f, 1, 4, 1000), 700);
  EXPECT_EQ(ShareBegin(f, 4, 4, 1000), 1000);
  EXPECT_EQ(ShareBegin({}, 2, 4, 1000), 500);
}

// The layout's pieces, shards and nodes fit the tags: (piece, shard,
// node) in 24 bits, at most 255 shards and 16 pieces; a large buffer gets
// every piece it can use up to that on clusters of many nodes too.
TEST(HierarchicalLayout, PiecesShardsAndNodesFitTheTag) {
  for (int nodes : {1, 2, 3, 8, 32, 100, 256, 5000, 100000}) {
    for (int members : {1, 2, 4, 8, 16, 300}) {
      for (int64_t elements : {int64_t{0}, int64_t{10}, int64_t{1} << 26}) {
        const HierarchicalLayout l = LayoutHierarchical(nodes, members, elements);
        EXPECT_GE(l.shards, 1);
        EXPECT_LE(l.shards, std::min(members, 255));
        EXPECT_GE(l.pieces, 1);
        EXPECT_LE(l.pieces, kHierarchicalMaxPieces);
        EXPECT_LE(int64_t{l.pieces} * l.shards * nodes, std::max<int64_t>(int64_t{1} << 24, nodes))
            << nodes << " nodes of " << members << ", " << elements << " elements";
      }
    }
  }
  EXPECT_EQ(LayoutHierarchical(4, 2, int64_t{1} << 26).pieces, kHierarchicalMaxPieces);
  EXPECT_EQ(LayoutHierarchical(32, 8, int64_t{1} << 26).pieces, kHierarchicalMaxPieces);
  EXPECT_EQ(LayoutHierarchical(32, 8, int64_t{1} << 26).shards, 8);
  EXPECT_EQ(LayoutHierarchical(4, 2, 10).pieces, 1);
}

}  // namespace
}  // namespace quilt
