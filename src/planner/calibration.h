// Calibrating a device from one-device runs of a model, as HeteroG profiles
// each op on each device type, for the whole model at once: the FLOP rate,
// fixed time per op and host time per step (outside the ops) that make the
// simulator's prediction of a one-device program match what the executor
// measured at two batch sizes. The coordinator fits it from the workers'
// profile runs of a submitted model (model_profiles.h); executor_bench
// from its own runs.
#ifndef QUILT_SRC_PLANNER_CALIBRATION_H_
#define QUILT_SRC_PLANNER_CALIBRATION_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "proto/quilt/v1/cluster.pb.h"
#include "proto/quilt/v1/program.pb.h"
#include "src/graph/graph.h"

namespace quilt {

// What the executor measured of a one-device program: medians over the
// steps after warm-up.
struct ProfileRun {
  int64_t rows = 0;
  double step_s = 0;     // whole step
  double compute_s = 0;  // in kernels
};

struct DeviceCalibration {
  double flops_per_s = 5e10;
  double op_overhead_s = 0;
  double step_overhead_s = 0;
};

// A program that trains `training_graph` on `device` alone at `rows` per
// step (the device in a one-node cluster). Errors: those of the lowering.
absl::StatusOr<quilt::v1::DistributedProgram> OneDeviceProgram(const Graph& training_graph,
                                                               const quilt::v1::Device& device,
                                                               int64_t rows);

// What the simulator predicts of OneDeviceProgram: the step (its kernels
// and the device's host time per step) and the device's peak memory.
struct OneDevicePrediction {
  double step_s = 0;
  int64_t peak_bytes = 0;
};
absl::StatusOr<OneDevicePrediction> PredictOneDevice(const Graph& training_graph,
                                                     const quilt::v1::Device& device, int64_t rows);

// `device` as calibrated: its GEMM rate, time per op and per step set, its
// op-type rates cleared (the fitted rate is the model's own).
quilt::v1::Device Calibrated(const quilt::v1::Device& device, const DeviceCalibration& c);

// Fits the calibration to runs at two row counts (time in kernels = ops ×
// overhead + work / rate, the memory-bound part not scaling with the rate,
// hence a few rounds). Where no fixed time per op fits (the smaller run
// took less than its share: caches), the rate alone matches the smaller
// run. The host time per step is the smaller run's. A rate above
// `max_flops_per_s` (0 = no bound; what the device can reach at most) means
// the two runs took about as long and the fixed time absorbed them: then
// the rate alone matches the larger run. Errors: INVALID_ARGUMENT for runs
// at equal rows or without positive times, or when even the rate alone is
// beyond the bound.
absl::StatusOr<DeviceCalibration> FitCalibration(const Graph& training_graph,
                                                 const quilt::v1::Device& device,
                                                 const ProfileRun& large, const ProfileRun& small,
                                                 double max_flops_per_s = 0);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_CALIBRATION_H_
