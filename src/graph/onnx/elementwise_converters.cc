// Element-wise converters and the folds of constants they share: NumPy
// broadcasting of constants, Add/Sub/Mul/Div/Pow and float functions of
// constants folded (shape arithmetic, scales, rotary tables, T5 buckets),
// Quilt's element-wise ops on data, and Expand.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/common/status.h"
#include "src/graph/onnx/converter_parts.h"

namespace quilt::onnx_import {

double NumberAt(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32:
      return t.f32()[i];
    case DType::kI64:
      return static_cast<double>(t.i64()[i]);
    case DType::kI32:
      return static_cast<const int32_t*>(t.raw())[i];
    case DType::kBool:
      return static_cast<const uint8_t*>(t.raw())[i] != 0 ? 1.0 : 0.0;
    default:
      return 0;
  }
}

absl::Status CheckNumeric(const Tensor& t, const std::string& op) {
  if (t.dtype() == DType::kF32 || t.dtype() == DType::kI64 || t.dtype() == DType::kI32 ||
      t.dtype() == DType::kBool) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(op, " of a constant of ", t.TypeString(),
                   " (float32, int64, int32 and boolean constants are supported)"));
}

absl::StatusOr<Broadcast> BroadcastDims(const std::vector<std::vector<int64_t>>& operands) {
  size_t rank = 0;
  for (const auto& d : operands) rank = std::max(rank, d.size());
  Broadcast b;
  b.dims.assign(rank, 1);
  // Each operand's stride per result dim (0 where it broadcasts).
  std::vector<std::vector<int64_t>> strides;
  for (const auto& d : operands) {
    std::vector<int64_t> st(rank, 0);
    int64_t stride = 1;
    for (size_t k = 0; k < d.size(); ++k) {
      const size_t i = rank - 1 - k;
      const int64_t v = d[d.size() - 1 - k];
      if (v != 1) {
        if (b.dims[i] != 1 && b.dims[i] != v) {
          std::vector<std::string> all;
          for (const auto& o : operands)
            all.push_back(absl::StrCat("[", absl::StrJoin(o, ","), "]"));
          return absl::InvalidArgumentError(
              absl::StrCat("dims ", absl::StrJoin(all, " and "), " do not broadcast"));
        }
        b.dims[i] = v;
        st[i] = stride;
      }
      stride *= v;
    }
    strides.push_back(std::move(st));
  }
  int64_t n = 1;
  for (int64_t v : b.dims) {
    if (v < 0) return absl::InvalidArgumentError(absl::StrCat("a negative dim (", v, ")"));
    if (v > 0 && n > (int64_t{1} << 28) / v) {
      return absl::InvalidArgumentError("a constant of more than 2^28 elements");
    }
    n *= v;
  }
  b.from.assign(operands.size(), std::vector<int64_t>(static_cast<size_t>(n)));
  std::vector<int64_t> idx(rank, 0);
  for (int64_t e = 0; e < n; ++e) {
    for (size_t o = 0; o < operands.size(); ++o) {
      int64_t at = 0;
      for (size_t i = 0; i < rank; ++i) at += idx[i] * strides[o][i];
      b.from[o][static_cast<size_t>(e)] = at;
    }
    for (int i = static_cast<int>(rank) - 1; i >= 0 && ++idx[i] == b.dims[i]; --i) idx[i] = 0;
  }
  return b;
}

namespace {

// Folds an element-wise op on constants that are not parameters: shape
// arithmetic (int64 Add, Sub, Mul, Div) and float arithmetic on constants
// (a scale computed from a dim, e.g. 1 / sqrt(head size)).
bool FoldBinary(ImportContext& ctx, const Node& node) {
  const Tensor* a = ctx.ConstantInput(node, 0);
  const Tensor* b = ctx.ConstantInput(node, 1);
  if (a == nullptr || b == nullptr || ctx.IsParameterInitializer(node, 0) ||
      ctx.IsParameterInitializer(node, 1)) {
    return false;
  }
  absl::StatusOr<Broadcast> bc = BroadcastDims({a->dims(), b->dims()});
  if (!bc.ok()) return false;  // (the op reports the shapes)
  const std::vector<int64_t>&ia = bc->from[0], &ib = bc->from[1];
  const std::string& t = node.op_type();
  if (a->dtype() == DType::kI64 && b->dtype() == DType::kI64 && t != "Pow") {
    absl::StatusOr<Tensor> out = Tensor::Empty(DType::kI64, bc->dims);
    if (!out.ok()) return false;
    for (int64_t i = 0; i < out->numel(); ++i) {
      const int64_t x = a->i64()[ia[i]], y = b->i64()[ib[i]];
      out->i64()[i] = t == "Add"   ? x + y
                      : t == "Sub" ? x - y
                      : t == "Mul" ? x * y
                                   : (y ? x / y : 0);
    }
    ctx.SetConstant(node.output(0), *std::move(out));
    return true;
  }
  if (a->dtype() != DType::kF32 || (b->dtype() != DType::kF32 && t != "Pow")) return false;
  absl::StatusOr<Tensor> out = Tensor::Empty(DType::kF32, bc->dims);
  if (!out.ok()) return false;
  for (int64_t i = 0; i < out->numel(); ++i) {
    const double x = a->f32()[ia[i]];
    const double y =
        b->dtype() == DType::kF32 ? b->f32()[ib[i]] : static_cast<double>(b->i64()[ib[i]]);
    out->f32()[i] = static_cast<float>(t == "Add"   ? x + y
                                       : t == "Sub" ? x - y
                                       : t == "Mul" ? x * y
                                       : t == "Div" ? x / y
                                                    : std::pow(x, y));
  }
  ctx.SetConstant(node.output(0), *std::move(out));
  return true;
}

}  // namespace

bool FoldUnary(ImportContext& ctx, const Node& node) {
  const Tensor* c = ctx.ConstantInput(node, 0);
  if (c == nullptr || ctx.IsParameterInitializer(node, 0)) return false;
  const std::string& t = node.op_type();
  if (c->dtype() == DType::kI64 && (t == "Abs" || t == "Neg" || t == "Sign")) {
    Tensor out = c->Clone();
    for (int64_t i = 0; i < out.numel(); ++i) {
      const int64_t x = c->i64()[i];
      out.i64()[i] = t == "Abs" ? (x < 0 ? -x : x) : t == "Neg" ? -x : (x > 0) - (x < 0);
    }
    ctx.SetConstant(node.output(0), std::move(out));
    return true;
  }
  if (c->dtype() != DType::kF32) return false;
  static const std::map<std::string, double (*)(double)>* fns =
      new std::map<std::string, double (*)(double)>{
          {"Sqrt", [](double x) { return std::sqrt(x); }},
          {"Reciprocal", [](double x) { return 1 / x; }},
          {"Neg", [](double x) { return -x; }},
          {"Exp", [](double x) { return std::exp(x); }},
          {"Log", [](double x) { return std::log(x); }},
          {"Abs", [](double x) { return std::fabs(x); }},
          {"Tanh", [](double x) { return std::tanh(x); }},
          {"Erf", [](double x) { return std::erf(x); }},
          {"Relu", [](double x) { return x > 0 ? x : 0.0; }},
          {"Sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); }},
          {"Sin", [](double x) { return std::sin(x); }},
          {"Cos", [](double x) { return std::cos(x); }},
          {"Floor", [](double x) { return std::floor(x); }},
          {"Ceil", [](double x) { return std::ceil(x); }},
          {"Sign", [](double x) { return static_cast<double>((x > 0) - (x < 0)); }}};
  auto fn = fns->find(t);
  if (fn == fns->end()) return false;
  Tensor out = c->Clone();
  for (int64_t i = 0; i < out.numel(); ++i) {
    out.f32()[i] = static_cast<float>(fn->second(c->f32()[i]));
  }
  ctx.SetConstant(node.output(0), std::move(out));
  return true;
}

// Element-wise ops Quilt computes only on constants (rotary tables from
// positions, bucket indices): folded, else refused saying so.
absl::Status ConstantOnlyUnary(ImportContext& ctx, const Node& node) {
  if (FoldUnary(ctx, node)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      node.op_type(),
      " is supported on constants only (computed from fixed positions or shapes); here its input "
      "depends on the model's inputs or parameters"));
}

absl::StatusOr<bool> CastIntsToFloat(ImportContext& ctx, const Node& node,
                                     std::vector<std::string>* tensors) {
  const std::string at = node.name().empty() ? node.op_type() : node.name();
  bool any = false;
  for (size_t i = 0; i < tensors->size(); ++i) {
    ASSIGN_OR_RETURN(TensorType t, ctx.TypeOf((*tensors)[i]));
    if (t.dtype != DType::kI64) continue;
    any = true;
    Attrs to_float;
    to_float.SetString("to", "f32");
    ASSIGN_OR_RETURN((*tensors)[i], ctx.b().Add("Cast", {(*tensors)[i]}, std::move(to_float),
                                                absl::StrCat(at, "/in", i, "_f32")));
  }
  return any;
}

absl::Status EmitLastOp(ImportContext& ctx, const Node& node, const std::string& type,
                        const std::vector<std::string>& inputs, Attrs attrs, bool integer) {
  if (!integer) return ctx.Emit(node, type, inputs, std::move(attrs));
  const std::string at = node.name().empty() ? node.op_type() : node.name();
  ASSIGN_OR_RETURN(std::string f, ctx.b().Add(type, inputs, std::move(attrs), at + "/f32"));
  Attrs to_int;
  to_int.SetString("to", "i64");
  return ctx.Emit(node, "Cast", {f}, std::move(to_int));
}

absl::Status EmitInFloat(ImportContext& ctx, const Node& node, const std::string& type,
                         const std::vector<std::string>& inputs, Attrs attrs) {
  std::vector<std::string> floats = inputs;
  RETURN_IF_ERROR(CastIntsToFloat(ctx, node, &floats).status());
  return EmitLastOp(ctx, node, type, floats, std::move(attrs), /*integer=*/true);
}

absl::Status Binary(ImportContext& ctx, const Node& node) {
  if (FoldBinary(ctx, node)) return absl::OkStatus();
  const std::string& type = node.op_type();
  if (type == "Add" || type == "Sub" || type == "Mul" || type == "Div") {
    // Integer data (position ids from a mask's cumulative sum, ids // k):
    // computed in float32, exact for the small integers ids are, and cast
    // back (a quotient truncated toward zero, as ONNX's integer Div).
    ASSIGN_OR_RETURN(std::string a, ctx.Data(node, 0));
    ASSIGN_OR_RETURN(std::string b, ctx.Data(node, 1));
    ASSIGN_OR_RETURN(TensorType ta, ctx.TypeOf(a));
    ASSIGN_OR_RETURN(TensorType tb, ctx.TypeOf(b));
    if (ta.dtype == DType::kI64 && tb.dtype == DType::kI64) {
      return EmitInFloat(ctx, node, type, {a, b}, {});
    }
  }
  return Direct(ctx, node, type);
}

// And, Or and Xor of masks: folded on constants; on data (masks are 0s and
// 1s as floats) a·b, a + b − a·b and a + b − 2·a·b.
absl::Status Logical(ImportContext& ctx, const Node& node) {
  const std::string& type = node.op_type();
  const Tensor* ca = ctx.ConstantInput(node, 0);
  const Tensor* cb = ctx.ConstantInput(node, 1);
  if (ca != nullptr && cb != nullptr) {
    RETURN_IF_ERROR(CheckNumeric(*ca, type));
    RETURN_IF_ERROR(CheckNumeric(*cb, type));
    ASSIGN_OR_RETURN(Broadcast bc, BroadcastDims({ca->dims(), cb->dims()}));
    ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(DType::kBool, bc.dims));
    for (int64_t i = 0; i < out.numel(); ++i) {
      const bool x = NumberAt(*ca, bc.from[0][i]) != 0, y = NumberAt(*cb, bc.from[1][i]) != 0;
      static_cast<uint8_t*>(out.raw())[i] = type == "And"  ? (x && y)
                                            : type == "Or" ? (x || y)
                                                           : (x != y);
    }
    ctx.SetConstant(node.output(0), std::move(out));
    return absl::OkStatus();
  }
  const std::string at = node.name().empty() ? type : node.name();
  std::vector<std::string> masks;
  for (int i = 0; i < 2; ++i) {
    if (const Tensor* c = ctx.ConstantInput(node, i)) {
      // A fixed mask (a causal one): its 0s and 1s as floats.
      RETURN_IF_ERROR(CheckNumeric(*c, type));
      ASSIGN_OR_RETURN(Tensor f, Tensor::Empty(DType::kF32, c->dims()));
      for (int64_t e = 0; e < f.numel(); ++e) f.f32()[e] = NumberAt(*c, e) != 0 ? 1.0f : 0.0f;
      ASSIGN_OR_RETURN(std::string m,
                       ctx.b().AddConstant(absl::StrCat(at, "/mask", i), std::move(f)));
      masks.push_back(m);
      continue;
    }
    ASSIGN_OR_RETURN(std::string m, ctx.Data(node, i));
    ASSIGN_OR_RETURN(TensorType tt, ctx.TypeOf(m));
    if (tt.dtype != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat(type, " of ", DTypeName(tt.dtype),
                                                     " data (masks of comparisons are supported)"));
    }
    masks.push_back(m);
  }
  const std::string& a = masks[0];
  const std::string& b = masks[1];
  ASSIGN_OR_RETURN(std::string ab, ctx.b().Add("Mul", {a, b}, {}, at + "/both"));
  if (type == "And") return ctx.Emit(node, "Identity", {ab}, {});
  ASSIGN_OR_RETURN(std::string sum, ctx.b().Add("Add", {a, b}, {}, at + "/sum"));
  if (type == "Xor") {
    ASSIGN_OR_RETURN(std::string twice, ctx.b().Add("Add", {ab, ab}, {}, at + "/both_twice"));
    return ctx.Emit(node, "Sub", {sum, twice}, {});
  }
  return ctx.Emit(node, "Sub", {sum, ab}, {});
}

absl::Status Unary(ImportContext& ctx, const Node& node) {
  if (FoldUnary(ctx, node)) return absl::OkStatus();
  return Direct(ctx, node, node.op_type());
}

// 1 / x, as a division of a constant one.
absl::Status Reciprocal(ImportContext& ctx, const Node& node) {
  if (FoldUnary(ctx, node)) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  ASSIGN_OR_RETURN(std::string k, ScalarConstant(ctx, node.name() + "_one", 1));
  return ctx.Emit(node, "Div", {k, x}, {});
}

namespace {

// `c` broadcast to `target` (numpy rules), or nothing when the result
// would hold a dynamic batch (a dim the export batch divides).
absl::StatusOr<std::optional<Tensor>> ExpandConstant(ImportContext& ctx, const Tensor& c,
                                                     const std::vector<int64_t>& target) {
  absl::StatusOr<Broadcast> bc = BroadcastDims({c.dims(), target});
  if (!bc.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot expand ", c.TypeString(), " to [", absl::StrJoin(target, ","), "]"));
  }
  const int64_t b0 = ctx.export_batch();
  const int rank = static_cast<int>(bc->dims.size());
  for (int i = 0; i < rank; ++i) {
    const int ci = i - (rank - c.rank());
    const int64_t v = bc->dims[i];
    // (A fixed-batch export's float constant expanded to the batch is the
    // batch's too, as the op path takes it; integers there were refused.)
    const bool new_dim = ci < 0 || c.dim(ci) == 1;
    if (new_dim && b0 > 0 && v > 0 &&
        ((ctx.symbolic_batch() && v % b0 == 0) ||
         (!ctx.symbolic_batch() && v == b0 && c.dtype() == DType::kF32))) {
      return std::optional<Tensor>();
    }
  }
  ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(c.dtype(), bc->dims));
  const size_t esize = DTypeSize(c.dtype());
  for (int64_t i = 0; i < out.numel(); ++i) {
    std::memcpy(static_cast<char*>(out.raw()) + i * esize,
                static_cast<const char*>(c.raw()) + bc->from[0][i] * esize, esize);
  }
  return std::optional<Tensor>(std::move(out));
}

}  // namespace

// Expand with a constant shape (numpy broadcasting of the input and the
// shape). A dim the input does not have (or has as 1) that the shape sets
// to the export batch becomes the batch, as in x.expand(x.shape[0], ...),
// when the input has no batch of its own.
absl::Status ExpandNode(ImportContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(std::vector<int64_t> target, ctx.ConstInts(node, 1));
  // A constant expanded to its own shape (a fixed-batch export's zero
  // state, [1, batch, H]) stays that constant.
  if (const Tensor* c = ctx.ConstantInput(node, 0); c != nullptr &&
                                                    !ctx.IsParameterInitializer(node, 0) &&
                                                    c->rank() == static_cast<int>(target.size())) {
    bool same = true;
    for (int i = 0; i < c->rank(); ++i) same = same && (target[i] == 1 || target[i] == c->dim(i));
    if (same) {
      ctx.SetConstant(node.output(0), c->Clone());
      return absl::OkStatus();
    }
  }
  if (const Tensor* c = ctx.ConstantInput(node, 0);
      c != nullptr && !ctx.IsParameterInitializer(node, 0)) {
    // A constant broadcast to fixed dims (index arithmetic of a mask built
    // in forward) folds; to a size holding a dynamic batch it is an op.
    ASSIGN_OR_RETURN(std::optional<Tensor> folded, ExpandConstant(ctx, *c, target));
    if (folded.has_value()) {
      ctx.SetConstant(node.output(0), *std::move(folded));
      return absl::OkStatus();
    }
  }
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  ASSIGN_OR_RETURN(TensorType t, ctx.TypeOf(x));
  const int rank = std::max<int>(t.shape.rank(), static_cast<int>(target.size()));
  const bool has_batch = t.shape.HasBatch();
  std::vector<Dim> out(rank);
  bool batch_placed = has_batch;
  for (int i = 0; i < rank; ++i) {
    const int xi = i - (rank - t.shape.rank());
    const int ti = i - (rank - static_cast<int>(target.size()));
    const std::optional<Dim> xd = xi >= 0 ? std::optional<Dim>(t.shape.dim(xi)) : std::nullopt;
    const int64_t tv = ti >= 0 ? target[ti] : 1;
    if (xd.has_value() && xd->batch) {
      out[i] = *xd;  // the shape gives 1 or the export batch here
      continue;
    }
    const int64_t xv = xd.has_value() ? xd->value : 1;
    if (xv != 1 && tv != 1 && xv != tv) {
      return absl::InvalidArgumentError(absl::StrCat("cannot expand ", t.shape.ToString(), " to [",
                                                     absl::StrJoin(target, ","), "]"));
    }
    const int64_t v = xv == 1 ? tv : xv;
    const int64_t b0 = ctx.export_batch();
    if (!batch_placed && xv == 1 && (v == b0 || (ctx.symbolic_batch() && v > 0 && v % b0 == 0))) {
      out[i] = Dim::Batch(v / b0);  // (a multiple: batch × heads)
      batch_placed = true;
    } else {
      out[i] = Dim::Fixed(v);
    }
  }
  Attrs a;
  EncodeShape(&a, "shape", quilt::Shape(out));
  if (t.dtype == DType::kI64) {
    // Integer ids over the batch (BERT's token types, a [1, T] buffer
    // expanded to [B, T]).
    return EmitInFloat(ctx, node, "Expand", {x}, std::move(a));
  }
  return ctx.Emit(node, "Expand", {x}, std::move(a));
}

}  // namespace quilt::onnx_import
