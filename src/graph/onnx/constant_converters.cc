// Converters of ONNX's shape and constant ops (Constant, Shape,
// ConstantOfShape, Gather, Slice, Concat, Transpose, Cast, Equal, Where,
// Range, Trilu): on constants they fold (the shape arithmetic exports
// compute, fixed masks, positions); on data they become Quilt ops or are
// refused.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/graph/onnx/converter_parts.h"
#include "src/graph/onnx/onnx_import.h"

namespace quilt::onnx_import {
namespace {

// The element of a constant at `index` (row-major), copied to `out` at `at`.
void CopyElement(const Tensor& from, int64_t index, Tensor* out, int64_t at) {
  const size_t size = DTypeSize(from.dtype());
  std::memcpy(static_cast<char*>(out->raw()) + at * size,
              static_cast<const char*>(from.raw()) + index * size, size);
}

// Row-major strides of `dims`.
std::vector<int64_t> Strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) {
    strides[i] = strides[i + 1] * dims[i + 1];
  }
  return strides;
}

}  // namespace

absl::Status ConstantNode(ImportContext& ctx, const Node& node) {
  for (const auto& a : node.attribute()) {
    if (a.name() == "value") {
      ASSIGN_OR_RETURN(Tensor t, FromTensorProto(a.t()));
      ctx.SetConstant(node.output(0), t);
      return absl::OkStatus();
    }
    if (a.name() == "value_float") {
      ctx.SetConstant(node.output(0), Tensor::ScalarF32(a.f()));
      return absl::OkStatus();
    }
    if (a.name() == "value_int") {
      ctx.SetConstant(node.output(0), Tensor::FromI64({}, {a.i()}));
      return absl::OkStatus();
    }
    if (a.name() == "value_ints") {
      std::vector<int64_t> v(a.ints().begin(), a.ints().end());
      ctx.SetConstant(node.output(0), Tensor::FromI64({static_cast<int64_t>(v.size())}, v));
      return absl::OkStatus();
    }
    if (a.name() == "value_floats") {
      std::vector<float> v(a.floats().begin(), a.floats().end());
      ctx.SetConstant(node.output(0), Tensor::FromF32({static_cast<int64_t>(v.size())}, v));
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError("Constant without a supported value attribute");
}

absl::Status Transpose(ImportContext& ctx, const Node& node) {
  Attrs a;
  std::vector<int64_t> perm = AttrInts(node, "perm");
  if (const Tensor* c = ctx.ConstantInput(node, 0);
      c != nullptr && !ctx.IsParameterInitializer(node, 0)) {
    // Constant data (the pads of F.pad are computed so): fold.
    const int r = c->rank();
    if (perm.empty()) {
      for (int i = r - 1; i >= 0; --i) perm.push_back(i);
    }
    if (static_cast<int>(perm.size()) != r) {
      return absl::InvalidArgumentError("Transpose: perm does not match the input's rank");
    }
    std::vector<int64_t> dims;
    for (int64_t p : perm) {
      if (p < 0 || p >= r) return absl::InvalidArgumentError("Transpose: perm out of range");
      dims.push_back(c->dim(static_cast<int>(p)));
    }
    ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(c->dtype(), dims));
    const std::vector<int64_t> in_strides = Strides(c->dims());
    std::vector<int64_t> idx(r, 0);
    for (int64_t i = 0; i < out.numel(); ++i) {
      int64_t from = 0;
      for (int k = 0; k < r; ++k) from += idx[k] * in_strides[perm[k]];
      CopyElement(*c, from, &out, i);
      for (int k = r - 1; k >= 0 && ++idx[k] == dims[k]; --k) idx[k] = 0;
    }
    ctx.SetConstant(node.output(0), std::move(out));
    return absl::OkStatus();
  }
  if (!perm.empty()) a.SetInts("perm", perm);
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  return ctx.Emit(node, "Transpose", {x}, std::move(a));
}

absl::Status Concat(ImportContext& ctx, const Node& node) {
  int64_t axis = AttrInt(node, "axis", 0);
  // Constants (shape arithmetic, Resize's scales, index tensors of a slice
  // assignment): folded.
  std::vector<const Tensor*> c;
  for (int i = 0; i < node.input_size(); ++i) {
    const Tensor* t = ctx.ConstantInput(node, i);
    if (t == nullptr || ctx.IsParameterInitializer(node, i) || t->rank() == 0 ||
        (!c.empty() && (t->dtype() != c[0]->dtype() || t->rank() != c[0]->rank()))) {
      break;
    }
    c.push_back(t);
  }
  const int rank = c.empty() ? 0 : c[0]->rank();
  if (axis < 0) axis += rank;
  bool fold =
      !c.empty() && static_cast<int>(c.size()) == node.input_size() && axis >= 0 && axis < rank;
  for (const Tensor* t : c) {
    for (int d = 0; fold && d < rank; ++d) fold = d == axis || t->dim(d) == c[0]->dim(d);
  }
  if (fold) {
    std::vector<int64_t> dims = c[0]->dims();
    dims[axis] = 0;
    for (const Tensor* t : c) dims[axis] += t->dim(static_cast<int>(axis));
    int64_t outer = 1;
    for (int d = 0; d < axis; ++d) outer *= dims[d];
    ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(c[0]->dtype(), dims));
    char* dst = static_cast<char*>(out.raw());
    for (int64_t o = 0; o < outer; ++o) {
      for (const Tensor* t : c) {
        const int64_t chunk = outer == 0 ? 0 : t->bytes() / outer;
        std::memcpy(dst, static_cast<const char*>(t->raw()) + o * chunk,
                    static_cast<size_t>(chunk));
        dst += chunk;
      }
    }
    ctx.SetConstant(node.output(0), std::move(out));
    return absl::OkStatus();
  }
  Attrs a;
  a.SetInt("axis", axis);
  return Direct(ctx, node, "Concat", std::move(a));
}

// Slice: starts, ends, axes and steps are inputs from opset 10; starts,
// ends and axes are attributes before it.
absl::Status Slice(ImportContext& ctx, const Node& node) {
  std::vector<int64_t> starts, ends, axes, steps;
  if (ctx.opset() < 10) {
    starts = AttrInts(node, "starts");
    ends = AttrInts(node, "ends");
    axes = AttrInts(node, "axes");
  } else {
    ASSIGN_OR_RETURN(starts, ctx.ConstInts(node, 1));
    ASSIGN_OR_RETURN(ends, ctx.ConstInts(node, 2));
    if (ctx.HasInput(node, 3)) {
      ASSIGN_OR_RETURN(axes, ctx.ConstInts(node, 3));
    }
    if (ctx.HasInput(node, 4)) {
      ASSIGN_OR_RETURN(steps, ctx.ConstInts(node, 4));
    }
  }
  const Tensor* c = ctx.ConstantInput(node, 0);
  if (c != nullptr && !ctx.IsParameterInitializer(node, 0) && c->rank() > 0) {
    // Shape arithmetic (and other constant data): slice the constant.
    const int r = c->rank();
    if (starts.size() != ends.size() || (!axes.empty() && axes.size() != starts.size()) ||
        (!steps.empty() && steps.size() != starts.size())) {
      return absl::InvalidArgumentError("Slice: starts, ends, axes and steps differ in length");
    }
    std::vector<int64_t> first(r, 0), step(r, 1), count(c->dims());
    for (size_t k = 0; k < starts.size(); ++k) {
      int64_t axis = axes.empty() ? static_cast<int64_t>(k) : axes[k];
      if (axis < 0) axis += r;
      if (axis < 0 || axis >= r) return absl::InvalidArgumentError("Slice: axis out of range");
      const int64_t n = c->dim(static_cast<int>(axis));
      int64_t st = starts[k], en = ends[k];
      const int64_t s = steps.empty() ? 1 : steps[k];
      if (s == 0) return absl::InvalidArgumentError("Slice: a step is 0");
      if (st < 0) st += n;
      if (en < 0) en += n;
      if (s > 0) {
        st = std::clamp<int64_t>(st, 0, n);
        en = std::clamp<int64_t>(en, 0, n);
      } else {
        st = std::clamp<int64_t>(st, 0, n - 1);
        en = std::clamp<int64_t>(en, -1, n - 1);
      }
      first[axis] = st;
      step[axis] = s;
      count[axis] = s > 0 ? std::max<int64_t>(0, (en - st + s - 1) / s)
                          : std::max<int64_t>(0, (st - en + (-s) - 1) / (-s));
    }
    ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(c->dtype(), count));
    const std::vector<int64_t> strides = Strides(c->dims());
    std::vector<int64_t> idx(r, 0);
    for (int64_t i = 0; i < out.numel(); ++i) {
      int64_t from = 0;
      for (int k = 0; k < r; ++k) from += (first[k] + idx[k] * step[k]) * strides[k];
      CopyElement(*c, from, &out, i);
      for (int k = r - 1; k >= 0 && ++idx[k] == count[k]; --k) idx[k] = 0;
    }
    ctx.SetConstant(node.output(0), std::move(out));
    return absl::OkStatus();
  }
  Attrs a;
  a.SetInts("starts", starts);
  a.SetInts("ends", ends);
  if (!axes.empty()) a.SetInts("axes", axes);
  if (!steps.empty()) a.SetInts("steps", steps);
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  return ctx.Emit(node, "Slice", {x}, std::move(a));
}

absl::Status Gather(ImportContext& ctx, const Node& node) {
  const int64_t axis = AttrInt(node, "axis", 0);
  const Tensor* data = ctx.ConstantInput(node, 0);
  const Tensor* idx = ctx.ConstantInput(node, 1);
  if (data != nullptr && idx != nullptr && data->dtype() == DType::kI64 && data->rank() == 1) {
    std::vector<int64_t> v;
    for (int64_t i = 0; i < idx->numel(); ++i) {
      int64_t k = idx->i64()[i];
      if (k < 0) k += data->numel();
      if (k < 0 || k >= data->numel()) return absl::InvalidArgumentError("index out of range");
      v.push_back(data->i64()[k]);
    }
    ctx.SetConstant(node.output(0), Tensor::FromI64(idx->dims(), v));
    return absl::OkStatus();
  }
  Attrs a;
  a.SetInt("axis", axis);
  if (idx == nullptr && axis == 0) {
    // Ids straight from the model's input: negative ones are bad data.
    ASSIGN_OR_RETURN(std::string ids, ctx.Data(node, 1));
    const std::vector<std::string>& inputs = ctx.b().graph().inputs;
    if (std::find(inputs.begin(), inputs.end(), ids) != inputs.end()) a.SetInt("ids_from_data", 1);
  }
  // An embedding table with one row of zeros among others: that row is
  // nn.Embedding's padding_idx, which PyTorch keeps out of the lookup's
  // gradient (the export loses the flag). The table is looked up as
  // table · keep + StopGradient(table) · (1 − keep), keep 0 at that row:
  // the same values (the row may train elsewhere, through a tied output
  // layer), and no gradient through the lookup there.
  if (data != nullptr && axis == 0 && data->dtype() == DType::kF32 && data->rank() == 2 &&
      data->dim(0) > 1 && ctx.IsParameterInitializer(node, 0)) {
    const int64_t rows = data->dim(0), cols = data->dim(1);
    std::vector<int64_t> zero_rows;
    for (int64_t r = 0; r < rows && zero_rows.size() < 2; ++r) {
      const float* row = data->f32() + r * cols;
      if (std::all_of(row, row + cols, [](float v) { return v == 0.0f; })) zero_rows.push_back(r);
    }
    if (zero_rows.size() == 1) {
      ASSIGN_OR_RETURN(std::string table, ctx.Data(node, 0));
      ASSIGN_OR_RETURN(std::string ids, ctx.Data(node, 1));
      ASSIGN_OR_RETURN(Tensor keep, Tensor::Empty(DType::kF32, {rows, 1}));
      for (int64_t r = 0; r < rows; ++r) keep.f32()[r] = r == zero_rows[0] ? 0.0f : 1.0f;
      ASSIGN_OR_RETURN(
          std::string mask,
          ctx.b().AddConstant(absl::StrCat(table, kPaddingRowMark, zero_rows[0]), std::move(keep)));
      ASSIGN_OR_RETURN(Tensor row, Tensor::Empty(DType::kF32, {rows, 1}));
      for (int64_t r = 0; r < rows; ++r) row.f32()[r] = r == zero_rows[0] ? 1.0f : 0.0f;
      ASSIGN_OR_RETURN(std::string row_mask,
                       ctx.b().AddConstant(table + "/padding_value_mask", std::move(row)));
      ASSIGN_OR_RETURN(std::string kept,
                       ctx.b().Add("Mul", {table, mask}, {}, table + "/without_padding_row"));
      ASSIGN_OR_RETURN(std::string held, ctx.b().Add("StopGradient", {table}, {}, table + "/held"));
      ASSIGN_OR_RETURN(std::string padding,
                       ctx.b().Add("Mul", {held, row_mask}, {}, table + "/padding_value"));
      ASSIGN_OR_RETURN(std::string looked_up,
                       ctx.b().Add("Add", {kept, padding}, {}, table + "/for_lookup"));
      return ctx.Emit(node, "Gather", {looked_up, ids}, std::move(a));
    }
  }
  return Direct(ctx, node, "Gather", std::move(a));
}

namespace {

// Input 0's dims (a data tensor's at the export batch), element type and
// whether it holds the batch.
struct InputShape {
  std::vector<int64_t> dims;
  DType dtype = DType::kF32;
  bool batched = false;
  std::vector<bool> batch_dims;  // per dim: whether it is the batch's
};
absl::StatusOr<InputShape> ShapeOfInput(ImportContext& ctx, const Node& node) {
  InputShape in;
  if (const Tensor* c = ctx.ConstantInput(node, 0)) {
    in.dims = c->dims();
    in.dtype = c->dtype();
    return in;
  }
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  ASSIGN_OR_RETURN(TensorType t, ctx.TypeOf(x));
  in.dims = t.shape.Concrete(ctx.export_batch());
  in.dtype = t.dtype;
  in.batched = t.shape.HasBatch();
  for (int i = 0; i < t.shape.rank(); ++i) in.batch_dims.push_back(t.shape.dim(i).batch);
  return in;
}

}  // namespace

absl::Status ShapeNode(ImportContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(InputShape in, ShapeOfInput(ctx, node));
  std::vector<int64_t> dims = in.dims;
  const int64_t r = static_cast<int64_t>(dims.size());
  int64_t start = AttrInt(node, "start", 0), end = AttrInt(node, "end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::max<int64_t>(0, std::min(start, r));
  end = std::max(start, std::min(end, r));
  std::vector<int64_t> v(dims.begin() + start, dims.begin() + end);
  ctx.SetConstant(node.output(0), Tensor::FromI64({static_cast<int64_t>(v.size())}, v));
  if (ctx.symbolic_batch() && in.batched) {
    // Its batch element is B (times the dim's multiple) when used as data.
    BatchForm form;
    for (int64_t i = start; i < end; ++i) {
      const bool batch = in.batch_dims[i];
      form.a.push_back(batch ? static_cast<double>(dims[i] / ctx.export_batch()) : 0.0);
      form.c.push_back(batch ? 0.0 : static_cast<double>(dims[i]));
    }
    ctx.SetBatchForm(node.output(0), std::move(form));
  }
  return absl::OkStatus();
}

absl::Status ConstantOfShape(ImportContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, ctx.ConstInts(node, 0));
  Tensor value = Tensor::ScalarF32(0.0f);
  if (const auto* a = FindAttr(node, "value")) {
    ASSIGN_OR_RETURN(value, FromTensorProto(a->t()));
  }
  // Shaped by the batch (torch.ones(x.shape[0], ...), ones_like; a multiple
  // of it: batch × heads): the value broadcast to the batch, whatever its
  // size. (In a fixed-batch export a dim of the export's batch may as well
  // be a sequence's of that length: a causal mask's [T, T].)
  const int64_t b0 = ctx.export_batch();
  auto batch_at =
      ctx.symbolic_batch()
          ? std::find_if(dims.begin(), dims.end(), [&](int64_t d) { return d > 0 && d % b0 == 0; })
          : dims.end();
  const bool batched = batch_at != dims.end();
  // Integers over the batch (torch.zeros(ids.shape, dtype=torch.long): token
  // types): a float constant expanded, then cast back (exact below 2^24).
  const auto* attr = FindAttr(node, "value");
  const bool boolean = attr != nullptr && attr->t().data_type() == onnx::TensorProto::BOOL;
  if (batched && boolean && value.numel() == 1) {
    // A mask over the batch (torch.zeros(B, 1, dtype=torch.bool)): 0s or 1s
    // as floats, as masks of data are.
    value = Tensor::ScalarF32(NumberAt(value, 0) != 0 ? 1.0f : 0.0f);
  }
  const bool ints = batched && value.dtype() == DType::kI64 && value.numel() == 1 &&
                    std::abs(value.i64()[0]) < (int64_t{1} << 24);
  if (ints) value = Tensor::ScalarF32(static_cast<float>(value.i64()[0]));
  if (batched && value.dtype() != DType::kF32) {
    return absl::InvalidArgumentError(
        "a constant sized by the batch is supported for float values and int64 values below "
        "2^24 only");
  }
  std::vector<Dim> shape;
  for (auto d = dims.begin(); d != dims.end(); ++d) {
    shape.push_back(d == batch_at ? Dim::Batch(*d / b0) : Dim::Fixed(*d));
  }
  if (batched) *batch_at = 1;
  ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(value.dtype(), dims));
  for (int64_t i = 0; i < out.numel(); ++i) {
    std::memcpy(static_cast<char*>(out.raw()) + i * DTypeSize(out.dtype()), value.raw(),
                DTypeSize(out.dtype()));
  }
  if (!batched) {
    ctx.SetConstant(node.output(0), std::move(out));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::string x, ctx.b().AddConstant(node.output(0) + "/value", std::move(out)));
  Attrs a;
  EncodeShape(&a, "shape", quilt::Shape(shape));
  if (!ints) return ctx.Emit(node, "Expand", {x}, std::move(a));
  ASSIGN_OR_RETURN(std::string e,
                   ctx.b().Add("Expand", {x}, std::move(a), node.output(0) + "/f32"));
  Attrs to_int;
  to_int.SetString("to", "i64");
  return ctx.Emit(node, "Cast", {e}, std::move(to_int));
}

// EyeLike (torch.eye(n) of a fixed n, in forward: a GCN's self-loops): an
// identity matrix shaped like its input, ones on diagonal k.
absl::Status EyeLikeNode(ImportContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(InputShape in, ShapeOfInput(ctx, node));
  if (in.batched) return absl::InvalidArgumentError("EyeLike of a tensor holding the batch");
  const std::vector<int64_t>& dims = in.dims;
  const DType in_type = in.dtype;
  if (dims.size() != 2) return absl::InvalidArgumentError("EyeLike of a tensor not of rank 2");
  const int64_t k = AttrInt(node, "k", 0);
  // The dtype attribute's type, else the input's.
  const int64_t dtype = AttrInt(node, "dtype", -1);
  const bool ints = dtype == onnx::TensorProto::INT64 || (dtype < 0 && in_type == DType::kI64);
  ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros(ints ? DType::kI64 : DType::kF32, dims));
  for (int64_t r = 0; r < dims[0]; ++r) {
    const int64_t col = r + k;
    if (col < 0 || col >= dims[1]) continue;
    if (ints) {
      out.i64()[r * dims[1] + col] = 1;
    } else {
      out.f32()[r * dims[1] + col] = 1.0f;
    }
  }
  ctx.SetConstant(node.output(0), std::move(out));
  return absl::OkStatus();
}

// Equal and Where on constants: the shape arithmetic PyTorch exports for
// expand(-1, ...) (which dims to keep), folded.
absl::StatusOr<std::string> FiniteData(ImportContext& ctx, const Node& node, int i) {
  const Tensor* c = ctx.ConstantInput(node, i);
  if (c == nullptr || c->dtype() != DType::kF32 || ctx.IsParameterInitializer(node, i)) {
    return ctx.Data(node, i);
  }
  Tensor v = c->Clone();
  for (int64_t k = 0; k < v.numel(); ++k) {
    float& f = v.f32()[k];
    if (std::isinf(f))
      f = f > 0 ? std::numeric_limits<float>::max() : -std::numeric_limits<float>::max();
  }
  return ctx.b().AddConstant(node.input(i) + "/finite", std::move(v));
}

absl::Status WhereNode(ImportContext& ctx, const Node& node) {
  const Tensor* c = ctx.ConstantInput(node, 0);
  // A BOOL initializer (a mask the exporter folded) is read as integers.
  Tensor as_bool;
  if (c != nullptr && c->dtype() == DType::kI64) {
    ASSIGN_OR_RETURN(as_bool, Tensor::Empty(DType::kBool, c->dims()));
    for (int64_t i = 0; i < c->numel(); ++i) {
      static_cast<uint8_t*>(as_bool.raw())[i] = c->i64()[i] != 0;
    }
    c = &as_bool;
  }
  const Tensor* x = ctx.ConstantInput(node, 1);
  const Tensor* y = ctx.ConstantInput(node, 2);
  if (c != nullptr && c->dtype() == DType::kBool && (x == nullptr) != (y == nullptr)) {
    // A fixed mask filling data with a constant (masked_fill with a causal
    // mask): data · keep + fill, keep and fill constants shaped like the
    // mask (the gradient passes where the data is kept).
    const Tensor* v = x != nullptr ? x : y;
    const bool fill_when = x != nullptr;  // the mask's value where v goes
    if (v->numel() != 1 || v->dtype() != DType::kF32) {
      return absl::InvalidArgumentError(
          "Where with a constant mask is supported with a float scalar as its constant branch");
    }
    ASSIGN_OR_RETURN(Tensor keep, Tensor::Empty(DType::kF32, c->dims()));
    ASSIGN_OR_RETURN(Tensor fill, Tensor::Empty(DType::kF32, c->dims()));
    const auto* cond = static_cast<const uint8_t*>(c->raw());
    for (int64_t i = 0; i < c->numel(); ++i) {
      const bool filled = (cond[i] != 0) == fill_when;
      keep.f32()[i] = filled ? 0.0f : 1.0f;
      fill.f32()[i] = filled ? v->f32()[0] : 0.0f;
    }
    ASSIGN_OR_RETURN(std::string data, ctx.Data(node, x != nullptr ? 2 : 1));
    ASSIGN_OR_RETURN(std::string keep_t, ctx.b().AddConstant(node.output(0) + "/keep", keep));
    ASSIGN_OR_RETURN(std::string fill_t, ctx.b().AddConstant(node.output(0) + "/fill", fill));
    ASSIGN_OR_RETURN(std::string kept, ctx.b().Add("Mul", {data, keep_t}));
    return ctx.Emit(node, "Add", {kept, fill_t}, Attrs());
  }
  if (c == nullptr || x == nullptr || y == nullptr || c->dtype() != DType::kBool ||
      x->dtype() != DType::kI64 || y->dtype() != DType::kI64) {
    // A condition of data (0s and 1s), or data in both branches:
    // y + c · (x - y), broadcast; the gradient reaches x where c holds and
    // y elsewhere.
    std::string cond;
    if (c != nullptr) {
      ASSIGN_OR_RETURN(Tensor f, Tensor::Empty(DType::kF32, c->dims()));
      for (int64_t i = 0; i < c->numel(); ++i) {
        f.f32()[i] = static_cast<const uint8_t*>(c->raw())[i] != 0 ? 1.0f : 0.0f;
      }
      ASSIGN_OR_RETURN(cond, ctx.b().AddConstant(node.name() + "/condition", std::move(f)));
    } else {
      ASSIGN_OR_RETURN(cond, ctx.Data(node, 0));
      ASSIGN_OR_RETURN(TensorType t, ctx.TypeOf(cond));
      if (t.dtype != DType::kF32) {
        return absl::InvalidArgumentError("Where's condition must be a boolean");
      }
    }
    ASSIGN_OR_RETURN(std::string xd, FiniteData(ctx, node, 1));
    ASSIGN_OR_RETURN(std::string yd, FiniteData(ctx, node, 2));
    // Integer branches (ids picked by a mask): in float32, exact for the
    // small integers ids are, and cast back.
    std::vector<std::string> branches = {xd, yd};
    ASSIGN_OR_RETURN(const bool integer, CastIntsToFloat(ctx, node, &branches));
    ASSIGN_OR_RETURN(std::string diff, ctx.b().Add("Sub", branches, {}, node.name() + "/diff"));
    ASSIGN_OR_RETURN(std::string picked,
                     ctx.b().Add("Mul", {cond, diff}, {}, node.name() + "/picked"));
    return EmitLastOp(ctx, node, "Add", {branches[1], picked}, {}, integer);
  }
  absl::StatusOr<Broadcast> bc = BroadcastDims({c->dims(), x->dims(), y->dims()});
  if (!bc.ok()) return absl::InvalidArgumentError(absl::StrCat("Where: ", bc.status().message()));
  ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(DType::kI64, bc->dims));
  const auto* cond = static_cast<const uint8_t*>(c->raw());
  for (int64_t i = 0; i < out.numel(); ++i) {
    out.i64()[i] = cond[bc->from[0][i]] ? x->i64()[bc->from[1][i]] : y->i64()[bc->from[2][i]];
  }
  ctx.SetConstant(node.output(0), out);
  return absl::OkStatus();
}

// Mod of data (torch.div(..., rounding_mode="floor") exports a Mod that
// corrects the quotient's sign; ids % k): a − b · floor(a / b), the
// divisor's sign (Python's %); int64 in float32 (exact for the small
// integers ids are) and cast back. The gradient is 1 for a (and
// −floor(a / b) for b), as PyTorch's.
absl::Status ModOfData(ImportContext& ctx, const Node& node) {
  const std::string at = node.name().empty() ? "Mod" : node.name();
  if (AttrInt(node, "fmod", 0) != 0) {
    return absl::InvalidArgumentError(
        "Mod with fmod = 1 (torch.fmod) of data is not supported (of constants, and Python's % "
        "of data, are)");
  }
  std::vector<std::string> in(2);
  for (int i = 0; i < 2; ++i) {
    ASSIGN_OR_RETURN(in[i], ctx.Data(node, i));
  }
  ASSIGN_OR_RETURN(const bool integer, CastIntsToFloat(ctx, node, &in));
  ASSIGN_OR_RETURN(std::string q, ctx.b().Add("Div", {in[0], in[1]}, {}, at + "/quotient"));
  ASSIGN_OR_RETURN(std::string whole, ctx.b().Add("Floor", {q}, {}, at + "/floor"));
  ASSIGN_OR_RETURN(std::string taken, ctx.b().Add("Mul", {in[1], whole}, {}, at + "/taken"));
  return EmitLastOp(ctx, node, "Sub", {in[0], taken}, {}, integer);
}

// Mod of constants (index arithmetic, e.g. window positions): folded, with
// the divisor's sign (Python's %) or, with fmod=1, the dividend's.
absl::Status ModNode(ImportContext& ctx, const Node& node) {
  const Tensor* a = ctx.ConstantInput(node, 0);
  const Tensor* b = ctx.ConstantInput(node, 1);
  if (a == nullptr || b == nullptr || ctx.IsParameterInitializer(node, 0) ||
      ctx.IsParameterInitializer(node, 1)) {
    return ModOfData(ctx, node);
  }
  if (a->dtype() != b->dtype() || (a->dtype() != DType::kI64 && a->dtype() != DType::kF32)) {
    return absl::InvalidArgumentError("Mod of constants of two types, or not numbers");
  }
  absl::StatusOr<Broadcast> bc = BroadcastDims({a->dims(), b->dims()});
  if (!bc.ok()) return absl::InvalidArgumentError(absl::StrCat("Mod: ", bc.status().message()));
  const bool fmod = AttrInt(node, "fmod", 0) != 0;
  ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(a->dtype(), bc->dims));
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (a->dtype() == DType::kI64) {
      const int64_t x = a->i64()[bc->from[0][i]], y = b->i64()[bc->from[1][i]];
      if (y == 0) return absl::InvalidArgumentError("Mod by zero");
      int64_t r = x % y;
      if (!fmod && r != 0 && ((r < 0) != (y < 0))) r += y;
      out.i64()[i] = r;
    } else {
      const double x = a->f32()[bc->from[0][i]], y = b->f32()[bc->from[1][i]];
      double r = std::fmod(x, y);
      if (!fmod && r != 0 && ((r < 0) != (y < 0))) r += y;
      out.f32()[i] = static_cast<float>(r);
    }
  }
  ctx.SetConstant(node.output(0), std::move(out));
  return absl::OkStatus();
}

// ReduceProd of a constant vector (an element count from a shape, as
// torch.std and var export): folded.
absl::Status ReduceProdNode(ImportContext& ctx, const Node& node) {
  const Tensor* a = ctx.ConstantInput(node, 0);
  if (a == nullptr || a->rank() > 1 || (a->dtype() != DType::kI64 && a->dtype() != DType::kF32)) {
    return absl::InvalidArgumentError(
        "ReduceProd is supported on a constant vector (an element count from a shape); a "
        "product of data is not");
  }
  if (ctx.HasInput(node, 1)) {
    ASSIGN_OR_RETURN(std::vector<int64_t> axes, ctx.ConstInts(node, 1));
    for (int64_t axis : axes) {
      if (axis != 0 && axis != -1) return absl::InvalidArgumentError("ReduceProd: bad axis");
    }
  }
  const bool keep = AttrInt(node, "keepdims", 1) != 0 && a->rank() == 1;
  std::vector<int64_t> dims;
  if (keep) dims.push_back(1);
  ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(a->dtype(), dims));
  if (a->dtype() == DType::kI64) {
    int64_t p = 1;
    for (int64_t i = 0; i < a->numel(); ++i) p *= a->i64()[i];
    out.i64()[0] = p;
  } else {
    double p = 1;
    for (int64_t i = 0; i < a->numel(); ++i) p *= a->f32()[i];
    out.f32()[0] = static_cast<float>(p);
  }
  ctx.SetConstant(node.output(0), std::move(out));
  return absl::OkStatus();
}

// Range of constants (torch.arange over a fixed length): folded.
absl::Status RangeNode(ImportContext& ctx, const Node& node) {
  const Tensor* a[3];
  for (int i = 0; i < 3; ++i) {
    a[i] = ctx.ConstantInput(node, i);
    if (a[i] == nullptr || a[i]->numel() != 1 || a[i]->dtype() != a[0]->dtype() ||
        (a[i]->dtype() != DType::kI64 && a[i]->dtype() != DType::kF32)) {
      return absl::InvalidArgumentError(
          "Range is supported over constant scalars of one type (a fixed length); a range "
          "computed from the inputs is not");
    }
  }
  const bool ints = a[0]->dtype() == DType::kI64;
  auto value = [&](int i) { return ints ? static_cast<double>(a[i]->i64()[0]) : a[i]->f32()[0]; };
  const double start = value(0), limit = value(1), delta = value(2);
  if (delta == 0) return absl::InvalidArgumentError("Range: delta is 0");
  const double count = std::max(0.0, std::ceil((limit - start) / delta));
  if (!(count <= double{1 << 30})) return absl::InvalidArgumentError("Range: too many values");
  ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(a[0]->dtype(), {static_cast<int64_t>(count)}));
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (ints) {
      out.i64()[i] = a[0]->i64()[0] + i * a[2]->i64()[0];
    } else {
      out.f32()[i] = static_cast<float>(start + static_cast<double>(i) * delta);
    }
  }
  ctx.SetConstant(node.output(0), std::move(out));
  return absl::OkStatus();
}

// Trilu of a constant (a causal mask built with torch.triu / tril in
// forward): folded; elements outside the triangle become zero.
absl::Status TriluNode(ImportContext& ctx, const Node& node) {
  const Tensor* c = ctx.ConstantInput(node, 0);
  if (c == nullptr || ctx.IsParameterInitializer(node, 0) || c->rank() < 2) {
    return absl::InvalidArgumentError(
        "Trilu (torch.triu / tril) is supported on constants of rank 2 or more (a mask built "
        "from fixed sizes); on data it is not");
  }
  int64_t k = 0;
  if (ctx.HasInput(node, 1)) {
    ASSIGN_OR_RETURN(std::vector<int64_t> kv, ctx.ConstInts(node, 1));
    if (kv.size() != 1) return absl::InvalidArgumentError("Trilu: k must be a scalar");
    k = kv[0];
  }
  const bool upper = AttrInt(node, "upper", 1) != 0;
  const int64_t rows = c->dim(c->rank() - 2), cols = c->dim(c->rank() - 1);
  Tensor out = c->Clone();
  const int64_t esize = c->bytes() / std::max<int64_t>(1, c->numel());
  char* data = static_cast<char*>(out.raw());
  for (int64_t i = 0; i < out.numel(); ++i) {
    const int64_t col = i % cols, row = (i / cols) % rows;
    const bool kept = upper ? col - row >= k : col - row <= k;
    if (!kept) std::memset(data + i * esize, 0, static_cast<size_t>(esize));
  }
  ctx.SetConstant(node.output(0), std::move(out));
  return absl::OkStatus();
}

// Equal, Greater, Less, GreaterOrEqual, LessOrEqual of data: 1 where the
// comparison holds, as floats (a boolean of data is 0s and 1s).
absl::Status CompareNode(ImportContext& ctx, const Node& node) {
  static const auto* modes = new std::map<std::string, std::string>{{"Equal", "eq"},
                                                                    {"Greater", "gt"},
                                                                    {"Less", "lt"},
                                                                    {"GreaterOrEqual", "ge"},
                                                                    {"LessOrEqual", "le"}};
  const std::string mode = modes->at(node.op_type());
  const Tensor* ca = ctx.ConstantInput(node, 0);
  const Tensor* cb = ctx.ConstantInput(node, 1);
  auto numeric = [](const Tensor* t) {
    return t != nullptr && (t->dtype() == DType::kI64 || t->dtype() == DType::kF32);
  };
  if (numeric(ca) && numeric(cb)) {
    // Of constants: folded.
    auto value = [](const Tensor* t, int64_t i) {
      return t->dtype() == DType::kI64 ? static_cast<double>(t->i64()[i]) : t->f32()[i];
    };
    absl::StatusOr<Broadcast> bc = BroadcastDims({ca->dims(), cb->dims()});
    if (!bc.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(node.op_type(), ": ", bc.status().message()));
    }
    ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(DType::kBool, bc->dims));
    auto* o = static_cast<uint8_t*>(out.raw());
    for (int64_t i = 0; i < out.numel(); ++i) {
      const double x = value(ca, bc->from[0][i]), y = value(cb, bc->from[1][i]);
      o[i] = mode == "eq"   ? x == y
             : mode == "gt" ? x > y
             : mode == "lt" ? x < y
             : mode == "ge" ? x >= y
                            : x <= y;
    }
    ctx.SetConstant(node.output(0), std::move(out));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  ASSIGN_OR_RETURN(std::string y, ctx.Data(node, 1));
  Attrs a;
  a.SetString("mode", mode);
  return ctx.Emit(node, "CompareMask", {x, y}, std::move(a));
}

// Not of a constant folds; of data (0s and 1s) it is 1 - x.
absl::Status NotNode(ImportContext& ctx, const Node& node) {
  if (const Tensor* c = ctx.ConstantInput(node, 0); c != nullptr && c->dtype() == DType::kBool) {
    Tensor out = c->Clone();
    auto* v = static_cast<uint8_t*>(out.raw());
    for (int64_t i = 0; i < out.numel(); ++i) v[i] = v[i] == 0;
    ctx.SetConstant(node.output(0), std::move(out));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  ASSIGN_OR_RETURN(TensorType t, ctx.TypeOf(x));
  if (t.dtype != DType::kF32) {
    // A boolean read as integers (a BOOL buffer sliced to the input's
    // length): its 0s and 1s as floats.
    Attrs to;
    to.SetString("to", "f32");
    ASSIGN_OR_RETURN(x, ctx.b().Add("Cast", {x}, std::move(to), node.name() + "/as_float"));
  }
  ASSIGN_OR_RETURN(std::string one, ScalarConstant(ctx, node.name() + "/one", 1));
  return ctx.Emit(node, "Sub", {one, x}, {});
}

absl::Status Cast(ImportContext& ctx, const Node& node) {
  const int64_t to = AttrInt(node, "to", 0);
  std::string q;
  if (to == onnx::TensorProto::FLOAT || to == onnx::TensorProto::DOUBLE) q = "f32";
  if (to == onnx::TensorProto::INT64 || to == onnx::TensorProto::INT32) q = "i64";
  if (to == onnx::TensorProto::BOOL) {
    // (An initializer too: a mask buffer; nothing trains through a bool.)
    const Tensor* c = ctx.ConstantInput(node, 0);
    if (c == nullptr) {
      // Of data: x != 0, as floats (a boolean of data is 0s and 1s).
      ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
      ASSIGN_OR_RETURN(TensorType t, ctx.TypeOf(x));
      ASSIGN_OR_RETURN(Tensor zero, Tensor::Empty(t.dtype, {}));
      std::memset(zero.raw(), 0, static_cast<size_t>(zero.bytes()));
      ASSIGN_OR_RETURN(std::string z, ctx.b().AddConstant(node.name() + "/zero", std::move(zero)));
      Attrs eq_mode;
      eq_mode.SetString("mode", "eq");
      ASSIGN_OR_RETURN(std::string eq, ctx.b().Add("CompareMask", {x, z}, std::move(eq_mode),
                                                   node.name() + "/is_zero"));
      ASSIGN_OR_RETURN(std::string one, ScalarConstant(ctx, node.name() + "/one", 1));
      return ctx.Emit(node, "Sub", {one, eq}, {});
    }
    RETURN_IF_ERROR(CheckNumeric(*c, "Cast"));
    ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(DType::kBool, c->dims()));
    for (int64_t i = 0; i < c->numel(); ++i) {
      static_cast<uint8_t*>(out.raw())[i] = NumberAt(*c, i) != 0;
    }
    ctx.SetConstant(node.output(0), std::move(out));
    return absl::OkStatus();
  }
  if (q.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        "Cast to ",
        onnx::TensorProto::DataType_IsValid(static_cast<int>(to))
            ? onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(to))
            : absl::StrCat("type ", to),
        " is not supported (float and integer tensors are)"));
  if (const Tensor* c = ctx.ConstantInput(node, 0);
      c != nullptr && !ctx.IsParameterInitializer(node, 0)) {
    RETURN_IF_ERROR(CheckNumeric(*c, "Cast"));
    ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(q == "f32" ? DType::kF32 : DType::kI64, c->dims()));
    for (int64_t i = 0; i < c->numel(); ++i) {
      // (A boolean is 0 or 1; int64 to int64 stays exact beyond 2^53.)
      if (q == "f32") {
        out.f32()[i] = static_cast<float>(NumberAt(*c, i));
      } else {
        out.i64()[i] =
            c->dtype() == DType::kI64 ? c->i64()[i] : static_cast<int64_t>(NumberAt(*c, i));
      }
    }
    ctx.SetConstant(node.output(0), out);
    return absl::OkStatus();
  }
  Attrs a;
  a.SetString("to", q);
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  return ctx.Emit(node, "Cast", {x}, std::move(a));
}

}  // namespace quilt::onnx_import
