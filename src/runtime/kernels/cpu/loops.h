// Loop helpers for CPU kernels: element-wise loops over contiguous buffers
// and numpy-broadcast binary loops, parallelized over rows with ParallelFor.
#ifndef QUILT_SRC_RUNTIME_KERNELS_CPU_LOOPS_H_
#define QUILT_SRC_RUNTIME_KERNELS_CPU_LOOPS_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "src/runtime/parallel.h"

namespace quilt::cpu {

inline constexpr int64_t kGrain = 1 << 15;

inline int64_t Numel(const std::vector<int64_t>& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

// Strides (in elements) of `in` broadcast to `out` (right-aligned, 0 on
// broadcast dims), with out's rank.
inline std::vector<int64_t> BroadcastStrides(const std::vector<int64_t>& in,
                                             const std::vector<int64_t>& out) {
  std::vector<int64_t> s(out.size(), 0);
  int64_t stride = 1;
  for (int i = static_cast<int>(in.size()) - 1, j = static_cast<int>(out.size()) - 1; i >= 0;
       --i, --j) {
    s[j] = in[i] == 1 ? 0 : stride;
    stride *= in[i];
  }
  return s;
}

// out[i] = f(x[i]) for n elements.
template <typename F>
void MapUnary(const float* x, float* out, int64_t n, F f) {
  ParallelFor(n, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = f(x[i]);
  });
}

// out[i] = f(x[i], y[i]) for n elements.
template <typename F>
void MapBinary(const float* x, const float* y, float* out, int64_t n, F f) {
  ParallelFor(n, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = f(x[i], y[i]);
  });
}

// out = f(a, b) with numpy broadcasting of a (dims da) and b (dims db) to
// out's dims.
template <typename F>
void BroadcastBinary(const float* a, const std::vector<int64_t>& da, const float* b,
                     const std::vector<int64_t>& db, float* out, const std::vector<int64_t>& dout,
                     F f) {
  const int64_t n = Numel(dout);
  if (da == dout && db == dout) {
    MapBinary(a, b, out, n, f);
    return;
  }
  if (dout.empty()) {
    out[0] = f(a[0], b[0]);
    return;
  }
  const std::vector<int64_t> sa = BroadcastStrides(da, dout), sb = BroadcastStrides(db, dout);
  const int r = static_cast<int>(dout.size());
  const int64_t inner = dout[r - 1];
  const int64_t ia = sa[r - 1], ib = sb[r - 1];
  const int64_t rows = inner == 0 ? 0 : n / inner;
  ParallelFor(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(inner, 1)),
              [&](int64_t rb, int64_t re) {
                for (int64_t row = rb; row < re; ++row) {
                  int64_t oa = 0, ob = 0, rem = row;
                  for (int d = r - 2; d >= 0; --d) {
                    const int64_t idx = rem % dout[d];
                    rem /= dout[d];
                    oa += idx * sa[d];
                    ob += idx * sb[d];
                  }
                  const float* pa = a + oa;
                  const float* pb = b + ob;
                  float* po = out + row * inner;
                  if (ia && ib) {
                    for (int64_t i = 0; i < inner; ++i) po[i] = f(pa[i], pb[i]);
                  } else if (ia) {
                    const float vb = pb[0];
                    for (int64_t i = 0; i < inner; ++i) po[i] = f(pa[i], vb);
                  } else if (ib) {
                    const float va = pa[0];
                    for (int64_t i = 0; i < inner; ++i) po[i] = f(va, pb[i]);
                  } else {
                    const float v = f(pa[0], pb[0]);
                    for (int64_t i = 0; i < inner; ++i) po[i] = v;
                  }
                }
              });
}

}  // namespace quilt::cpu

#endif  // QUILT_SRC_RUNTIME_KERNELS_CPU_LOOPS_H_
