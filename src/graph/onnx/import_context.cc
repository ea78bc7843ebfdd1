#include "src/graph/onnx/import_context.h"

#include <cmath>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/graph/onnx/transposed_copies.h"

namespace quilt::onnx_import {

absl::StatusOr<Tensor> FromTensorProto(const onnx::TensorProto& t) {
  const std::string name = t.name().empty() ? "a tensor" : "tensor '" + t.name() + "'";
  if (t.data_location() == onnx::TensorProto::EXTERNAL || t.external_data_size() > 0) {
    return absl::InvalidArgumentError(
        name + " keeps its data in an external file; export with the weights inside the model");
  }
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || (d > 0 && n > (int64_t{1} << 40) / d)) {
      return absl::InvalidArgumentError(name + " has invalid dims");
    }
    n *= d;
  }
  const std::string& raw = t.raw_data();
  // Raw bytes (esize each) or the typed repeated field must hold n values.
  auto need = [&](size_t esize, int typed) -> absl::Status {
    const bool ok = raw.empty() ? typed == n : raw.size() == static_cast<size_t>(n) * esize;
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " has ", raw.empty() ? static_cast<size_t>(typed) : raw.size() / esize,
                       " values; its dims need ", n));
    }
    return absl::OkStatus();
  };
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT: {
      RETURN_IF_ERROR(need(4, t.float_data_size()));
      ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(DType::kF32, dims));
      if (!raw.empty()) {
        std::memcpy(out.raw(), raw.data(), raw.size());
      } else {
        for (int64_t i = 0; i < n; ++i) out.f32()[i] = t.float_data(static_cast<int>(i));
      }
      return out;
    }
    case onnx::TensorProto::DOUBLE: {
      RETURN_IF_ERROR(need(8, t.double_data_size()));
      ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(DType::kF32, dims));
      for (int64_t i = 0; i < n; ++i) {
        double v;
        if (!raw.empty()) {
          std::memcpy(&v, raw.data() + 8 * i, 8);
        } else {
          v = t.double_data(static_cast<int>(i));
        }
        out.f32()[i] = static_cast<float>(v);
      }
      return out;
    }
    case onnx::TensorProto::INT64: {
      RETURN_IF_ERROR(need(8, t.int64_data_size()));
      ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(DType::kI64, dims));
      if (!raw.empty()) {
        std::memcpy(out.raw(), raw.data(), raw.size());
      } else {
        for (int64_t i = 0; i < n; ++i) out.i64()[i] = t.int64_data(static_cast<int>(i));
      }
      return out;
    }
    case onnx::TensorProto::INT32:
    case onnx::TensorProto::BOOL:
    case onnx::TensorProto::INT8:
    case onnx::TensorProto::UINT8: {
      const size_t esize = t.data_type() == onnx::TensorProto::INT32 ? 4 : 1;
      RETURN_IF_ERROR(need(esize, t.int32_data_size()));
      ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(DType::kI64, dims));
      for (int64_t i = 0; i < n; ++i) {
        int64_t v = 0;
        if (!raw.empty()) {
          if (esize == 4) {
            int32_t x;
            std::memcpy(&x, raw.data() + 4 * i, 4);
            v = x;
          } else {
            v = t.data_type() == onnx::TensorProto::INT8 ? static_cast<int8_t>(raw[i])
                                                         : static_cast<uint8_t>(raw[i]);
          }
        } else {
          v = t.int32_data(static_cast<int>(i));
        }
        out.i64()[i] = v;
      }
      return out;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(name, " has unsupported data type ", t.data_type()));
  }
}

ImportContext::ImportContext(Graph* graph, int64_t export_batch, bool symbolic_batch)
    : graph_(graph),
      builder_(graph),
      export_batch_(export_batch),
      symbolic_batch_(symbolic_batch) {}

void ImportContext::AddInitializer(const std::string& name, Tensor value) {
  initializers_[name] = std::move(value);
}

void ImportContext::TieTransposedCopies() { copies_ = TransposedCopies(initializers_); }

void ImportContext::SetTensor(const std::string& onnx_name, const std::string& tensor) {
  tensors_[onnx_name] = tensor;
}

void ImportContext::SetConstant(const std::string& onnx_name, Tensor value) {
  // Folded from values of the batch size: the result's form.
  if (node_ != nullptr) {
    std::vector<const BatchForm*> forms;
    std::vector<const Tensor*> values;
    bool from_batch = false;
    for (int k = 0; k < node_->input_size(); ++k) {
      // (A form that does not vary with the batch is a plain constant.)
      auto f = batch_forms_.find(node_->input(k));
      const bool varies = f != batch_forms_.end() && f->second.DependsOnBatch();
      forms.push_back(varies ? &f->second : nullptr);
      values.push_back(ConstantInput(*node_, k));
      from_batch = from_batch || forms.back() != nullptr;
    }
    if (from_batch) {
      batch_forms_[onnx_name] = DeriveBatchForm(*node_, forms, values, value, export_batch_);
    }
  }
  constants_[onnx_name] = std::move(value);
}

void ImportContext::SetBatchForm(const std::string& onnx_name, BatchForm form) {
  batch_forms_[onnx_name] = std::move(form);
}

bool ImportContext::HasInput(const onnx::NodeProto& node, int i) const {
  return i < node.input_size() && !node.input(i).empty();
}

const Tensor* ImportContext::ConstantInput(const onnx::NodeProto& node, int i) const {
  if (!HasInput(node, i)) return nullptr;
  auto c = constants_.find(node.input(i));
  if (c != constants_.end()) return &c->second;
  auto it = initializers_.find(node.input(i));
  if (it != initializers_.end()) return &it->second;
  return nullptr;
}

absl::StatusOr<Tensor> ImportContext::Const(const onnx::NodeProto& node, int i) const {
  const Tensor* t = ConstantInput(node, i);
  if (t == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input ", i, " ('", i < node.input_size() ? node.input(i) : "", "') must be a constant"));
  }
  return *t;
}

absl::StatusOr<std::vector<int64_t>> ImportContext::ConstInts(const onnx::NodeProto& node,
                                                              int i) const {
  ASSIGN_OR_RETURN(Tensor t, Const(node, i));
  if (t.dtype() != DType::kI64) return absl::InvalidArgumentError("expected an integer constant");
  return std::vector<int64_t>(t.i64(), t.i64() + t.numel());
}

bool ImportContext::IsParameterInitializer(const onnx::NodeProto& node, int i) const {
  if (!HasInput(node, i)) return false;
  auto it = initializers_.find(node.input(i));
  if (it == initializers_.end() || !reach_.count(node.input(i))) return false;
  // Trainable: float initializers, except scalars the exporter folded and
  // tensors no weight can be (±inf or NaN: the additive masks of attention).
  const Tensor& t = it->second;
  if (t.dtype() != DType::kF32) return false;
  if (t.numel() <= 1 && absl::StartsWith(node.input(i), "onnx::")) return false;
  for (int64_t k = 0; k < t.numel(); ++k) {
    if (!std::isfinite(t.f32()[k])) return false;
  }
  return true;
}

std::optional<std::string> ImportContext::Lookup(const std::string& onnx_name) const {
  auto it = tensors_.find(onnx_name);
  if (it == tensors_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<std::string> ImportContext::Materialize(const std::string& name, bool trainable,
                                                       bool frozen) {
  if (auto t = Lookup(name)) return *t;
  auto copy = copies_.find(name);
  if (copy != copies_.end() && trainable) {
    ASSIGN_OR_RETURN(std::string w, Materialize(copy->second, true, false));
    Attrs perm;
    perm.SetInts("perm", {1, 0});
    ASSIGN_OR_RETURN(std::string t, builder_.Add("Transpose", {w}, std::move(perm), name));
    tensors_[name] = t;
    return t;
  }
  auto init = initializers_.find(name);
  if (init != initializers_.end() && (trainable || frozen)) {
    const std::string pname = builder_.UniqueName(name);
    ASSIGN_OR_RETURN(std::string p, builder_.AddParameterValue(pname, init->second, frozen));
    tensors_[name] = p;
    return p;
  }
  const Tensor* value = nullptr;
  if (init != initializers_.end()) value = &init->second;
  auto c = constants_.find(name);
  if (c != constants_.end()) value = &c->second;
  if (value == nullptr) return absl::InvalidArgumentError("undefined value '" + name + "'");
  if (auto f = batch_forms_.find(name); f != batch_forms_.end() && f->second.DependsOnBatch()) {
    return FromBatch(name, *value, f->second);
  }
  ASSIGN_OR_RETURN(std::string k, builder_.AddConstant(name, *value));
  tensors_[name] = k;
  return k;
}

absl::StatusOr<std::string> ImportContext::FromBatch(const std::string& name, const Tensor& value,
                                                     const BatchForm& form) {
  for (int64_t d : value.dims()) {
    if (symbolic_batch_ && d > 0 && d % export_batch_ == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", name,
                       "' holds a value per sample computed from the batch size (as torch.arange("
                       "x.shape[0])); not supported: pass it in the data. (PyTorch also exports "
                       "an assignment into a slice of an activation, h[:, 0] = v, so: indices "
                       "over the batch for a ScatterND, which Quilt does not train through; "
                       "build such a tensor with torch.cat or torch.where instead)"));
    }
  }
  if (!form.affine) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", name,
        "' is computed from the batch size (x.shape[0]) by arithmetic the import does not "
        "follow (it follows selections, sums and products of a shape's elements, and "
        "arithmetic with constants); compute it from constants, or pass it in the data"));
  }
  if (value.dtype() != DType::kF32 && value.dtype() != DType::kI64) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", name, "' holds the batch size as ", value.TypeString()));
  }
  Attrs a;
  a.Set("a", form.a);
  a.Set("c", form.c);
  a.SetString("dtype", value.dtype() == DType::kF32 ? "f32" : "i64");
  std::vector<Dim> dims;
  for (int64_t d : value.dims()) dims.push_back(Dim::Fixed(d));
  EncodeShape(&a, "shape", Shape(std::move(dims)));
  ASSIGN_OR_RETURN(std::string k, builder_.Add("BatchAffine", {}, std::move(a), name));
  tensors_[name] = k;
  return k;
}

absl::StatusOr<std::string> ImportContext::Data(const onnx::NodeProto& node, int i) {
  if (!HasInput(node, i))
    return absl::InvalidArgumentError(absl::StrCat("input ", i, " is missing"));
  return Materialize(node.input(i), IsParameterInitializer(node, i), false);
}

absl::StatusOr<std::string> ImportContext::State(const onnx::NodeProto& node, int i) {
  if (!HasInput(node, i))
    return absl::InvalidArgumentError(absl::StrCat("input ", i, " is missing"));
  return Materialize(node.input(i), false, initializers_.count(node.input(i)) > 0);
}

absl::Status ImportContext::Emit(const onnx::NodeProto& node, const std::string& type,
                                 std::vector<std::string> inputs, Attrs attrs, int quilt_outputs,
                                 int map_outputs) {
  if (quilt_outputs < 0) quilt_outputs = node.output_size();
  if (map_outputs < 0) map_outputs = std::min(quilt_outputs, node.output_size());
  const std::string hint = node.name().empty() ? type : node.name();
  ASSIGN_OR_RETURN(std::vector<std::string> outs,
                   builder_.AddOp(type, std::move(inputs), std::move(attrs), quilt_outputs, hint));
  for (int i = 0; i < map_outputs && i < node.output_size(); ++i) {
    if (!node.output(i).empty()) tensors_[node.output(i)] = outs[i];
  }
  return absl::OkStatus();
}

const onnx::AttributeProto* FindAttr(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& a : node.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

int64_t AttrInt(const onnx::NodeProto& node, const std::string& name, int64_t def) {
  const auto* a = FindAttr(node, name);
  return a == nullptr ? def : a->i();
}

float AttrFloat(const onnx::NodeProto& node, const std::string& name, float def) {
  const auto* a = FindAttr(node, name);
  return a == nullptr ? def : a->f();
}

std::string AttrString(const onnx::NodeProto& node, const std::string& name,
                       const std::string& def) {
  const auto* a = FindAttr(node, name);
  return a == nullptr ? def : a->s();
}

std::vector<int64_t> AttrInts(const onnx::NodeProto& node, const std::string& name) {
  const auto* a = FindAttr(node, name);
  if (a == nullptr) return {};
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

}  // namespace quilt::onnx_import
