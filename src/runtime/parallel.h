// A process-wide pool of worker threads for data-parallel loops in CPU
// kernels. ParallelFor splits [0, n) into contiguous chunks of at least
// `grain` iterations; with one thread (or small n) it runs inline.
// OpenBLAS runs single-threaded: GEMMs are split across this same pool
// (kernels/cpu/gemm.h), so the process has one set of compute threads.
#ifndef QUILT_SRC_RUNTIME_PARALLEL_H_
#define QUILT_SRC_RUNTIME_PARALLEL_H_

#include <cstdint>
#include <functional>

namespace quilt {

// n >= 1. Call before running kernels (not concurrently with them).
void SetComputeThreads(int n);
int ComputeThreads();

// Calls fn(begin, end) over disjoint chunks covering [0, n); returns when
// all are done. Not reentrant: fn must not call ParallelFor. Callers on
// several threads at once are safe: one loop uses the pool, the others run
// on their own thread.
void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace quilt

#endif  // QUILT_SRC_RUNTIME_PARALLEL_H_
