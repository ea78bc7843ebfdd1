// Trains a training graph on one CPU device from a dataset: batch t takes
// samples [t·B, (t+1)·B) of the stream (wrapping around), the step's loss is
// the one of its forward pass (before its update), and progress is reported
// after every step.
#ifndef QUILT_SRC_RUNTIME_LOCAL_TRAINER_H_
#define QUILT_SRC_RUNTIME_LOCAL_TRAINER_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "src/graph/graph.h"
#include "src/runtime/data/dataset.h"
#include "src/runtime/graph_runner.h"

namespace quilt {

struct StepReport {
  int64_t step = 0;  // 1-based
  float loss = 0;
  double step_time_s = 0;
  double samples_per_s = 0;
};

struct LocalTrainOptions {
  int64_t batch = 32;
  int64_t steps = 10;
  uint64_t seed = 0;
  // Time every kernel (per op type, in the result's runner).
  bool profile = false;
  std::function<void(const StepReport&)> on_step;
};

struct LocalTrainResult {
  std::vector<float> losses;
  std::unique_ptr<GraphRunner> runner;  // final parameters
  double mean_step_time_s = 0;          // over steps after the first
};

// Errors: those of the runner and the dataset.
absl::StatusOr<LocalTrainResult> TrainLocal(const Graph& training_graph, Dataset* data,
                                            const LocalTrainOptions& options);

}  // namespace quilt

#endif  // QUILT_SRC_RUNTIME_LOCAL_TRAINER_H_
