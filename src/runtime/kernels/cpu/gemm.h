// Row-major SGEMM on OpenBLAS, parallelized over Quilt's compute threads:
// OpenBLAS itself runs single-threaded (see SetComputeThreads), and large
// products are split into column (or row) blocks, one per thread, so there
// is one thread pool in the process instead of two competing for cores.
#ifndef QUILT_SRC_RUNTIME_KERNELS_CPU_GEMM_H_
#define QUILT_SRC_RUNTIME_KERNELS_CPU_GEMM_H_

#include <cstdint>

namespace quilt::cpu {

// C[m,n] = alpha · op(A) · op(B) + beta · C, with leading dimensions.
void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Dense operands (lda/ldb/ldc implied by the shapes).
inline void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, const float* b, float beta, float* c) {
  Sgemm(trans_a, trans_b, m, n, k, alpha, a, trans_a ? m : k, b, trans_b ? k : n, beta, c, n);
}

// A dense product on the calling thread alone: for the body of a
// ParallelFor, which must not start another (many small products, such as
// one per group of a grouped convolution, run side by side instead).
void SgemmOnThisThread(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const float* a, const float* b, float beta, float* c);

}  // namespace quilt::cpu

#endif  // QUILT_SRC_RUNTIME_KERNELS_CPU_GEMM_H_
