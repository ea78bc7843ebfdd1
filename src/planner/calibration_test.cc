// Fitting a device's calibration to one-device runs: runs that a known
// calibration would produce give that calibration back.
#include "src/planner/calibration.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/testing/zoo_training.h"

namespace quilt {
namespace {

Graph Training(const std::string& model) { return testing::ZooTrainingGraph(model); }

quilt::v1::Device Cpu() {
  quilt::v1::Device d;
  d.set_id("w0/cpu:0");
  d.set_kind(quilt::v1::DEVICE_KIND_CPU);
  d.set_measured_gemm_flops_per_s(8e10);  // what a start-up GEMM measured
  d.set_memory_bandwidth_bytes_per_s(2e10);
  d.set_memory_bytes(int64_t{8} << 30);
  auto* r = d.add_measured_op_type_rates();
  r->set_op_type("MatMul");
  r->set_flops_per_s(7e10);
  return d;
}

// What the simulator predicts for the device as calibrated by `truth`.
ProfileRun Predicted(const Graph& g, const DeviceCalibration& truth, int64_t rows) {
  // Time in kernels: the prediction without host time per step.
  DeviceCalibration no_host = truth;
  no_host.step_overhead_s = 0;
  ProfileRun run;
  run.rows = rows;
  absl::StatusOr<OneDevicePrediction> kernels =
      PredictOneDevice(g, Calibrated(Cpu(), no_host), rows);
  EXPECT_THAT(kernels.status(), IsOk());
  EXPECT_GT(kernels->peak_bytes, 0);
  run.compute_s = kernels->step_s;
  run.step_s = kernels->step_s + truth.step_overhead_s;
  return run;
}

TEST(Calibration, FitsTheCalibrationThatProducedTheRuns) {
  for (const char* model : {"mlp", "cnn"}) {
    const Graph g = Training(model);
    const DeviceCalibration truth{3e10, 40e-6, 300e-6};
    const ProfileRun large = Predicted(g, truth, 64), small = Predicted(g, truth, 32);
    absl::StatusOr<DeviceCalibration> c = FitCalibration(g, Cpu(), large, small);
    ASSERT_THAT(c.status(), IsOk());
    EXPECT_NEAR(c->flops_per_s / truth.flops_per_s, 1, 0.02) << model;
    EXPECT_NEAR(c->op_overhead_s / truth.op_overhead_s, 1, 0.05) << model;
    EXPECT_NEAR(c->step_overhead_s, truth.step_overhead_s, 1e-9) << model;
    // The fitted device predicts both runs.
    const quilt::v1::Device d = Calibrated(Cpu(), *c);
    for (const ProfileRun& run : {large, small}) {
      absl::StatusOr<OneDevicePrediction> step = PredictOneDevice(g, d, run.rows);
      ASSERT_THAT(step.status(), IsOk());
      EXPECT_NEAR(step->step_s / run.step_s, 1, 0.02) << model << " at " << run.rows << " rows";
    }
  }
}

TEST(Calibration, CalibratedDeviceUsesTheFittedRateForEveryOp) {
  const quilt::v1::Device d = Calibrated(Cpu(), {2e10, 1e-5, 1e-4});
  EXPECT_EQ(d.measured_gemm_flops_per_s(), 2e10);
  EXPECT_EQ(d.measured_op_type_rates_size(), 0);
  EXPECT_EQ(d.measured_op_overhead_s(), 1e-5);
  EXPECT_EQ(d.measured_step_overhead_s(), 1e-4);
  EXPECT_EQ(d.id(), "w0/cpu:0");
}

TEST(Calibration, RunsOfAboutTheSameTimeAreExplainedByTheRateWithinTheBound) {
  const Graph g = Training("mlp");
  // Half the rows took as long: unbounded, the fixed time per op absorbs
  // both runs and the rate goes to infinity.
  const ProfileRun large{64, 11e-3, 10e-3}, small{32, 10.9e-3, 9.9e-3};
  const double bound = 4 * Cpu().measured_gemm_flops_per_s();
  absl::StatusOr<DeviceCalibration> c = FitCalibration(g, Cpu(), large, small, bound);
  ASSERT_THAT(c.status(), IsOk());
  EXPECT_LE(c->flops_per_s, bound);
  absl::StatusOr<OneDevicePrediction> step = PredictOneDevice(g, Calibrated(Cpu(), *c), 64);
  ASSERT_THAT(step.status(), IsOk());
  EXPECT_NEAR(step->step_s / large.step_s, 1, 0.1);
  // A device that cannot do it at any rate within the bound: refused.
  EXPECT_THAT(FitCalibration(g, Cpu(), {64, 1e-9, 1e-9}, {32, 1e-9, 1e-9}, bound),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("beyond")));
}

TEST(Calibration, RejectsRunsItCannotFit) {
  const Graph g = Training("mlp");
  EXPECT_THAT(FitCalibration(g, Cpu(), {32, 1e-3, 9e-4}, {32, 1e-3, 9e-4}),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("two row counts")));
  EXPECT_THAT(FitCalibration(g, Cpu(), {64, 0, 0}, {32, 1e-3, 9e-4}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace quilt
