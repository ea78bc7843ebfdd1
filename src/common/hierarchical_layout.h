// How the two-level (hierarchical) all-reduce cuts its buffer, shared by
// the runtime that runs it and the cost model that predicts it, so both
// see the same pieces: within each node the members reduce the buffer into
// `shards` parts (one per member, the smallest node's member count), the
// owners of each shard run a ring over the nodes, and each owner sends its
// shard back to its node. The buffer goes through these phases in `pieces`
// independent parts, so one piece's ring overlaps the next one's
// reduction. Message tags name a ring by (piece, shard, node) in 8 bits, so
// pieces × shards × nodes stays within 256 (fewer shards or pieces where
// it would not).
#ifndef QUILT_SRC_COMMON_HIERARCHICAL_LAYOUT_H_
#define QUILT_SRC_COMMON_HIERARCHICAL_LAYOUT_H_

#include <algorithm>
#include <cstdint>

namespace quilt {

// Elements per piece (4 MiB of float32) and the most pieces.
inline constexpr int64_t kHierarchicalPieceElements = 1 << 20;
inline constexpr int kHierarchicalMaxPieces = 16;

struct HierarchicalLayout {
  int shards = 1;
  int pieces = 1;
};

// `nodes` nodes whose smallest holds `min_members` members, `elements`
// float32 values.
inline HierarchicalLayout LayoutHierarchical(int nodes, int min_members, int64_t elements) {
  HierarchicalLayout l;
  nodes = std::max(1, nodes);
  l.shards = std::clamp(min_members, 1, std::max(1, 256 / nodes));
  const int64_t wanted = (std::max<int64_t>(0, elements) + kHierarchicalPieceElements - 1) /
                         kHierarchicalPieceElements;
  const int64_t room = std::max(1, 256 / (nodes * l.shards));
  l.pieces = static_cast<int>(
      std::clamp<int64_t>(wanted, 1, std::min<int64_t>(kHierarchicalMaxPieces, room)));
  return l;
}

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_HIERARCHICAL_LAYOUT_H_
