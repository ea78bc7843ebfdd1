// A NodeInfo for tests: `devices` CPU devices ("<id>/cpu:<i>") of 100
// GFLOP/s and 1 GiB each, and a probe address "<id>.local:4000".
#ifndef QUILT_SRC_TESTING_NODE_INFO_H_
#define QUILT_SRC_TESTING_NODE_INFO_H_

#include <string>

#include "proto/quilt/v1/cluster.pb.h"

namespace quilt::testing {

inline quilt::v1::NodeInfo CpuNodeInfo(const std::string& id, int devices = 1) {
  quilt::v1::NodeInfo info;
  info.set_node_id(id);
  info.set_address(id + ".local:4000");
  for (int i = 0; i < devices; ++i) {
    auto* d = info.add_devices();
    d->set_id(id + "/cpu:" + std::to_string(i));
    d->set_kind(quilt::v1::DEVICE_KIND_CPU);
    d->set_index(i);
    d->set_measured_gemm_flops_per_s(1e11);
    d->set_memory_bytes(1 << 30);
  }
  return info;
}

}  // namespace quilt::testing

#endif  // QUILT_SRC_TESTING_NODE_INFO_H_
