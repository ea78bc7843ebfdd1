// The training graph the planner and simulator benchmarks plan: a zoo
// model with softmax cross-entropy and SGD with momentum 0.9.
#ifndef QUILT_BENCH_BENCH_MODELS_H_
#define QUILT_BENCH_BENCH_MODELS_H_

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "src/common/status.h"
#include "src/graph/autodiff.h"
#include "src/graph/zoo/zoo.h"

namespace quilt::bench {

inline absl::StatusOr<Graph> BenchTrainingGraph(const std::string& model) {
  ASSIGN_OR_RETURN(Graph g, zoo::BuildZooModel(model));
  TrainingOptions to;
  to.loss = LossType::kSoftmaxCrossEntropy;
  to.optimizer.kind = OptimizerSpec::Kind::kSgd;
  to.optimizer.momentum = 0.9;
  RETURN_IF_ERROR(BuildTrainingGraph(&g, to));
  return g;
}

}  // namespace quilt::bench

#endif  // QUILT_BENCH_BENCH_MODELS_H_
