#include <cuda_runtime.h>

#include "src/runtime/cuda/probe_kernel.h"

namespace quilt::cuda {
namespace {

__global__ void Saxpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

}  // namespace

int SaxpyOnDevice(int n, float a, const float* x, float* y) {
  float *dx = nullptr, *dy = nullptr;
  const size_t bytes = sizeof(float) * n;
  cudaError_t err = cudaMalloc(&dx, bytes);
  if (err == cudaSuccess) err = cudaMalloc(&dy, bytes);
  if (err == cudaSuccess) err = cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice);
  if (err == cudaSuccess) err = cudaMemcpy(dy, y, bytes, cudaMemcpyHostToDevice);
  if (err == cudaSuccess) {
    Saxpy<<<(n + 255) / 256, 256>>>(n, a, dx, dy);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess) err = cudaMemcpy(y, dy, bytes, cudaMemcpyDeviceToHost);
  cudaFree(dx);
  cudaFree(dy);
  return static_cast<int>(err);
}

}  // namespace quilt::cuda
