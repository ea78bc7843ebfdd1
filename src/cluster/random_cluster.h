// Seeded random heterogeneous clusters for planner benchmarks and tests:
// 2–8 nodes of 1–8 GPUs each, one GPU model per node drawn from several
// generations (published fp32 peaks, memory and bandwidth; the training
// efficiencies of the shipped specs), NICs of 10–200 Gbit/s, PCIe or NVLink
// inside nodes. Same seed, same cluster.
#ifndef QUILT_SRC_CLUSTER_RANDOM_CLUSTER_H_
#define QUILT_SRC_CLUSTER_RANDOM_CLUSTER_H_

#include <cstdint>

#include "proto/quilt/v1/cluster.pb.h"

namespace quilt {

quilt::v1::ClusterSpec RandomCluster(uint64_t seed);

}  // namespace quilt

#endif  // QUILT_SRC_CLUSTER_RANDOM_CLUSTER_H_
