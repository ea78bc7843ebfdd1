// Adds ops, tensors, parameters and constants to a Graph with unique names,
// inferring each new op's output types at once (so builders can ask the type
// of what they just made). Used by autodiff, the ONNX importer and the model
// zoo.
#ifndef QUILT_SRC_GRAPH_GRAPH_BUILDER_H_
#define QUILT_SRC_GRAPH_GRAPH_BUILDER_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/graph/graph.h"
#include "src/graph/op_registry.h"

namespace quilt {

class GraphBuilder {
 public:
  // Ops added get names "<prefix><hint>" (made unique).
  explicit GraphBuilder(Graph* graph, std::string prefix = "");

  Graph& graph() { return *graph_; }

  // Adds an op of a registered type. Output tensors are named
  // "<op name>:<i>" (or "<op name>" for a single output) and typed by the
  // op's inference. Errors: INVALID_ARGUMENT (unknown type, wrong arity,
  // inference failure), naming the op.
  absl::StatusOr<std::vector<std::string>> AddOp(const std::string& type,
                                                 std::vector<std::string> inputs, Attrs attrs = {},
                                                 int num_outputs = 1, const std::string& hint = "");
  // Single-output convenience.
  absl::StatusOr<std::string> Add(const std::string& type, std::vector<std::string> inputs,
                                  Attrs attrs = {}, const std::string& hint = "");

  // Role of the outputs of subsequent ops (default activation), and the
  // forward op they belong to (for backward ops).
  void set_role(TensorRole role) { role_ = role; }
  void set_forward_op(std::string op) { forward_op_ = std::move(op); }

  // A trainable parameter with a generated or explicit initial value.
  absl::StatusOr<std::string> AddParameter(const std::string& name, const Shape& shape,
                                           InitializerSpec init);
  absl::StatusOr<std::string> AddParameterValue(const std::string& name, Tensor value,
                                                bool frozen = false);
  // A constant tensor (role CONSTANT).
  absl::StatusOr<std::string> AddConstant(const std::string& hint, Tensor value);
  // A data input / label fed every step.
  absl::StatusOr<std::string> AddInput(const std::string& name, DType dtype, Shape shape,
                                       TensorRole role = TensorRole::kInput);

  // Type of an existing tensor. Errors: NOT_FOUND.
  absl::StatusOr<TensorType> TypeOf(const std::string& tensor) const;
  std::string UniqueName(const std::string& hint);

 private:
  Graph* graph_;
  std::string prefix_;
  TensorRole role_ = TensorRole::kActivation;
  std::string forward_op_;
  std::set<std::string> taken_;
  std::map<std::string, int> counters_;
};

// Infers the types of every op output in topological order and checks them
// against the tensors already declared (adding undeclared outputs).
// Errors: INVALID_ARGUMENT naming the op and the mismatch.
absl::Status InferShapes(Graph* graph);

// Shapes as attributes: a symbolic shape stored in `key` (the extents, the
// batch multiple at the batch axis) and `key + "_batch_axis"`.
void EncodeShape(Attrs* attrs, const std::string& key, const Shape& shape);
absl::StatusOr<Shape> DecodeShape(const Attrs& attrs, const std::string& key);

}  // namespace quilt

#endif  // QUILT_SRC_GRAPH_GRAPH_BUILDER_H_
