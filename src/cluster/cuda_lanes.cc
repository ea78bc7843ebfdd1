#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/cluster/cuda_devices.h"

namespace quilt {

int Fp32LanesPerSm(int major, int minor) {
  switch (major) {
    case 6:
      return minor == 0 ? 64 : 128;  // P100 : GTX 10xx
    case 7:
      return 64;  // V100, T4
    case 8:
      return minor == 0 ? 64 : 128;  // A100 : RTX 30xx / L4 / L40
    case 9:
    case 10:
    case 12:
      return 128;  // H100/H200, B200, RTX 50xx
    default:
      return 0;
  }
}

absl::StatusOr<int64_t> GpuMemoryOffered(const std::string& device, int64_t total_bytes,
                                         int64_t reserve_bytes) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  if (reserve_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the GPU memory reserve is negative (", reserve_bytes / kMiB, " MiB)"));
  }
  if (reserve_bytes >= total_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GPU ", device, " has ", total_bytes / kMiB, " MiB of memory; the reserve of ",
        reserve_bytes / kMiB, " MiB (gpu_memory_reserve_mb) leaves it none to offer jobs"));
  }
  return total_bytes - reserve_bytes;
}

}  // namespace quilt
