// The op registry: the single place an op type is defined. Each OpSchema
// holds the op's arity, its shape and dtype inference (on symbolic shapes,
// which also tells which inputs and outputs carry the batch), its cost
// (FLOPs = 2 × multiply-adds, and bytes moved) at concrete shapes, and its
// gradient builder. Kernels are registered by op type in the runtime
// (src/runtime/kernels/), and a test checks that every op has one.
//
// Ops register themselves at static-initialization time with
// QUILT_REGISTER_OP; libraries defining ops are `alwayslink`.
#ifndef QUILT_SRC_GRAPH_OP_REGISTRY_H_
#define QUILT_SRC_GRAPH_OP_REGISTRY_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "src/graph/graph.h"

namespace quilt {

struct TensorType {
  DType dtype = DType::kInvalid;
  Shape shape;
};

// Inference input: the op and its input types; output: the output types.
class InferContext {
 public:
  InferContext(const Op& op, std::vector<const TensorType*> inputs)
      : op_(op), inputs_(std::move(inputs)), outputs_(op.outputs.size()) {}
  const Op& op() const { return op_; }
  const Attrs& attrs() const { return op_.attrs; }
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  int num_outputs() const { return static_cast<int>(outputs_.size()); }
  bool has_input(int i) const { return i < num_inputs() && inputs_[i] != nullptr; }
  const TensorType& input(int i) const { return *inputs_[i]; }
  const Shape& shape(int i) const { return inputs_[i]->shape; }
  DType dtype(int i) const { return inputs_[i]->dtype; }
  void set_output(int i, TensorType t) { outputs_[i] = std::move(t); }
  void set_output(int i, DType d, Shape s) { outputs_[i] = TensorType{d, std::move(s)}; }
  std::vector<TensorType>& outputs() { return outputs_; }
  // INVALID_ARGUMENT "op 'name' (Type): message".
  absl::Status Error(const std::string& message) const;

 private:
  const Op& op_;
  std::vector<const TensorType*> inputs_;
  std::vector<TensorType> outputs_;
};

// Concrete shapes for cost estimates.
struct CostContext {
  const Op& op;
  std::vector<std::vector<int64_t>> in_dims;
  std::vector<DType> in_dtypes;
  std::vector<std::vector<int64_t>> out_dims;
  std::vector<DType> out_dtypes;
  int64_t InNumel(int i) const;
  int64_t OutNumel(int i) const;
  // Bytes of all inputs and outputs.
  double IoBytes() const;
};

struct OpCost {
  double flops = 0;
  // Minimum memory traffic: inputs read once, outputs written once.
  double bytes = 0;
};

class GraphBuilder;

// Gradient builder input: the forward op, the gradient of each output ("" if
// none flows back), which inputs need a gradient; it adds ops through the
// builder and sets the gradient of each needed input.
class GradContext {
 public:
  GradContext(GraphBuilder* builder, const Op& op, std::vector<std::string> dy,
              std::vector<bool> needs_dx)
      : builder_(builder),
        op_(op),
        dy_(std::move(dy)),
        needs_dx_(std::move(needs_dx)),
        dx_(op.inputs.size()) {}
  GraphBuilder& b() { return *builder_; }
  const Op& op() const { return op_; }
  const std::string& x(int i) const { return op_.inputs[i]; }
  const std::string& y(int i) const { return op_.outputs[i]; }
  const std::string& dy(int i) const { return dy_[i]; }
  bool needs_dx(int i) const { return i < static_cast<int>(needs_dx_.size()) && needs_dx_[i]; }
  void set_dx(int i, std::string name) { dx_[i] = std::move(name); }
  const std::vector<std::string>& dx() const { return dx_; }
  absl::Status Error(const std::string& message) const;

 private:
  GraphBuilder* builder_;
  const Op& op_;
  std::vector<std::string> dy_;
  std::vector<bool> needs_dx_;
  std::vector<std::string> dx_;
};

using InferFn = std::function<absl::Status(InferContext&)>;
using CostFn = std::function<OpCost(const CostContext&)>;
using GradFn = std::function<absl::Status(GradContext&)>;

struct OpSchema {
  std::string type;
  std::string doc;
  int min_inputs = 1;
  int max_inputs = 1;  // -1: unbounded
  int min_outputs = 1;
  int max_outputs = 1;
  InferFn infer;
  // Default: one FLOP per output element, IoBytes().
  CostFn cost;
  // nullptr: the op has no gradient (differentiating through it is an error
  // unless no gradient flows into it).
  GradFn grad;
  // Inputs that never get a gradient (indices, labels, step counters).
  std::vector<int> non_differentiable_inputs;
  // Optimizer update ops (run after the backward pass).
  bool is_update = false;
  // (output, input) pairs: after a training step the input (a state such as
  // BatchNormApply's running mean) takes the output's value.
  std::vector<std::pair<int, int>> state_outputs;
  // Outputs without the batch that are statistics of the replica's own
  // slice (batch-norm statistics), not partial sums over the batch.
  std::vector<int> local_outputs;
  // The op is linear in each input (alone): partial sums of an input give
  // partial sums of the output while the other inputs are whole.
  bool linear = false;
  // Used only inside the planner (coarsened graphs); user graphs may not
  // contain it and no kernel runs it.
  bool planner_only = false;
};

// Whether output `k` of `op` is a per-replica statistic (local_outputs of
// its schema, or listed in the op's "local_outputs" attribute, as coarsened
// ops carry them).
bool IsLocalOutput(const Op& op, const OpSchema& schema, int k);

class OpRegistry {
 public:
  static OpRegistry& Global();
  // CHECK-fails on a duplicate type (a programming error).
  void Register(OpSchema schema);
  const OpSchema* Find(const std::string& type) const;
  std::vector<std::string> Types() const;

 private:
  std::map<std::string, OpSchema> schemas_;
};

struct OpRegistration {
  explicit OpRegistration(OpSchema schema) { OpRegistry::Global().Register(std::move(schema)); }
};

#define QUILT_OP_CONCAT_INNER_(a, b) a##b
#define QUILT_OP_CONCAT_(a, b) QUILT_OP_CONCAT_INNER_(a, b)
// QUILT_REGISTER_OP(schema-expression);
#define QUILT_REGISTER_OP(...) \
  static ::quilt::OpRegistration QUILT_OP_CONCAT_(quilt_op_registration_, __LINE__)(__VA_ARGS__)

// Computes the cost of `op` at concrete shapes with its schema's cost
// function (or the default).
OpCost EstimateOpCost(const OpSchema& schema, const CostContext& ctx);
// The same for op `op` of graph `g` at batch `batch` (its tensors' shapes
// there; a missing tensor counts as empty, of float32).
OpCost EstimateOpCost(const Graph& g, const Op& op, const OpSchema& schema, int64_t batch);

}  // namespace quilt

#endif  // QUILT_SRC_GRAPH_OP_REGISTRY_H_
