// Builds this host's NodeInfo for registration: CPU devices (the host's
// cores split into `cpu_devices` devices, each calibrated with OpenBLAS) and
// CUDA devices when present, plus what is known of the host's links.
#ifndef QUILT_SRC_CLUSTER_LOCAL_NODE_H_
#define QUILT_SRC_CLUSTER_LOCAL_NODE_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/quilt/v1/cluster.pb.h"
#include "src/cluster/cpu_calibration.h"

namespace quilt {

struct LocalNodeOptions {
  std::string node_id;
  // The worker's own service endpoint, if any.
  std::string address;
  std::string version;
  // CPU devices to expose; the cores are split evenly between them.
  int cpu_devices = 1;
  // Cores to use in all (0 = every core in the affinity mask).
  int cpu_cores = 0;
  // Kernel threads an executor runs a CPU device's kernels on: the speed is
  // measured with as many (0 = all of the device's cores).
  int kernel_threads = 0;
  // Duration of the GEMM calibration.
  absl::Duration calibration = absl::Seconds(1);
  bool discover_cuda = true;
  // Development: every device's kernels run this many times slower.
  double compute_slowdown = 1.0;
  // Memory the CPU devices offer, in all (0: the host's). More than the
  // host has is refused.
  int64_t cpu_memory_bytes = 0;
  // Memory each GPU keeps back from what it offers jobs (GpuMemoryOffered).
  int64_t gpu_memory_reserve_bytes = int64_t{1} << 30;
  // A CPU speed known already (an earlier calibration of this host): used
  // as measured instead of calibrating again.
  std::optional<CpuSpeed> cpu_speed;
};

// Errors: INVALID_ARGUMENT for impossible options (more CPU devices than
// cores, non-positive slowdown).
absl::StatusOr<quilt::v1::NodeInfo> DiscoverLocalNode(const LocalNodeOptions& options);

}  // namespace quilt

#endif  // QUILT_SRC_CLUSTER_LOCAL_NODE_H_
