// quilt-cuda-probe: proves the CUDA/NCCL build. Prints the CUDA runtime and
// NCCL versions, the GPU count (or why there is none) and, on a GPU, runs a
// kernel and checks its result. Exit 0 when everything that can run here
// worked; 1 when a GPU is present and the kernel failed.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "src/runtime/cuda/probe_kernel.h"

int main() {
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  int nccl = 0;
  ncclResult_t nr = ncclGetVersion(&nccl);
  std::printf("cuda_runtime_version=%d\n", runtime);
  std::printf("nccl_version=%d nccl_status=%s\n", nccl, ncclGetErrorString(nr));
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    std::printf("gpus=0 reason=\"%s\"\n", cudaGetErrorString(err));
    return 0;
  }
  std::printf("gpus=%d\n", count);
  if (count == 0) return 0;
  const int n = 1 << 20;
  std::vector<float> x(n, 2.0f), y(n, 1.0f);
  int rc = quilt::cuda::SaxpyOnDevice(n, 3.0f, x.data(), y.data());
  if (rc != 0) {
    std::printf("kernel=failed error=\"%s\"\n", cudaGetErrorString(static_cast<cudaError_t>(rc)));
    return 1;
  }
  for (int i = 0; i < n; ++i) {
    if (std::fabs(y[i] - 7.0f) > 1e-6f) {
      std::printf("kernel=wrong index=%d value=%f\n", i, y[i]);
      return 1;
    }
  }
  std::printf("kernel=ok\n");
  return 0;
}
