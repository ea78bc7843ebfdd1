// Runs a training graph on one CPU device: each step feeds the inputs and
// labels, runs every op's kernel in topological order (freeing each
// intermediate after its last use), applies the state updates (new
// parameters, optimizer state, running statistics) and returns the loss.
// The single-device run is the correctness oracle for distributed runs.
//
// Not thread-safe; kernels themselves use the compute thread pool.
#ifndef QUILT_SRC_RUNTIME_GRAPH_RUNNER_H_
#define QUILT_SRC_RUNTIME_GRAPH_RUNNER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/graph/graph.h"
#include "src/graph/tensor.h"
#include "src/runtime/kernels/kernel.h"

namespace quilt {

struct RunnerOptions {
  // Seed of random kernels (dropout).
  uint64_t seed = 0;
  // Accumulate the time spent per op type (see OpTimes()).
  bool profile = false;
};

class GraphRunner {
 public:
  // `graph` must be validated (ValidateGraph). Initializes parameters,
  // optimizer state (zeros) and constants. Errors: INVALID_ARGUMENT when an
  // op has no CPU kernel (all such ops are named).
  static absl::StatusOr<std::unique_ptr<GraphRunner>> Create(Graph graph, RunnerOptions options);

  // One step. `feeds` holds every input and label; the batch size is read
  // from them. Errors: INVALID_ARGUMENT naming a missing or mis-shaped
  // feed, or the failing kernel.
  absl::StatusOr<float> Step(const std::map<std::string, Tensor>& feeds);

  // Runs the forward ops only and returns the requested tensors.
  absl::StatusOr<std::map<std::string, Tensor>> Evaluate(const std::map<std::string, Tensor>& feeds,
                                                         const std::vector<std::string>& fetch);

  // Parameters, optimizer state and other persistent tensors, by name.
  const Tensor* Persistent(const std::string& name) const;
  absl::Status SetPersistent(const std::string& name, Tensor value);
  std::vector<std::string> PersistentNames() const;

  const Graph& graph() const { return graph_; }
  // Seconds spent per op type over all runs so far (with options.profile).
  const std::map<std::string, double>& OpTimes() const { return op_times_; }
  int64_t steps_done() const { return step_ - 1; }

 private:
  struct PlannedOp {
    const Op* op;
    KernelFn kernel;
    std::vector<int> inputs;  // tensor ids, -1 for omitted
    std::vector<int> outputs;
    bool update;  // runs only in training steps
  };

  GraphRunner(Graph graph, RunnerOptions options) : graph_(std::move(graph)), options_(options) {}
  absl::Status Plan();
  absl::StatusOr<int64_t> BatchOf(const std::map<std::string, Tensor>& feeds) const;
  absl::Status Run(const std::map<std::string, Tensor>& feeds, bool train,
                   const std::vector<int>& keep, std::vector<Tensor>* values);

  Graph graph_;
  RunnerOptions options_;
  int64_t step_ = 1;
  std::map<std::string, int> ids_;
  std::vector<const TensorInfo*> infos_;
  std::vector<PlannedOp> ops_;
  std::vector<bool> persistent_;
  std::vector<int> consumers_;  // per tensor: number of op inputs reading it
  std::vector<Tensor> state_;   // persistent values by id
  int loss_id_ = -1;
  std::map<std::string, double> op_times_;
};

}  // namespace quilt

#endif  // QUILT_SRC_RUNTIME_GRAPH_RUNNER_H_
