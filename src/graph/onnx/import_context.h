// State of one ONNX import: what each ONNX value name stands for (a graph
// tensor, a known constant, or a not-yet-materialized initializer) and the
// helpers converters use to read inputs and emit Quilt ops.
#ifndef QUILT_SRC_GRAPH_ONNX_IMPORT_CONTEXT_H_
#define QUILT_SRC_GRAPH_ONNX_IMPORT_CONTEXT_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "onnx/onnx_pb.h"
#include "src/graph/graph_builder.h"
#include "src/graph/onnx/batch_values.h"

namespace quilt::onnx_import {

// Converts a TensorProto (raw or typed data) to a Tensor. Errors:
// INVALID_ARGUMENT for unsupported types, external data or a size mismatch.
absl::StatusOr<Tensor> FromTensorProto(const onnx::TensorProto& t);

class ImportContext {
 public:
  // `export_batch`: the batch size shape arithmetic sees. A model exported
  // with a dynamic batch (`symbolic_batch`) gets one no other dim of the
  // model is a multiple of, so a value holding it is known to be the
  // batch's.
  ImportContext(Graph* graph, int64_t export_batch, bool symbolic_batch);

  GraphBuilder& b() { return builder_; }
  Graph& graph() { return *graph_; }
  int64_t export_batch() const { return export_batch_; }
  bool symbolic_batch() const { return symbolic_batch_; }
  // The model's ONNX opset (where an op's meaning changed between them).
  int64_t opset() const { return opset_; }
  void set_opset(int64_t opset) { opset_ = opset; }

  void AddInitializer(const std::string& name, Tensor value);
  // Call after the initializers are added: the exporter's transposed
  // copies of weights (transposed_copies.h) become Transpose ops of the
  // weight, so both uses train one parameter.
  void TieTransposedCopies();
  void SetTensor(const std::string& onnx_name, const std::string& tensor);
  // A constant folded while converting the node BeginNode named takes a
  // batch form (batch_values.h) when an input of that node has one.
  void SetConstant(const std::string& onnx_name, Tensor value);
  void BeginNode(const onnx::NodeProto& node) { node_ = &node; }
  // The batch form of a constant (Shape's: its batch element is B).
  void SetBatchForm(const std::string& onnx_name, BatchForm form);

  bool HasInput(const onnx::NodeProto& node, int i) const;
  // The known value of input i, if it is a constant or initializer.
  const Tensor* ConstantInput(const onnx::NodeProto& node, int i) const;
  // Errors: INVALID_ARGUMENT when input i is not a constant.
  absl::StatusOr<Tensor> Const(const onnx::NodeProto& node, int i) const;
  absl::StatusOr<std::vector<int64_t>> ConstInts(const onnx::NodeProto& node, int i) const;
  // A graph tensor for input i: constants are materialized, float
  // initializers become trainable parameters (once).
  absl::StatusOr<std::string> Data(const onnx::NodeProto& node, int i);
  // A graph tensor for non-trainable state (batch-norm running statistics).
  absl::StatusOr<std::string> State(const onnx::NodeProto& node, int i);
  // True if input i is an initializer that Data() makes a parameter: a
  // float one that a gradient reaches (SetGradientReach).
  bool IsParameterInitializer(const onnx::NodeProto& node, int i) const;
  void SetGradientReach(std::set<std::string> names) { reach_ = std::move(names); }
  // Whether a node or the graph's outputs read the ONNX value.
  bool IsRead(const std::string& onnx_name) const { return read_.count(onnx_name) > 0; }
  void SetRead(std::set<std::string> names) { read_ = std::move(names); }
  // Whether an Identity of a parameter initializer is that parameter (a
  // weight shared by several uses: a training-mode export merges only
  // those) or a copy trained on its own (an eval-mode export also merges
  // parameters of equal values: every LayerNorm's ones; and an export that
  // does not show its mode, where a note names the copies).
  bool identities_share() const { return identities_share_; }
  void set_identities_share(bool share) { identities_share_ = share; }
  // A copy of a folded tensor the export merged (equal values, or one
  // shared weight: an eval-mode export cannot tell) that trains apart.
  void NoteUntiedCopy(const std::string& source, const std::string& copy) {
    untied_.push_back(copy + " (of " + source + ")");
  }
  const std::vector<std::string>& untied_copies() const { return untied_; }
  absl::StatusOr<TensorType> TypeOf(const std::string& tensor) { return builder_.TypeOf(tensor); }

  // Adds a Quilt op for `node` and maps its first `map_outputs` outputs
  // (all the node's by default) to the op's outputs.
  absl::Status Emit(const onnx::NodeProto& node, const std::string& type,
                    std::vector<std::string> inputs, Attrs attrs, int quilt_outputs = -1,
                    int map_outputs = -1);

 private:
  std::optional<std::string> Lookup(const std::string& onnx_name) const;
  absl::StatusOr<std::string> Materialize(const std::string& onnx_name, bool trainable,
                                          bool frozen);
  // A value of the batch size used as data: a BatchAffine op, or an error
  // when its form is not followed.
  absl::StatusOr<std::string> FromBatch(const std::string& onnx_name, const Tensor& value,
                                        const BatchForm& form);

  Graph* graph_;
  GraphBuilder builder_;
  int64_t export_batch_;
  int64_t opset_ = 0;
  bool symbolic_batch_;
  bool identities_share_ = false;
  std::vector<std::string> untied_;
  std::map<std::string, std::string> tensors_;    // ONNX name → graph tensor
  std::map<std::string, Tensor> constants_;       // ONNX name → known value
  std::map<std::string, BatchForm> batch_forms_;  // constants computed from the batch
  const onnx::NodeProto* node_ = nullptr;         // being converted
  std::map<std::string, Tensor> initializers_;    // not yet materialized
  std::map<std::string, std::string> copies_;     // transposed copy → weight
  std::set<std::string> read_;
  std::set<std::string> reach_;
};

// One converter per supported ONNX op type.
using Converter = absl::Status (*)(ImportContext& ctx, const onnx::NodeProto& node);
const std::map<std::string, Converter>& Converters();

// Attribute accessors.
const onnx::AttributeProto* FindAttr(const onnx::NodeProto& node, const std::string& name);
int64_t AttrInt(const onnx::NodeProto& node, const std::string& name, int64_t def);
float AttrFloat(const onnx::NodeProto& node, const std::string& name, float def);
std::string AttrString(const onnx::NodeProto& node, const std::string& name,
                       const std::string& def);
std::vector<int64_t> AttrInts(const onnx::NodeProto& node, const std::string& name);

}  // namespace quilt::onnx_import

#endif  // QUILT_SRC_GRAPH_ONNX_IMPORT_CONTEXT_H_
