// The training-graph IR every stage of Quilt works on: tensors (dtype,
// symbolic shape, role), ops (registered type, inputs, outputs, attributes),
// parameters with initial values, constants, the loss, the optimizer, and —
// after autodiff — the backward and update ops with the state updates applied
// after every step. Converts losslessly to and from quilt.v1.TrainingGraph.
//
// A Graph is a plain value; it is not thread-safe to mutate concurrently.
#ifndef QUILT_SRC_GRAPH_GRAPH_H_
#define QUILT_SRC_GRAPH_GRAPH_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/quilt/v1/graph.pb.h"
#include "src/graph/attrs.h"
#include "src/graph/dtype.h"
#include "src/graph/shape.h"
#include "src/graph/tensor.h"

namespace quilt {

enum class TensorRole {
  kActivation,
  kParameter,
  kInput,
  kLabel,
  kGradient,
  kOptimizerState,
  kConstant,
  kLoss,
};
const char* TensorRoleName(TensorRole r);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  TensorRole role = TensorRole::kActivation;
  // The batch dim's rows interleave the samples (batch_layout.h).
  bool interleaved_batch = false;
};

struct Op {
  std::string name;
  std::string type;
  std::vector<std::string> inputs;  // "" = omitted optional input
  std::vector<std::string> outputs;
  Attrs attrs;
  // For backward / update ops: the forward op they belong to.
  std::string forward_op;
};

struct InitializerSpec {
  enum class Kind { kZeros, kOnes, kConstant, kUniform, kNormal };
  Kind kind = Kind::kZeros;
  double value = 0, low = 0, high = 0, mean = 0, stddev = 0;
  uint64_t seed = 0;
};

struct ParameterSpec {
  std::string tensor;
  // Explicit value, or generated from `init`.
  std::optional<Tensor> value;
  InitializerSpec init;
  bool frozen = false;
};

// kModel: the model computes its own loss with ordinary ops (binary cross-
// entropy, a weighted sum of losses, ...): `output` is that scalar, `label`
// the labels input it reads, `prediction` empty.
enum class LossType { kNone, kSoftmaxCrossEntropy, kMse, kModel };

struct LossSpec {
  LossType type = LossType::kNone;
  std::string prediction;
  std::string label;
  std::string output;
};

struct OptimizerSpec {
  enum class Kind { kNone, kSgd, kAdam };
  Kind kind = Kind::kNone;
  double learning_rate = 0.01;
  double momentum = 0;
  double weight_decay = 0;
  bool nesterov = false;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
};

struct StateUpdate {
  std::string target;  // parameter or optimizer state
  std::string source;  // its new value, produced by an update op
};

class Graph {
 public:
  std::string name;
  std::vector<Op> ops;
  std::vector<ParameterSpec> parameters;
  std::map<std::string, Tensor> constants;
  std::vector<std::string> inputs;
  std::vector<std::string> labels;
  std::vector<std::string> outputs;
  // The outputs as the imported model names them (ONNX; aligned with
  // `outputs`, empty otherwise; not serialized).
  std::vector<std::string> output_names;
  LossSpec loss;
  OptimizerSpec optimizer;
  bool has_backward = false;
  int64_t reference_batch = 0;
  std::vector<StateUpdate> updates;
  // What the import noticed about how the model will train (shown with
  // ModelNotes; not serialized).
  std::vector<std::string> import_notes;
  // Parameters the model's own loss uses only where it reads the labels
  // (likely a loss module's buffers; ModelNotes names those not frozen).
  std::vector<std::string> label_only_parameters;

  // Tensors in insertion order. Errors: ALREADY_EXISTS for a duplicate name.
  absl::Status AddTensor(TensorInfo info);
  const TensorInfo* FindTensor(const std::string& name) const;
  TensorInfo* MutableTensor(const std::string& name);
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  bool HasTensor(const std::string& name) const { return index_.count(name) > 0; }

  const Op* FindOp(const std::string& name) const;
  const ParameterSpec* FindParameter(const std::string& tensor) const;
  ParameterSpec* FindParameter(const std::string& tensor);

  // Op indices in a topological order (ties broken by position).
  // Errors: INVALID_ARGUMENT naming an op on a cycle, or an input that no op
  // produces and that is not an input, label, parameter, constant or state.
  absl::StatusOr<std::vector<int>> TopologicalOrder() const;

  // Map from tensor name to the index of the op producing it.
  std::map<std::string, int> Producers() const;

  // Sum of the element counts of trainable parameters.
  int64_t ParameterCount() const;

  quilt::v1::TrainingGraph ToProto() const;
  // kStructure: the graph without its values (parameters' values and
  // constants are not copied: a parameter's value stays empty, constants
  // are left out), for readers of its ops, tensors and shapes alone (a
  // data source) that need no copy of the weights.
  enum class Read { kWhole, kStructure };
  // Errors: INVALID_ARGUMENT for malformed messages (names the field).
  static absl::StatusOr<Graph> FromProto(const quilt::v1::TrainingGraph& proto,
                                         Read read = Read::kWhole);

 private:
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> index_;
};

// The optimizer of a TrainingGraph or JobSpec (kind kNone when unset; Adam's
// zero betas and epsilon take PyTorch's defaults).
OptimizerSpec OptimizerFromProto(const quilt::v1::Optimizer& proto);

// The largest global batch a step may have (rows are counted in 32 bits in
// places, and no step of more samples fits any cluster).
inline constexpr int64_t kMaxGlobalBatch = int64_t{1} << 30;
// Errors: INVALID_ARGUMENT for a batch over kMaxGlobalBatch, naming both.
absl::Status CheckGlobalBatch(int64_t batch);

}  // namespace quilt

#endif  // QUILT_SRC_GRAPH_GRAPH_H_
