// How the two-level (hierarchical) all-reduce cuts its buffer, shared by
// the runtime that runs it and the cost model that predicts it, so both
// see the same pieces and parts: within each node the members reduce the
// buffer into `shards` parts (one per member, the smallest node's member
// count), the owners of each shard exchange it across the nodes (each node
// sums a part of it, sized by its NIC, and sends that part's sum to the
// others), and each owner sends its shard back to its node. The buffer
// goes through these phases in `pieces` independent parts, so one piece's
// exchange overlaps the next one's reduction.
#ifndef QUILT_SRC_COMMON_HIERARCHICAL_LAYOUT_H_
#define QUILT_SRC_COMMON_HIERARCHICAL_LAYOUT_H_

#include <algorithm>
#include <cstdint>
#include <vector>

namespace quilt {

// Elements per piece (4 MiB of float32) and the most pieces.
inline constexpr int64_t kHierarchicalPieceElements = 1 << 20;
inline constexpr int kHierarchicalMaxPieces = 16;

struct HierarchicalLayout {
  int shards = 1;
  int pieces = 1;
};

// `nodes` nodes whose smallest holds `min_members` members, `elements`
// float32 values. Message tags carry a member's position and the piece in
// 8 bits each within a node, and (piece, shard, node) in 24 bits across
// nodes: at most 255 shards, and fewer shards or pieces where the 24 bits
// would not hold them (clusters of thousands of nodes).
inline HierarchicalLayout LayoutHierarchical(int nodes, int min_members, int64_t elements) {
  HierarchicalLayout l;
  nodes = std::max(1, nodes);
  constexpr int64_t kTagRoom = int64_t{1} << 24;
  l.shards = static_cast<int>(std::clamp<int64_t>(
      min_members, 1,
      std::min<int64_t>(255, std::max<int64_t>(1, kTagRoom / (kHierarchicalMaxPieces * nodes)))));
  const int64_t wanted = (std::max<int64_t>(0, elements) + kHierarchicalPieceElements - 1) /
                         kHierarchicalPieceElements;
  const int64_t room = std::max<int64_t>(1, kTagRoom / (int64_t{nodes} * l.shards));
  l.pieces = static_cast<int>(
      std::clamp<int64_t>(wanted, 1, std::min<int64_t>(kHierarchicalMaxPieces, room)));
  return l;
}

// The exchange across nodes: the owners of a shard, one per node, each
// sum a part of it (reduce-scatter) and send that part's sum to the others
// (all-gather). With shares f_k of the shard, node k's NIC carries
// max(1 - f_k, (n - 1) f_k) of it out or in per phase, and, while further
// pieces overlap, 1 + (n - 2) f_k each way per piece.
//
// The shares that make the overlapped load equal across nodes' NICs
// (bytes/s; a node too slow to take any gets 0): the slowest NIC then
// carries less than the 2 (n - 1) / n that equal shares or a ring give it.
// Empty (equal shares) with fewer than three nodes or NICs all alike.
inline std::vector<double> NodeShares(const std::vector<double>& bandwidth) {
  const int n = static_cast<int>(bandwidth.size());
  if (n < 3) return {};
  double sum = 0, slowest = bandwidth[0], fastest = bandwidth[0];
  for (double b : bandwidth) {
    sum += b;
    slowest = std::min(slowest, b);
    fastest = std::max(fastest, b);
  }
  if (!(slowest > 0) || fastest <= slowest * 1.01) return {};
  // The fastest time all nodes can reach: the even load (2n - 2) / Σ b,
  // unless the slowest node cannot get below a whole shard (1 / b_min).
  const double t = std::max((2.0 * n - 2) / sum, 1.0 / slowest);
  std::vector<double> shares(n);
  double total = 0;
  for (int k = 0; k < n; ++k) {
    shares[k] = std::max(0.0, (t * bandwidth[k] - 1) / (n - 2));
    total += shares[k];
  }
  for (double& f : shares) f /= total;
  return shares;
}

// Seconds per byte of a piece to exchange `pieces` pieces with `shares`
// (empty: equal) over NICs of `bandwidth`: one piece's two phases, then the
// overlapped load per further piece (latencies aside).
inline double ExchangeSecondsPerByte(const std::vector<double>& bandwidth,
                                     const std::vector<double>& shares, int pieces) {
  const int n = static_cast<int>(bandwidth.size());
  double phase = 0, steady = 0;
  for (int k = 0; k < n; ++k) {
    const double f = shares.empty() ? 1.0 / n : shares[k];
    phase = std::max(phase, std::max(1 - f, (n - 1) * f) / bandwidth[k]);
    steady = std::max(steady, (1 + (n - 2) * f) / bandwidth[k]);
  }
  return 2 * phase + (pieces - 1) * steady;
}

// The shares an exchange of `pieces` pieces takes: NodeShares where they
// beat equal shares over that many pieces (a piece alone favours equal
// shares: its phases do not overlap), else empty (equal). The runtime and
// the cost model both decide by this.
inline std::vector<double> ExchangeShares(const std::vector<double>& bandwidth, int pieces) {
  std::vector<double> shares = NodeShares(bandwidth);
  if (shares.empty() || ExchangeSecondsPerByte(bandwidth, shares, pieces) >=
                            ExchangeSecondsPerByte(bandwidth, {}, pieces)) {
    return {};
  }
  return shares;
}

// Where node k of `n` begins its part of a shard of `len` elements
// (k == n: len), the shares (empty: equal) in the nodes' order.
inline int64_t ShareBegin(const std::vector<double>& shares, int k, int n, int64_t len) {
  if (k >= n) return len;
  if (shares.empty()) return len * k / n;
  double before = 0;
  for (int i = 0; i < k; ++i) before += shares[i];
  return std::min(len, static_cast<int64_t>(before * static_cast<double>(len)));
}

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_HIERARCHICAL_LAYOUT_H_
