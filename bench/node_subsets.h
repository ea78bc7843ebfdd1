// The data-parallel baselines over the fastest nodes alone, for
// planner_bench --node-subsets: on a cluster whose slow nodes sit behind
// slow links, data parallelism over its fastest nodes can beat data
// parallelism over every device, and a user would compare with that too.
// Nodes are ranked by their devices' mean modeled speed (peak FP32 rate ×
// efficiency), fastest first; each prefix of 1 to all-but-one nodes is
// planned with the four data-parallel baselines (the single-device one on
// a single device) at the same global batch.
#ifndef QUILT_BENCH_NODE_SUBSETS_H_
#define QUILT_BENCH_NODE_SUBSETS_H_

#include <cstdint>
#include <vector>

#include "nlohmann/json.hpp"
#include "proto/quilt/v1/cluster.pb.h"
#include "src/graph/graph.h"

namespace quilt {

// The specs of the 1, 2, … (nodes − 1) fastest nodes.
std::vector<quilt::v1::ClusterSpec> FastestNodePrefixes(const quilt::v1::ClusterSpec& spec);

// The fastest feasible data-parallel baseline over any such prefix:
// {"nodes", "devices", "strategy", "step_s"}; null where none fits (or
// the cluster has one node).
nlohmann::json BestNodeSubsetBaseline(const Graph& training_graph,
                                      const quilt::v1::ClusterSpec& spec, int64_t global_batch);

}  // namespace quilt

#endif  // QUILT_BENCH_NODE_SUBSETS_H_
