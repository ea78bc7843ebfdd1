#include "src/graph/graph_builder.h"

#include "absl/strings/str_cat.h"
#include "src/common/status.h"

namespace quilt {
namespace {

absl::Status CheckArity(const OpSchema& schema, const Op& op) {
  const int n_in = static_cast<int>(op.inputs.size());
  const int n_out = static_cast<int>(op.outputs.size());
  if (n_in < schema.min_inputs || (schema.max_inputs >= 0 && n_in > schema.max_inputs)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "op '", op.name, "' (", op.type, ") has ", n_in, " inputs; expected ", schema.min_inputs,
        schema.max_inputs == schema.min_inputs
            ? std::string()
            : absl::StrCat(" to ", schema.max_inputs < 0 ? std::string("any number")
                                                         : absl::StrCat(schema.max_inputs))));
  }
  if (n_out < schema.min_outputs || (schema.max_outputs >= 0 && n_out > schema.max_outputs)) {
    return absl::InvalidArgumentError(absl::StrCat("op '", op.name, "' (", op.type, ") has ", n_out,
                                                   " outputs; expected ", schema.min_outputs,
                                                   " to ", schema.max_outputs));
  }
  for (int i = 0; i < schema.min_inputs && i < n_in; ++i) {
    if (op.inputs[i].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("op '", op.name, "' (", op.type, "): required input ", i, " is empty"));
    }
  }
  return absl::OkStatus();
}

// Runs the op's inference against the graph's current tensor types.
absl::StatusOr<std::vector<TensorType>> InferOp(const Graph& graph, const Op& op) {
  const OpSchema* schema = OpRegistry::Global().Find(op.type);
  if (schema == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("op '", op.name, "' has unknown type '", op.type, "'"));
  }
  RETURN_IF_ERROR(CheckArity(*schema, op));
  std::vector<TensorType> storage(op.inputs.size());
  std::vector<const TensorType*> inputs(op.inputs.size(), nullptr);
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    if (op.inputs[i].empty()) continue;
    const TensorInfo* t = graph.FindTensor(op.inputs[i]);
    if (t == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "op '", op.name, "' (", op.type, ") reads undefined tensor '", op.inputs[i], "'"));
    }
    storage[i] = TensorType{t->dtype, t->shape};
    inputs[i] = &storage[i];
  }
  InferContext ctx(op, inputs);
  RETURN_IF_ERROR(schema->infer(ctx));
  for (size_t i = 0; i < ctx.outputs().size(); ++i) {
    if (ctx.outputs()[i].dtype == DType::kInvalid) {
      return ctx.Error(absl::StrCat("inference left output ", i, " untyped"));
    }
  }
  return std::move(ctx.outputs());
}

}  // namespace

GraphBuilder::GraphBuilder(Graph* graph, std::string prefix)
    : graph_(graph), prefix_(std::move(prefix)) {
  for (const Op& op : graph->ops) taken_.insert(op.name);
  for (const TensorInfo& t : graph->tensors()) taken_.insert(t.name);
}

std::string GraphBuilder::UniqueName(const std::string& hint) {
  const std::string base = prefix_ + (hint.empty() ? "t" : hint);
  std::string name = base;
  int& counter = counters_[base];
  while (taken_.count(name) || graph_->HasTensor(name)) name = absl::StrCat(base, "_", ++counter);
  taken_.insert(name);
  return name;
}

absl::StatusOr<std::vector<std::string>> GraphBuilder::AddOp(const std::string& type,
                                                             std::vector<std::string> inputs,
                                                             Attrs attrs, int num_outputs,
                                                             const std::string& hint) {
  Op op;
  op.type = type;
  op.name = UniqueName(hint.empty() ? type : hint);
  op.inputs = std::move(inputs);
  op.attrs = std::move(attrs);
  op.forward_op = forward_op_;
  for (int i = 0; i < num_outputs; ++i) {
    op.outputs.push_back(num_outputs == 1 ? op.name : absl::StrCat(op.name, ":", i));
  }
  ASSIGN_OR_RETURN(std::vector<TensorType> types, InferOp(*graph_, op));
  for (size_t i = 0; i < types.size(); ++i) {
    RETURN_IF_ERROR(graph_->AddTensor({op.outputs[i], types[i].dtype, types[i].shape, role_}));
  }
  std::vector<std::string> outs = op.outputs;
  graph_->ops.push_back(std::move(op));
  return outs;
}

absl::StatusOr<std::string> GraphBuilder::Add(const std::string& type,
                                              std::vector<std::string> inputs, Attrs attrs,
                                              const std::string& hint) {
  ASSIGN_OR_RETURN(std::vector<std::string> outs,
                   AddOp(type, std::move(inputs), std::move(attrs), 1, hint));
  return outs[0];
}

absl::StatusOr<std::string> GraphBuilder::AddParameter(const std::string& name, const Shape& shape,
                                                       InitializerSpec init) {
  RETURN_IF_ERROR(graph_->AddTensor({name, DType::kF32, shape, TensorRole::kParameter}));
  taken_.insert(name);
  ParameterSpec p;
  p.tensor = name;
  p.init = init;
  graph_->parameters.push_back(std::move(p));
  return name;
}

absl::StatusOr<std::string> GraphBuilder::AddParameterValue(const std::string& name, Tensor value,
                                                            bool frozen) {
  RETURN_IF_ERROR(
      graph_->AddTensor({name, value.dtype(), Shape::Fixed(value.dims()), TensorRole::kParameter}));
  taken_.insert(name);
  ParameterSpec p;
  p.tensor = name;
  p.value = std::move(value);
  p.frozen = frozen;
  graph_->parameters.push_back(std::move(p));
  return name;
}

absl::StatusOr<std::string> GraphBuilder::AddConstant(const std::string& hint, Tensor value) {
  const std::string name = UniqueName(hint);
  RETURN_IF_ERROR(
      graph_->AddTensor({name, value.dtype(), Shape::Fixed(value.dims()), TensorRole::kConstant}));
  graph_->constants[name] = std::move(value);
  return name;
}

absl::StatusOr<std::string> GraphBuilder::AddInput(const std::string& name, DType dtype,
                                                   Shape shape, TensorRole role) {
  RETURN_IF_ERROR(graph_->AddTensor({name, dtype, std::move(shape), role}));
  taken_.insert(name);
  if (role == TensorRole::kLabel) {
    graph_->labels.push_back(name);
  } else {
    graph_->inputs.push_back(name);
  }
  return name;
}

absl::StatusOr<TensorType> GraphBuilder::TypeOf(const std::string& tensor) const {
  const TensorInfo* t = graph_->FindTensor(tensor);
  if (t == nullptr) return absl::NotFoundError("no tensor '" + tensor + "'");
  return TensorType{t->dtype, t->shape};
}

absl::Status InferShapes(Graph* graph) {
  ASSIGN_OR_RETURN(std::vector<int> order, graph->TopologicalOrder());
  for (int idx : order) {
    const Op& op = graph->ops[idx];
    ASSIGN_OR_RETURN(std::vector<TensorType> types, InferOp(*graph, op));
    for (size_t i = 0; i < types.size(); ++i) {
      TensorInfo* declared = graph->MutableTensor(op.outputs[i]);
      if (declared == nullptr) {
        RETURN_IF_ERROR(graph->AddTensor({op.outputs[i], types[i].dtype, types[i].shape}));
        continue;
      }
      if (declared->dtype != types[i].dtype || declared->shape != types[i].shape) {
        return absl::InvalidArgumentError(absl::StrCat(
            "op '", op.name, "' (", op.type, ") produces ", DTypeName(types[i].dtype),
            types[i].shape.ToString(), " for '", op.outputs[i], "', but the graph declares ",
            DTypeName(declared->dtype), declared->shape.ToString()));
      }
    }
  }
  return absl::OkStatus();
}

void EncodeShape(Attrs* attrs, const std::string& key, const Shape& shape) {
  std::vector<int64_t> values;
  for (const Dim& d : shape.dims()) values.push_back(d.value);
  attrs->SetInts(key, std::move(values));
  attrs->SetInt(key + "_batch_axis", shape.BatchAxis());
}

absl::StatusOr<Shape> DecodeShape(const Attrs& attrs, const std::string& key) {
  ASSIGN_OR_RETURN(std::vector<int64_t> values, attrs.RequireInts(key));
  const int64_t batch_axis = attrs.Int(key + "_batch_axis", -1);
  if (batch_axis >= static_cast<int64_t>(values.size()) || batch_axis < -1) {
    return absl::InvalidArgumentError("attribute '" + key + "_batch_axis' is out of range");
  }
  std::vector<Dim> dims;
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] < 0) {
      return absl::InvalidArgumentError("attribute '" + key + "' has a negative extent");
    }
    dims.push_back(static_cast<int64_t>(i) == batch_axis ? Dim::Batch(values[i])
                                                         : Dim::Fixed(values[i]));
  }
  return Shape(std::move(dims));
}

}  // namespace quilt
