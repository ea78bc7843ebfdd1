// A zoo model's training graph with the settings Quilt measures it under:
// softmax cross-entropy and SGD with momentum 0.9 (the planner and
// simulator benchmarks, the workers' kernel-rate measurements, tests).
#ifndef QUILT_SRC_GRAPH_ZOO_TRAINING_H_
#define QUILT_SRC_GRAPH_ZOO_TRAINING_H_

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "src/common/status.h"
#include "src/graph/autodiff.h"
#include "src/graph/zoo/zoo.h"

namespace quilt::zoo {

inline absl::StatusOr<Graph> ZooTrainingGraph(
    const std::string& model, double learning_rate = OptimizerSpec().learning_rate) {
  ASSIGN_OR_RETURN(Graph g, BuildZooModel(model));
  TrainingOptions to;
  to.loss = LossType::kSoftmaxCrossEntropy;
  to.optimizer.kind = OptimizerSpec::Kind::kSgd;
  to.optimizer.momentum = 0.9;
  to.optimizer.learning_rate = learning_rate;
  RETURN_IF_ERROR(BuildTrainingGraph(&g, to));
  return g;
}

}  // namespace quilt::zoo

#endif  // QUILT_SRC_GRAPH_ZOO_TRAINING_H_
