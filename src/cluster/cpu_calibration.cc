#include "src/cluster/cpu_calibration.h"

#include <cblas-openblas.h>

#include <algorithm>
#include <vector>

#include "absl/time/clock.h"

namespace quilt {
namespace {

double MeasureGemm(int threads, absl::Duration duration) {
  constexpr int n = 512;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n, 0.0f);
  openblas_set_num_threads(std::max(1, threads));
  auto gemm = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
  };
  gemm();  // warm-up: thread pool start, page faults
  int64_t calls = 0;
  const absl::Time start = absl::Now();
  absl::Duration elapsed;
  do {
    gemm();
    ++calls;
    elapsed = absl::Now() - start;
  } while (elapsed < duration || calls < 3);
  return 2.0 * n * n * n * calls / absl::ToDoubleSeconds(elapsed);
}

double MeasureBandwidth(absl::Duration duration) {
  constexpr size_t kElems = (64 << 20) / sizeof(float);
  std::vector<float> x(kElems, 1.0f), y(kElems, 2.0f), z(kElems, 0.0f);
  int64_t passes = 0;
  const absl::Time start = absl::Now();
  absl::Duration elapsed;
  do {
    for (size_t i = 0; i < kElems; ++i) z[i] = x[i] + 0.5f * y[i];
    ++passes;
    elapsed = absl::Now() - start;
  } while (elapsed < duration || passes < 2);
  // Two streams read, one written.
  volatile float sink = z[kElems / 2];
  (void)sink;
  return 3.0 * sizeof(float) * kElems * passes / absl::ToDoubleSeconds(elapsed);
}

}  // namespace

CpuSpeed MeasureCpuSpeed(int threads, absl::Duration duration) {
  CpuSpeed s;
  s.gemm_flops_per_s = MeasureGemm(threads, duration);
  s.memory_bandwidth_bytes_per_s = MeasureBandwidth(duration / 4);
  return s;
}

}  // namespace quilt
