// Batch norm's statistics about the running mean: on values far from 0
// against their spread (1e4 ± 1), with the running mean near the batch
// mean, the output keeps float32 precision, which sums of x and x² about 0
// lose (their difference cancels to nothing).
#include <cmath>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status.h"
#include "src/common/status_matchers.h"
#include "src/graph/graph_builder.h"
#include "src/graph/validate.h"
#include "src/runtime/graph_runner.h"

namespace quilt {
namespace {

constexpr int64_t kRows = 64, kChannels = 2;

// Y and the new running mean of batch norm over `x` [kRows, kChannels]
// with running mean `rm` (every channel), shifted by it or not.
absl::StatusOr<std::map<std::string, Tensor>> Normalize(const std::vector<float>& x, float rm,
                                                        bool shifted) {
  Graph g;
  GraphBuilder b(&g);
  ASSIGN_OR_RETURN(std::string xs, b.AddConstant("x", Tensor::FromF32({kRows, kChannels}, x)));
  ASSIGN_OR_RETURN(std::string rms, b.AddConstant("rm", Tensor::FromF32({kChannels}, {rm, rm})));
  ASSIGN_OR_RETURN(std::string rvs, b.AddConstant("rv", Tensor::FromF32({kChannels}, {1, 1})));
  ASSIGN_OR_RETURN(std::string scale, b.AddConstant("scale", Tensor::FromF32({kChannels}, {1, 1})));
  ASSIGN_OR_RETURN(std::string bias, b.AddConstant("bias", Tensor::FromF32({kChannels}, {0, 0})));
  std::vector<std::string> stats_in = {xs};
  if (shifted) stats_in.push_back(rms);
  ASSIGN_OR_RETURN(std::vector<std::string> stats, b.AddOp("BatchNormStats", stats_in, {}, 2, "s"));
  Attrs a;
  a.SetInt("shifted", shifted ? 1 : 0);
  ASSIGN_OR_RETURN(std::vector<std::string> outs,
                   b.AddOp("BatchNormApply", {xs, stats[0], stats[1], scale, bias, rms, rvs},
                           std::move(a), 3, "bn"));
  RETURN_IF_ERROR(ValidateGraph(&g));
  ASSIGN_OR_RETURN(std::unique_ptr<GraphRunner> runner, GraphRunner::Create(g, {}));
  ASSIGN_OR_RETURN(auto got, runner->Evaluate({}, {outs[0], outs[1]}));
  return std::map<std::string, Tensor>{{"y", got.at(outs[0])}, {"rm", got.at(outs[1])}};
}

TEST(BatchNormShift, KeepsPrecisionForALargeMeanNearTheRunningMean) {
  std::mt19937 rng(5);
  std::normal_distribution<float> noise(0, 1);
  std::vector<float> x(kRows * kChannels);
  for (float& v : x) v = 10000.0f + noise(rng);
  // The exact normalization of these float values, in double.
  std::vector<double> want(x.size());
  double batch_mean[kChannels];
  for (int64_t c = 0; c < kChannels; ++c) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < kRows; ++i) mean += x[i * kChannels + c];
    mean /= kRows;
    for (int64_t i = 0; i < kRows; ++i) var += std::pow(x[i * kChannels + c] - mean, 2);
    var /= kRows;
    batch_mean[c] = mean;
    for (int64_t i = 0; i < kRows; ++i) {
      want[i * kChannels + c] = (x[i * kChannels + c] - mean) / std::sqrt(var + 1e-5);
    }
  }
  auto worst = [&](const Tensor& y) {
    double w = 0;
    for (size_t k = 0; k < want.size(); ++k) w = std::max(w, std::abs(y.f32()[k] - want[k]));
    return w;
  };
  // A running mean half a spread off the batch mean.
  absl::StatusOr<std::map<std::string, Tensor>> near = Normalize(x, 10000.5f, true);
  ASSERT_THAT(near.status(), IsOk());
  EXPECT_LT(worst(near->at("y")), 1e-3);
  for (int64_t c = 0; c < kChannels; ++c) {
    EXPECT_NEAR(near->at("rm").f32()[c], 0.9 * 10000.5 + 0.1 * batch_mean[c], 1e-3);
  }
  // About 0 the same values lose the variance: the outputs are far off.
  absl::StatusOr<std::map<std::string, Tensor>> about_zero = Normalize(x, 10000.5f, false);
  ASSERT_THAT(about_zero.status(), IsOk());
  EXPECT_GT(worst(about_zero->at("y")), 0.05);
}

}  // namespace
}  // namespace quilt
