// A trivial CUDA kernel used by quilt-cuda-probe to prove that .cu code is
// compiled, linked and (on a GPU) runs.
#ifndef QUILT_SRC_RUNTIME_CUDA_PROBE_KERNEL_H_
#define QUILT_SRC_RUNTIME_CUDA_PROBE_KERNEL_H_

namespace quilt::cuda {

// y[i] = a * x[i] + y[i] for i < n, on device 0, through device buffers.
// Returns the cudaError_t value (0 = success).
int SaxpyOnDevice(int n, float a, const float* x, float* y);

}  // namespace quilt::cuda

#endif  // QUILT_SRC_RUNTIME_CUDA_PROBE_KERNEL_H_
