// A zoo model's training graph for tests: softmax cross-entropy, SGD with
// momentum 0.9 (the settings the planner's benchmarks use).
#ifndef QUILT_SRC_TESTING_ZOO_TRAINING_H_
#define QUILT_SRC_TESTING_ZOO_TRAINING_H_

#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "src/graph/autodiff.h"
#include "src/graph/zoo/zoo.h"

namespace quilt::testing {

inline Graph ZooTrainingGraph(const std::string& model, float learning_rate = 0.01f) {
  absl::StatusOr<Graph> g = zoo::BuildZooModel(model);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return Graph();
  TrainingOptions to;
  to.loss = LossType::kSoftmaxCrossEntropy;
  to.optimizer.kind = OptimizerSpec::Kind::kSgd;
  to.optimizer.momentum = 0.9;
  to.optimizer.learning_rate = learning_rate;
  const absl::Status built = BuildTrainingGraph(&*g, to);
  EXPECT_TRUE(built.ok()) << built;
  return std::move(*g);
}

}  // namespace quilt::testing

#endif  // QUILT_SRC_TESTING_ZOO_TRAINING_H_
