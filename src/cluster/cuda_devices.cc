#include "src/cluster/cuda_devices.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"

// Turns a failing CUDA runtime call into UNAVAILABLE naming the call.
#define QUILT_CUDA_RETURN_IF_ERROR(call)                                                        \
  do {                                                                                          \
    cudaError_t quilt_cuda_err_ = (call);                                                       \
    if (quilt_cuda_err_ != cudaSuccess) {                                                       \
      return absl::UnavailableError(absl::StrCat(#call, " failed at ", __FILE__, ":", __LINE__, \
                                                 ": ", cudaGetErrorString(quilt_cuda_err_)));   \
    }                                                                                           \
  } while (0)

namespace quilt {

absl::StatusOr<std::vector<CudaDeviceInfo>> DiscoverCudaDevices() {
  int count = 0;
  QUILT_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  std::vector<CudaDeviceInfo> out;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop;
    QUILT_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, i));
    CudaDeviceInfo d;
    d.ordinal = i;
    d.name = prop.name;
    d.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    d.multiprocessors = prop.multiProcessorCount;
    d.cc_major = prop.major;
    d.cc_minor = prop.minor;
    int clock_khz = 0, mem_clock_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, i) == cudaSuccess &&
        clock_khz > 0) {
      d.peak_fp32_flops_per_s =
          2.0 * Fp32LanesPerSm(d.cc_major, d.cc_minor) * d.multiprocessors * clock_khz * 1e3;
    }
    if (cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, i) == cudaSuccess &&
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, i) == cudaSuccess) {
      d.memory_bandwidth_bytes_per_s = 2.0 * mem_clock_khz * 1e3 * bus_bits / 8.0;
    }
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace quilt
