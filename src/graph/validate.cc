#include "src/graph/validate.h"

#include <map>
#include <set>
#include <variant>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/common/status.h"
#include "src/common/utf8.h"
#include "src/graph/graph_builder.h"
#include "src/graph/op_registry.h"

namespace quilt {
namespace {

// A graph may ask for at most 2^40 elements in one tensor at its reference
// batch (4 TiB of f32): anything larger is a corrupt shape.
constexpr int64_t kMaxElements = int64_t{1} << 40;

absl::Status CheckTensorSizes(const Graph& g) {
  const int64_t batch = g.reference_batch > 0 ? g.reference_batch : 1;
  for (const TensorInfo& t : g.tensors()) {
    if (t.dtype == DType::kInvalid) {
      return absl::InvalidArgumentError("tensor '" + t.name + "' has no dtype");
    }
    int64_t n = 1;
    for (const Dim& d : t.shape.dims()) {
      if (d.value < 0 || (d.batch && d.value < 1)) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", t.name, "' has an invalid dim in ", t.shape.ToString()));
      }
      const int64_t e = d.batch ? d.value * batch : d.value;
      if (d.batch && d.value > kMaxElements) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' is too large"));
      }
      if (e != 0 && n > kMaxElements / e) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' ", t.shape.ToString(),
                                                       " has more than 2^40 elements"));
      }
      n *= e;
    }
  }
  return absl::OkStatus();
}

// Names and string attributes go into protobuf string fields (programs,
// reports), which must be UTF-8: one that is not would be written into a
// program its executor cannot parse back.
absl::Status CheckUtf8(const Graph& g) {
  auto check = [](const std::string& s, const std::string& what) -> absl::Status {
    if (IsUtf8(s)) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(what, " '", absl::CHexEscape(s), "' is not valid UTF-8"));
  };
  RETURN_IF_ERROR(check(g.name, "the model's name"));
  for (const Op& op : g.ops) {
    RETURN_IF_ERROR(check(op.name, "op name"));
    RETURN_IF_ERROR(check(op.type, "the op type of '" + absl::CHexEscape(op.name) + "'"));
    for (const auto* names : {&op.inputs, &op.outputs}) {
      for (const std::string& t : *names) {
        RETURN_IF_ERROR(check(t, "tensor name (of op '" + op.name + "')"));
      }
    }
    for (const auto& [key, value] : op.attrs.values()) {
      const std::string what = "attribute of op '" + op.name + "'";
      RETURN_IF_ERROR(check(key, what));
      if (const auto* s = std::get_if<std::string>(&value)) RETURN_IF_ERROR(check(*s, what));
      if (const auto* v = std::get_if<std::vector<std::string>>(&value)) {
        for (const std::string& s : *v) RETURN_IF_ERROR(check(s, what));
      }
    }
  }
  for (const TensorInfo& t : g.tensors()) RETURN_IF_ERROR(check(t.name, "tensor name"));
  for (const auto* names : {&g.inputs, &g.labels, &g.outputs, &g.output_names}) {
    for (const std::string& n : *names) RETURN_IF_ERROR(check(n, "graph input or output name"));
  }
  return absl::OkStatus();
}

absl::Status CheckNames(const Graph& g) {
  RETURN_IF_ERROR(CheckUtf8(g));
  std::set<std::string> op_names;
  std::map<std::string, std::string> producer;
  std::vector<std::string> unknown;
  for (const Op& op : g.ops) {
    if (op.name.empty())
      return absl::InvalidArgumentError("an op of type " + op.type + " has no name");
    if (!op_names.insert(op.name).second) {
      return absl::InvalidArgumentError("op name '" + op.name + "' is used twice");
    }
    const OpSchema* schema = OpRegistry::Global().Find(op.type);
    if (schema == nullptr || schema->planner_only) {
      unknown.push_back(absl::StrCat(op.type, " (op '", op.name, "')"));
    }
    for (const std::string& out : op.outputs) {
      if (out.empty())
        return absl::InvalidArgumentError("op '" + op.name + "' has an unnamed output");
      auto [it, fresh] = producer.emplace(out, op.name);
      if (!fresh) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", out, "' is produced by both '",
                                                       it->second, "' and '", op.name, "'"));
      }
    }
  }
  if (!unknown.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown op types: ", absl::StrJoin(unknown, ", ")));
  }
  auto check_source = [&](const std::string& name, const char* what) -> absl::Status {
    const TensorInfo* t = g.FindTensor(name);
    if (t == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " '", name, "' is not a declared tensor"));
    }
    if (producer.count(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " '", name, "' is also produced by op '", producer[name], "'"));
    }
    return absl::OkStatus();
  };
  for (const auto& i : g.inputs) RETURN_IF_ERROR(check_source(i, "input"));
  for (const auto& l : g.labels) RETURN_IF_ERROR(check_source(l, "label"));
  for (const auto& p : g.parameters) {
    RETURN_IF_ERROR(check_source(p.tensor, "parameter"));
    const TensorInfo* t = g.FindTensor(p.tensor);
    if (t->shape.HasBatch()) {
      return absl::InvalidArgumentError("parameter '" + p.tensor + "' cannot carry the batch");
    }
    if (!p.frozen && t->shape.NumElements(1) == 0) {
      return absl::InvalidArgumentError("parameter '" + p.tensor + "' has no elements (shape " +
                                        t->shape.ToString() + "): nothing to train");
    }
    if (p.value.has_value() &&
        (p.value->dims() != t->shape.Concrete(1) || p.value->dtype() != t->dtype)) {
      return absl::InvalidArgumentError(absl::StrCat("parameter '", p.tensor, "' has a value of ",
                                                     p.value->TypeString(), " but is declared ",
                                                     DTypeName(t->dtype), t->shape.ToString()));
    }
  }
  for (const auto& [name, value] : g.constants) {
    RETURN_IF_ERROR(check_source(name, "constant"));
    const TensorInfo* t = g.FindTensor(name);
    if (value.dims() != t->shape.Concrete(1) || value.dtype() != t->dtype) {
      return absl::InvalidArgumentError("constant '" + name + "' does not match its declaration");
    }
  }
  for (const auto& o : g.outputs) {
    if (!g.HasTensor(o) && !producer.count(o)) {
      return absl::InvalidArgumentError("output '" + o + "' is not a tensor of the graph");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateGraph(Graph* graph) {
  RETURN_IF_ERROR(CheckNames(*graph));
  RETURN_IF_ERROR(CheckTensorSizes(*graph));
  RETURN_IF_ERROR(InferShapes(graph));
  RETURN_IF_ERROR(CheckTensorSizes(*graph));
  const LossSpec& loss = graph->loss;
  if (loss.type != LossType::kNone) {
    for (const std::string* n : {&loss.prediction, &loss.label}) {
      if (!n->empty() && !graph->HasTensor(*n)) {
        return absl::InvalidArgumentError("the loss refers to unknown tensor '" + *n + "'");
      }
    }
    if (!loss.output.empty() && !graph->HasTensor(loss.output)) {
      return absl::InvalidArgumentError("the loss output '" + loss.output + "' is not produced");
    }
    if (loss.type == LossType::kModel) {
      const TensorInfo* out = graph->FindTensor(loss.output);
      if (out == nullptr || out->shape.rank() != 0 || out->dtype != DType::kF32) {
        return absl::InvalidArgumentError("the model's loss '" + loss.output +
                                          "' must be a float32 scalar");
      }
    }
  }
  for (const StateUpdate& u : graph->updates) {
    const TensorInfo* t = graph->FindTensor(u.target);
    const TensorInfo* s = graph->FindTensor(u.source);
    if (t == nullptr || s == nullptr || t->shape != s->shape || t->dtype != s->dtype) {
      return absl::InvalidArgumentError(absl::StrCat("state update ", u.target, " <- ", u.source,
                                                     " names unknown or mismatched tensors"));
    }
  }
  return absl::OkStatus();
}

}  // namespace quilt
