// Message tags of a training step. A tag is unique among the messages of
// one job within a window of 4096 steps, and names its receiver where two
// receivers could share a process: step (12 bits) | kind (4) | id (24) |
// sub (24: collective step, segment and receiving member).
#ifndef QUILT_SRC_RUNTIME_COMM_TAGS_H_
#define QUILT_SRC_RUNTIME_COMM_TAGS_H_

#include <cstdint>

namespace quilt {

enum class TagKind : uint64_t {
  kTransfer = 1,        // Send/Recv of the program (id: its tag)
  kPush = 2,            // parameter-server push (id: its tag)
  kPull = 3,            // parameter-server pull (id: its tag)
  kReduceScatter = 4,   // ring all-reduce, first half (id: collective)
  kAllGather = 5,       // ring all-reduce, second half
  kGatherToLeader = 6,  // hierarchical all-reduce, within a node
  kFromLeader = 7,      // hierarchical all-reduce, back within a node
  kBarrier = 8,         // process barrier (id: its number, sub: the rank)
  kTreeUp = 9,          // tree all-reduce, child to parent (sub: the child)
  kTreeDown = 10,       // tree all-reduce, parent to child (sub: the child)
  kAcrossScatter = 11,  // hierarchical all-reduce, a node's part to its owner
  kAcrossGather = 12,   // hierarchical all-reduce, a part's sum to the others
  kDirect = 13,         // direct all-reduce, a member's buffer to another
};

inline uint64_t MakeTag(int64_t step, TagKind kind, uint64_t id, uint64_t sub = 0) {
  return (static_cast<uint64_t>(step) & 0xFFF) << 52 | (static_cast<uint64_t>(kind) & 0xF) << 48 |
         (id & 0xFFFFFF) << 24 | (sub & 0xFFFFFF);
}

// sub of a collective message: its step, segment and receiving member.
inline uint64_t CollectiveSub(int step, int segment, int member) {
  return (static_cast<uint64_t>(step) & 0xFF) << 16 | (static_cast<uint64_t>(segment) & 0xFF) << 8 |
         (static_cast<uint64_t>(member) & 0xFF);
}

}  // namespace quilt

#endif  // QUILT_SRC_RUNTIME_COMM_TAGS_H_
