// CUDA device discovery through the CUDA runtime (linked statically, so the
// worker runs on hosts without the toolkit; only the driver is needed).
// Without a GPU or driver it reports why, and the worker carries on with
// CPU devices. The memory a GPU offers jobs is its total less a reserve
// (GpuMemoryOffered).
#ifndef QUILT_SRC_CLUSTER_CUDA_DEVICES_H_
#define QUILT_SRC_CLUSTER_CUDA_DEVICES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace quilt {

struct CudaDeviceInfo {
  int ordinal = 0;
  std::string name;
  int64_t memory_bytes = 0;
  int multiprocessors = 0;
  int cc_major = 0;
  int cc_minor = 0;
  // From clock × FP32 lanes per SM × 2; 0 when the clock is not reported.
  double peak_fp32_flops_per_s = 0;
  // From memory clock × bus width × 2 (DDR); 0 when not reported.
  double memory_bandwidth_bytes_per_s = 0;
};

// Errors: UNAVAILABLE with the CUDA error text when no usable GPU/driver is
// present; UNIMPLEMENTED when Quilt was built without CUDA.
absl::StatusOr<std::vector<CudaDeviceInfo>> DiscoverCudaDevices();

// FP32 lanes per SM for a compute capability (0 if unknown).
int Fp32LanesPerSm(int cc_major, int cc_minor);

// The memory a GPU of `total_bytes` offers jobs with `reserve_bytes` kept
// back for what the planner does not count (the CUDA context, library
// workspaces, communicator buffers, allocator slack). Errors:
// INVALID_ARGUMENT for a negative reserve, or one that leaves nothing
// (naming `device`).
absl::StatusOr<int64_t> GpuMemoryOffered(const std::string& device, int64_t total_bytes,
                                         int64_t reserve_bytes);

}  // namespace quilt

#endif  // QUILT_SRC_CLUSTER_CUDA_DEVICES_H_
