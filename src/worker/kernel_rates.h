// Measures the FLOP rate each op type reaches on this host with Quilt's own
// CPU kernels: a few training steps of the zoo's small CNN and MLP, every
// kernel timed per op type, divided into the op registry's FLOPs of those
// ops (what the cost model counts). A large square GEMM (cpu_calibration.h) runs several times
// faster than the small convolutions and GEMMs of real training steps; the cost model uses these
// rates for ops of the measured types.
#ifndef QUILT_SRC_WORKER_KERNEL_RATES_H_
#define QUILT_SRC_WORKER_KERNEL_RATES_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/quilt/v1/cluster.pb.h"

namespace quilt {

// Runs on `threads` kernel threads for about `duration` (at least two steps
// of each model). Types whose ops do no arithmetic (reshapes) are left
// out. Errors: INTERNAL when a calibration model cannot be built or run (a
// bug).
absl::StatusOr<std::vector<quilt::v1::OpTypeRate>> MeasureOpTypeRates(int threads,
                                                                      absl::Duration duration);

}  // namespace quilt

#endif  // QUILT_SRC_WORKER_KERNEL_RATES_H_
