// All-reduce (sum) of a float32 buffer over the members of a device group,
// driven by transport callbacks (no thread waits): a ring — reduce-scatter
// then all-gather, each chunk cut into segments that move independently so
// that sending, receiving and adding overlap — or hierarchical (two-level,
// src/common/hierarchical_layout.h): within each node the members send
// each shard to its owner, each shard's owners ring over the nodes and send
// the sums back, in pipelined pieces — or a binary tree (member i's parent is (i - 1) / 2):
// sums flow up to member 0, the total flows back down, whole buffers per
// message (2 ⌊log2 n⌋ levels of messages instead of the ring's 2 (n - 1)
// steps: the choice for small buffers over many members). Every member calls
// StartAllReduce with the same group, id and step; the result (the sum over
// members) replaces each member's buffer.
#ifndef QUILT_SRC_RUNTIME_COMM_COLLECTIVES_H_
#define QUILT_SRC_RUNTIME_COMM_COLLECTIVES_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "proto/quilt/v1/strategy.pb.h"
#include "src/runtime/comm/transport.h"

namespace quilt {

struct AllReduceSpec {
  uint64_t collective_id = 0;
  int64_t step = 0;
  // Per member, in the group's order: the process that hosts it, and its
  // node (hierarchical only).
  std::vector<int> ranks;
  std::vector<int> nodes;
  // Hierarchical only, per member: its node's bandwidth to the other nodes
  // (bytes/s), which sizes the nodes' parts of the exchange across them
  // (empty: equal parts).
  std::vector<double> node_bytes_per_s;
  int me = 0;  // this member's index
  float* data = nullptr;
  int64_t count = 0;
  quilt::v1::AggregationMethod method = quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE;
  // Elements per message (pipelining granularity).
  int64_t segment_elements = 1 << 20;
  // Keeps `data` alive until every send and receive of the all-reduce has
  // finished: after an error `done` runs at once, while other operations
  // of the same all-reduce may still read or write the buffer until they
  // finish or are cancelled. Optional (null: the caller keeps the buffer
  // alive until then).
  std::shared_ptr<const void> owner;
};

// `done` runs once: after the buffer holds the sum, or with the first error.
void StartAllReduce(Transport* transport, const AllReduceSpec& spec, CommCallback done);

}  // namespace quilt

#endif  // QUILT_SRC_RUNTIME_COMM_COLLECTIVES_H_
