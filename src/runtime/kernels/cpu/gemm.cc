#include "src/runtime/kernels/cpu/gemm.h"

#include <cblas-openblas.h>

#include <algorithm>

#include "src/runtime/parallel.h"

namespace quilt::cpu {
namespace {

void Call(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

// C = beta · C where k = 0 (BLAS would not touch it); false otherwise.
bool EmptyProduct(int64_t m, int64_t n, int64_t k, float beta, float* c, int64_t ldc) {
  if (k > 0) return false;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0 ? 0.0f : beta * c[i * ldc + j];
  }
  return true;
}

}  // namespace

void SgemmOnThisThread(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                       const float* a, const float* b, float beta, float* c) {
  if (m <= 0 || n <= 0 || EmptyProduct(m, n, k, beta, c, n)) return;
  Call(ta, tb, m, n, k, alpha, a, ta ? m : k, b, tb ? k : n, beta, c, n);
}

void Sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0 || EmptyProduct(m, n, k, beta, c, ldc)) return;
  const int threads = ComputeThreads();
  const double flops = 2.0 * static_cast<double>(m) * n * k;
  if (threads <= 1 || flops < 4e6) {
    Call(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  if (n >= m) {
    // Column blocks of C (multiples of 16 keep the micro-kernel busy).
    const int64_t per = std::max<int64_t>(16, ((n + threads - 1) / threads + 15) / 16 * 16);
    ParallelFor((n + per - 1) / per, 1, [&](int64_t bb, int64_t be) {
      for (int64_t blk = bb; blk < be; ++blk) {
        const int64_t j0 = blk * per, nj = std::min(per, n - j0);
        Call(ta, tb, m, nj, k, alpha, a, lda, tb ? b + j0 * ldb : b + j0, ldb, beta, c + j0, ldc);
      }
    });
  } else {
    const int64_t per = std::max<int64_t>(16, ((m + threads - 1) / threads + 15) / 16 * 16);
    ParallelFor((m + per - 1) / per, 1, [&](int64_t bb, int64_t be) {
      for (int64_t blk = bb; blk < be; ++blk) {
        const int64_t i0 = blk * per, mi = std::min(per, m - i0);
        Call(ta, tb, mi, n, k, alpha, ta ? a + i0 : a + i0 * lda, lda, b, ldb, beta, c + i0 * ldc,
             ldc);
      }
    });
  }
}

}  // namespace quilt::cpu
