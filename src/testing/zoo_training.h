// A zoo model's training graph for tests: softmax cross-entropy, SGD with
// momentum 0.9 (the settings the planner's benchmarks use).
#ifndef QUILT_SRC_TESTING_ZOO_TRAINING_H_
#define QUILT_SRC_TESTING_ZOO_TRAINING_H_

#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "src/graph/zoo_training.h"

namespace quilt::testing {

inline Graph ZooTrainingGraph(const std::string& model, float learning_rate = 0.01f) {
  absl::StatusOr<Graph> g = zoo::ZooTrainingGraph(model, learning_rate);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? std::move(*g) : Graph();
}

}  // namespace quilt::testing

#endif  // QUILT_SRC_TESTING_ZOO_TRAINING_H_
