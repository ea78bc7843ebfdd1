// Measures a CPU device's speed at worker start: fp32 GEMM throughput with
// OpenBLAS (the kernels the CPU runtime uses) and memory copy bandwidth.
// Each measurement runs for about the given duration.
#ifndef QUILT_SRC_CLUSTER_CPU_CALIBRATION_H_
#define QUILT_SRC_CLUSTER_CPU_CALIBRATION_H_

#include "absl/time/time.h"

namespace quilt {

struct CpuSpeed {
  double gemm_flops_per_s = 0;
  double memory_bandwidth_bytes_per_s = 0;
};

// `threads` OpenBLAS threads; square SGEMMs of size 512 for ~`duration`,
// then a triad over 64 MiB arrays for ~duration/4.
CpuSpeed MeasureCpuSpeed(int threads, absl::Duration duration);

}  // namespace quilt

#endif  // QUILT_SRC_CLUSTER_CPU_CALIBRATION_H_
