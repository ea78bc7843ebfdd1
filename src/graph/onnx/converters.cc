// ONNX op converters: each maps one ONNX node to Quilt ops (layers,
// normalizations, reshapes), and the table of every converter; the class
// losses and OneHot are in class_loss_converters.cc,
// element-wise ops and Expand are in elementwise_converters.cc, shape and
// constant ops in constant_converters.cc, activations and windowed layers
// (convolution, pooling, Resize) in layer_converters.cc.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/common/status.h"
#include "src/graph/onnx/converter_parts.h"

namespace quilt::onnx_import {

absl::Status Direct(ImportContext& ctx, const Node& node, const std::string& type, Attrs attrs) {
  std::vector<std::string> ins;
  for (int i = 0; i < node.input_size(); ++i) {
    if (!ctx.HasInput(node, i)) {
      ins.push_back("");
      continue;
    }
    ASSIGN_OR_RETURN(std::string t, ctx.Data(node, i));
    ins.push_back(t);
  }
  while (!ins.empty() && ins.back().empty()) ins.pop_back();
  return ctx.Emit(node, type, std::move(ins), std::move(attrs));
}

absl::StatusOr<std::string> ScalarConstant(ImportContext& ctx, const std::string& name, float v) {
  return ctx.b().AddConstant(name, Tensor::ScalarF32(v));
}

namespace {

absl::Status Identity(ImportContext& ctx, const Node& node) {
  if (ctx.IsParameterInitializer(node, 0) && ctx.identities_share()) {
    // One weight used in several places (a layer applied more than once).
    ASSIGN_OR_RETURN(std::string p, ctx.Data(node, 0));
    ctx.SetTensor(node.output(0), p);
    return absl::OkStatus();
  }
  if (ctx.IsParameterInitializer(node, 0)) {
    // The exporter deduplicates equal initializers (e.g. every LayerNorm's
    // ones) behind Identity nodes; in the model they are separate parameters.
    ASSIGN_OR_RETURN(Tensor v, ctx.Const(node, 0));
    ASSIGN_OR_RETURN(std::string p,
                     ctx.b().AddParameterValue(ctx.b().UniqueName(node.output(0)), v.Clone()));
    if (absl::StartsWith(node.input(0), "onnx::")) ctx.NoteUntiedCopy(node.input(0), p);
    ctx.SetTensor(node.output(0), p);
    return absl::OkStatus();
  }
  if (const Tensor* c = ctx.ConstantInput(node, 0)) {
    ctx.SetConstant(node.output(0), *c);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  ctx.SetTensor(node.output(0), x);
  return absl::OkStatus();
}

absl::Status Gemm(ImportContext& ctx, const Node& node) {
  Attrs a;
  a.SetInt("transA", AttrInt(node, "transA", 0));
  a.SetInt("transB", AttrInt(node, "transB", 0));
  a.SetFloat("alpha", AttrFloat(node, "alpha", 1.0f));
  a.SetFloat("beta", AttrFloat(node, "beta", 1.0f));
  return Direct(ctx, node, "Gemm", std::move(a));
}

// Resolves auto_pad into explicit pads for a 2-D window.
absl::Status BatchNorm(ImportContext& ctx, const Node& node) {
  std::vector<std::string> ins;
  for (int i = 0; i < 3; ++i) {
    ASSIGN_OR_RETURN(std::string t, ctx.Data(node, i));
    ins.push_back(t);
  }
  for (int i = 3; i < 5; ++i) {
    ASSIGN_OR_RETURN(std::string t, ctx.State(node, i));
    ins.push_back(t);
  }
  Attrs a;
  a.SetFloat("epsilon", AttrFloat(node, "epsilon", 1e-5f));
  a.SetFloat("momentum", AttrFloat(node, "momentum", 0.9f));
  a.SetInt("shifted", 1);
  // Always training mode: Quilt trains the model. Statistics of the global
  // batch about the running mean, then the normalization (see
  // BatchNormStats).
  const std::string hint = node.name().empty() ? "BatchNorm" : node.name();
  ASSIGN_OR_RETURN(std::vector<std::string> stats,
                   ctx.b().AddOp("BatchNormStats", {ins[0], ins[3]}, {}, 2, hint + ".stats"));
  return ctx.Emit(node, "BatchNormApply",
                  {ins[0], stats[0], stats[1], ins[1], ins[2], ins[3], ins[4]}, std::move(a), 3,
                  std::min(3, node.output_size()));
}

absl::Status LayerNorm(ImportContext& ctx, const Node& node) {
  Attrs a;
  a.SetInt("axis", AttrInt(node, "axis", -1));
  a.SetFloat("epsilon", AttrFloat(node, "epsilon", 1e-5f));
  std::vector<std::string> ins;
  for (int i = 0; i < std::min(3, node.input_size()); ++i) {
    if (!ctx.HasInput(node, i)) continue;
    ASSIGN_OR_RETURN(std::string t, ctx.Data(node, i));
    ins.push_back(t);
  }
  return ctx.Emit(node, "LayerNormalization", ins, std::move(a), 3,
                  std::min(3, node.output_size()));
}

}  // namespace

absl::StatusOr<std::string> ReshapeTo(ImportContext& ctx, const std::string& x,
                                      std::vector<int64_t> target, const std::string& name) {
  Attrs a;
  a.SetInts("shape", std::move(target));
  return ctx.b().Add("Reshape", {x}, std::move(a), name);
}

namespace {

// `x` normalized over its dims from axis 2 on (`norm_dims`): a
// LayerNormalization with unit scale and the node's epsilon.
absl::StatusOr<std::string> NormalizeFromAxis2(ImportContext& ctx, const Node& node,
                                               const std::string& x,
                                               const std::vector<int64_t>& norm_dims,
                                               const std::string& at) {
  ASSIGN_OR_RETURN(Tensor ones, Tensor::Empty(DType::kF32, norm_dims));
  for (int64_t i = 0; i < ones.numel(); ++i) ones.f32()[i] = 1.0f;
  ASSIGN_OR_RETURN(std::string unit, ctx.b().AddConstant(at + "/unit_scale", ones));
  Attrs a;
  a.SetInt("axis", 2);
  a.SetFloat("epsilon", AttrFloat(node, "epsilon", 1e-5f));
  ASSIGN_OR_RETURN(
      std::vector<std::string> normed,
      ctx.b().AddOp("LayerNormalization", {x, unit}, std::move(a), 3, at + "/normalize"));
  return normed[0];
}

// InstanceNormalization (nn.InstanceNorm2d, and nn.GroupNorm, which exports
// as one over [N, G, -1]): each (sample, channel) normalized over the dims
// after the channel — a LayerNormalization from axis 2 with unit scale —
// then the per-channel scale and bias.
absl::Status InstanceNorm(ImportContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  ASSIGN_OR_RETURN(TensorType t, ctx.TypeOf(x));
  const int r = t.shape.rank();
  if (r < 3) return absl::InvalidArgumentError("InstanceNormalization needs [N, C, ...] input");
  for (int i = 1; i < r; ++i) {
    if (t.shape.dim(i).batch) {
      return absl::InvalidArgumentError("InstanceNormalization: only dim 0 may carry the batch");
    }
  }
  std::vector<int64_t> norm_dims;
  for (int i = 2; i < r; ++i) norm_dims.push_back(t.shape.dim(i).value);
  ASSIGN_OR_RETURN(std::string normed, NormalizeFromAxis2(ctx, node, x, norm_dims, node.name()));
  // Scale and bias per channel: [C] as [C, 1, ...].
  std::vector<int64_t> per_channel = {t.shape.dim(1).value};
  for (int i = 2; i < r; ++i) per_channel.push_back(1);
  std::vector<std::string> affine;
  for (int i : {1, 2}) {
    ASSIGN_OR_RETURN(std::string v, ctx.Data(node, i));
    ASSIGN_OR_RETURN(std::string b,
                     ReshapeTo(ctx, v, per_channel, node.name() + (i == 1 ? "/scale" : "/bias")));
    affine.push_back(b);
  }
  ASSIGN_OR_RETURN(std::string scaled,
                   ctx.b().Add("Mul", {normed, affine[0]}, Attrs(), node.name() + "/scaled"));
  return ctx.Emit(node, "Add", {scaled, affine[1]}, Attrs());
}

// GroupNormalization (opset 18; nn.GroupNorm): X [N, C, ...] as
// [N, G, C/G, ...] normalized from axis 2 (a LayerNormalization with unit
// scale), then the affine: per group in opset 18, per channel from 21.
absl::Status GroupNorm(ImportContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  ASSIGN_OR_RETURN(TensorType t, ctx.TypeOf(x));
  const int r = t.shape.rank();
  const int64_t groups = AttrInt(node, "num_groups", 0);
  if (r < 2) return absl::InvalidArgumentError("GroupNormalization needs [N, C, ...] input");
  for (int i = 1; i < r; ++i) {
    if (t.shape.dim(i).batch) {
      return absl::InvalidArgumentError("GroupNormalization: only dim 0 may carry the batch");
    }
  }
  const int64_t c = t.shape.dim(1).value;
  if (groups <= 0 || c % groups != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("GroupNormalization: ", c, " channels in ", groups, " groups"));
  }
  const std::string at = node.name().empty() ? "GroupNormalization" : node.name();
  auto reshape = [&](const std::string& v, std::vector<int64_t> shape, const std::string& hint) {
    return ReshapeTo(ctx, v, std::move(shape), at + "/" + hint);
  };
  std::vector<int64_t> grouped = {-1, groups, c / groups}, norm_dims = {c / groups};
  for (int i = 2; i < r; ++i) {
    grouped.push_back(t.shape.dim(i).value);
    norm_dims.push_back(t.shape.dim(i).value);
  }
  ASSIGN_OR_RETURN(std::string xg, reshape(x, grouped, "grouped"));
  ASSIGN_OR_RETURN(std::string y, NormalizeFromAxis2(ctx, node, xg, norm_dims, at));
  // Opset 18's scale and bias are per group ([G] as [G, 1, ...] over the
  // grouped tensor); 21's per channel ([C] as [C, 1, ...] over X).
  const bool per_group = ctx.opset() < 21;
  std::vector<int64_t> affine_shape = {per_group ? groups : c};
  for (int i = per_group ? 1 : 2; i < r; ++i) affine_shape.push_back(1);
  if (!per_group) {
    std::vector<int64_t> back = {-1};
    for (int i = 1; i < r; ++i) back.push_back(t.shape.dim(i).value);
    ASSIGN_OR_RETURN(y, reshape(y, back, "ungrouped"));
  }
  ASSIGN_OR_RETURN(std::string scale, ctx.Data(node, 1));
  ASSIGN_OR_RETURN(std::string bias, ctx.Data(node, 2));
  ASSIGN_OR_RETURN(scale, reshape(scale, affine_shape, "scale"));
  ASSIGN_OR_RETURN(bias, reshape(bias, affine_shape, "bias"));
  ASSIGN_OR_RETURN(std::string scaled, ctx.b().Add("Mul", {y, scale}, Attrs(), at + "/scaled"));
  if (!per_group) return ctx.Emit(node, "Add", {scaled, bias}, Attrs());
  ASSIGN_OR_RETURN(std::string shifted,
                   ctx.b().Add("Add", {scaled, bias}, Attrs(), at + "/shifted"));
  std::vector<int64_t> back = {-1};
  for (int i = 1; i < r; ++i) back.push_back(t.shape.dim(i).value);
  Attrs out;
  out.SetInts("shape", back);
  return ctx.Emit(node, "Reshape", {shifted}, std::move(out));
}

// Gelu (opset 20), exact or with the tanh approximation.
absl::Status GeluNode(ImportContext& ctx, const Node& node) {
  const std::string approximate = AttrString(node, "approximate", "none");
  if (approximate != "none" && approximate != "tanh") {
    return absl::InvalidArgumentError("Gelu approximate '" + approximate + "'");
  }
  Attrs a;
  a.SetString("approximate", approximate);
  return Direct(ctx, node, "Gelu", std::move(a));
}

// Softmax and LogSoftmax. Before opset 13 the input was seen as a matrix
// [d0 ⋯ d(axis−1), d(axis) ⋯ d(r−1)] (axis 1 by default) and normalized
// over its rows: the same as over the last axis when the axis is the last,
// else over the trailing dims flattened, done as such between two Reshapes.
absl::Status Softmax(ImportContext& ctx, const Node& node) {
  const bool flattening = ctx.opset() < 13;
  int64_t axis = AttrInt(node, "axis", flattening ? 1 : -1);
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  ASSIGN_OR_RETURN(TensorType t, ctx.TypeOf(x));
  const int rank = t.shape.rank();
  if (axis < 0) axis += rank;
  if (!flattening || axis == rank - 1) {
    Attrs a;
    a.SetInt("axis", axis);
    return ctx.Emit(node, node.op_type(), {x}, std::move(a));
  }
  const std::string at = node.name().empty() ? node.op_type() : node.name();
  int64_t rows = 1, cols = 1;
  bool batch_in_rows = false;
  for (int k = 0; k < rank; ++k) {
    const Dim& d = t.shape.dim(k);
    if (k < axis) {
      batch_in_rows = batch_in_rows || d.batch;
      rows *= d.value;
    } else if (d.batch) {
      return absl::InvalidArgumentError(absl::StrCat(
          node.op_type(), " '", at, "' (opset ", ctx.opset(), ") normalizes over dims ", axis,
          ".. of ", t.shape.ToString(), ", which hold the batch: samples would mix"));
    } else {
      cols *= d.value;
    }
  }
  std::vector<int64_t> back;
  for (int k = 0; k < rank; ++k) back.push_back(t.shape.dim(k).batch ? -1 : t.shape.dim(k).value);
  Attrs flat;
  flat.SetInts("shape", {batch_in_rows ? -1 : rows, cols});
  ASSIGN_OR_RETURN(std::string m, ctx.b().Add("Reshape", {x}, std::move(flat), at + "/rows"));
  Attrs a;
  a.SetInt("axis", 1);
  ASSIGN_OR_RETURN(std::string y, ctx.b().Add(node.op_type(), {m}, std::move(a), at + "/of_rows"));
  Attrs unflat;
  unflat.SetInts("shape", back);
  return ctx.Emit(node, "Reshape", {y}, std::move(unflat));
}

// The reshape target with the batch on a -1 (or 0): the exporter bakes the
// batch size it saw into constant targets.
absl::StatusOr<std::vector<int64_t>> SymbolicTarget(ImportContext& ctx, const Shape& in,
                                                    std::vector<int64_t> t) {
  auto fits = [&](const std::vector<int64_t>& target) {
    Graph scratch;
    GraphBuilder b(&scratch);
    if (!b.AddInput("x", DType::kF32, in).ok()) return false;
    Attrs a;
    a.SetInts("shape", target);
    return b.Add("Reshape", {"x"}, std::move(a)).ok();
  };
  const int64_t b0 = ctx.export_batch();
  const int axis = in.BatchAxis();
  // Row-major, the batch stays whole in one dim of the target: the dims
  // before it hold a factor of the input's dims before the batch, and the
  // dims up to it all of them and the batch. (An input dim of m × B holds
  // the batch outermost or innermost.) A dim whose exported extent merely
  // equals a multiple of the batch (a feature of the same size) is not the
  // batch's.
  auto aligned = [&](std::vector<int64_t> cand) {
    if (axis < 0 || b0 <= 0) return true;
    for (size_t j = 0; j < cand.size(); ++j) {
      if (cand[j] == 0 && static_cast<int>(j) < in.rank()) {
        // A copied dim: the batch itself when it is the batch's.
        cand[j] = static_cast<int>(j) == axis ? -1 : in.dim(static_cast<int>(j)).Concrete(b0);
      }
    }
    int64_t before = 1;
    for (int i = 0; i < axis; ++i) before *= in.dim(i).Concrete(b0);
    const int64_t m = in.dim(axis).Concrete(b0) / b0;
    const int64_t numel = in.NumElements(b0);
    int64_t known = 1;
    for (int64_t d : cand) known *= d == -1 ? 1 : d;
    int64_t lead = 1;
    for (size_t j = 0; j < cand.size(); ++j) {
      const int64_t extent = cand[j] == -1 ? (known > 0 ? numel / known : 0) : cand[j];
      if (cand[j] == -1) {
        const int64_t upto = lead * extent;
        const bool outermost = before % lead == 0 && upto % (before * b0) == 0;
        const bool innermost = (before * m) % lead == 0 && upto % (before * m * b0) == 0;
        return lead > 0 && (outermost || innermost);
      }
      lead *= extent;
    }
    return false;
  };
  if (fits(t) && aligned(t)) return t;
  // A -1 the exporter left is a fixed extent once the batch has its dim.
  std::vector<int64_t> concrete = t;
  const int64_t numel = in.NumElements(b0);
  int64_t known = 1;
  int infer_at = -1;
  for (size_t i = 0; i < concrete.size(); ++i) {
    if (concrete[i] == 0 && static_cast<int>(i) < in.rank()) concrete[i] = in.dim(i).Concrete(b0);
    if (concrete[i] == -1) {
      infer_at = static_cast<int>(i);
    } else {
      known *= concrete[i];
    }
  }
  if (infer_at >= 0 && known > 0) concrete[infer_at] = numel / known;
  std::vector<int> order;
  if (axis >= 0 && axis < static_cast<int>(concrete.size())) order.push_back(axis);
  for (int i = 0; i < static_cast<int>(concrete.size()); ++i) {
    if (i != axis) order.push_back(i);
  }
  for (int j : order) {
    if (concrete[j] <= 0 || b0 <= 0 || concrete[j] % b0 != 0) continue;
    std::vector<int64_t> cand = concrete;
    cand[j] = -1;
    if (fits(cand) && aligned(cand)) return cand;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("cannot tell which dimension of the reshape target [", absl::StrJoin(t, ","),
                   "] carries the batch of ", in.ToString(),
                   ctx.symbolic_batch() ? "" : absl::StrCat(" (exported batch ", b0, ")")));
}

absl::Status Reshape(ImportContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(std::vector<int64_t> target, ctx.ConstInts(node, 1));
  if (AttrInt(node, "allowzero", 0) != 0) {
    return absl::InvalidArgumentError("Reshape with allowzero = 1 is not supported");
  }
  if (const Tensor* c = ctx.ConstantInput(node, 0);
      c != nullptr && !ctx.IsParameterInitializer(node, 0)) {
    // Constant data: reshape the value itself.
    std::vector<int64_t> dims = target;
    int64_t known = 1;
    int infer_at = -1;
    for (size_t i = 0; i < dims.size(); ++i) {
      if (dims[i] == 0) dims[i] = c->dim(static_cast<int>(i));
      if (dims[i] == -1) {
        infer_at = static_cast<int>(i);
      } else {
        known *= dims[i];
      }
    }
    if (infer_at >= 0 && known > 0) dims[infer_at] = c->numel() / known;
    ctx.SetConstant(node.output(0), c->Clone().Reshaped(dims));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  ASSIGN_OR_RETURN(TensorType t, ctx.TypeOf(x));
  ASSIGN_OR_RETURN(target, SymbolicTarget(ctx, t.shape, target));
  Attrs a;
  a.SetInts("shape", target);
  return ctx.Emit(node, "Reshape", {x}, std::move(a));
}

absl::Status Flatten(ImportContext& ctx, const Node& node) {
  Attrs a;
  a.SetInt("axis", AttrInt(node, "axis", 1));
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  return ctx.Emit(node, "Flatten", {x}, std::move(a));
}

// Axes from input 1 (opset 13+) or the attribute.
absl::StatusOr<std::vector<int64_t>> AxesOf(ImportContext& ctx, const Node& node, int input) {
  if (ctx.HasInput(node, input)) return ctx.ConstInts(node, input);
  return AttrInts(node, "axes");
}

// MatMul; a 1-D operand (h @ q with a vector q) as a matrix of one column
// (or row), and that dim squeezed from the result, as NumPy does.
absl::Status MatMulNode(ImportContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(std::string a, ctx.Data(node, 0));
  ASSIGN_OR_RETURN(std::string b, ctx.Data(node, 1));
  ASSIGN_OR_RETURN(TensorType ta, ctx.TypeOf(a));
  ASSIGN_OR_RETURN(TensorType tb, ctx.TypeOf(b));
  const bool vec_a = ta.shape.rank() == 1, vec_b = tb.shape.rank() == 1;
  if (!vec_a && !vec_b) return ctx.Emit(node, "MatMul", {a, b}, {});
  const std::string at = node.name().empty() ? "MatMul" : node.name();
  auto unsqueeze = [&](const std::string& x, int64_t axis, const std::string& hint) {
    Attrs u;
    u.SetInts("axes", {axis});
    return ctx.b().Add("Unsqueeze", {x}, std::move(u), at + "/" + hint);
  };
  if (vec_a) {
    ASSIGN_OR_RETURN(a, unsqueeze(a, 0, "row"));
  }
  if (vec_b) {
    ASSIGN_OR_RETURN(b, unsqueeze(b, 1, "column"));
  }
  ASSIGN_OR_RETURN(std::string y, ctx.b().Add("MatMul", {a, b}, {}, at + "/matrix"));
  ASSIGN_OR_RETURN(TensorType ty, ctx.TypeOf(y));
  const int64_t r = ty.shape.rank();
  std::vector<int64_t> axes;
  if (vec_a) axes.push_back(r - 2);
  if (vec_b) axes.push_back(r - 1);
  Attrs sq;
  sq.SetInts("axes", axes);
  return ctx.Emit(node, "Squeeze", {y}, std::move(sq));
}

absl::Status SqueezeLike(ImportContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(std::vector<int64_t> axes, AxesOf(ctx, node, 1));
  if (const Tensor* c = ctx.ConstantInput(node, 0);
      c != nullptr && !ctx.IsParameterInitializer(node, 0)) {
    std::vector<int64_t> dims = c->dims();
    const int rank = static_cast<int>(dims.size());
    if (node.op_type() == "Unsqueeze") {
      const int out_rank = rank + static_cast<int>(axes.size());
      for (int64_t& a : axes) a = a < 0 ? a + out_rank : a;
      std::sort(axes.begin(), axes.end());
      for (int64_t a : axes) dims.insert(dims.begin() + std::min<int64_t>(a, dims.size()), 1);
    } else {
      std::vector<int64_t> kept;
      for (int i = 0; i < rank; ++i) {
        bool drop = axes.empty() ? dims[i] == 1 : false;
        for (int64_t a : axes) drop |= (a < 0 ? a + rank : a) == i;
        if (!drop) kept.push_back(dims[i]);
      }
      dims = kept;
    }
    ctx.SetConstant(node.output(0), c->Clone().Reshaped(dims));
    return absl::OkStatus();
  }
  Attrs a;
  a.SetInts("axes", axes);
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  return ctx.Emit(node, node.op_type(), {x}, std::move(a));
}

absl::Status Reduce(ImportContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(std::vector<int64_t> axes, AxesOf(ctx, node, 1));
  Attrs a;
  a.SetInts("axes", axes);
  a.SetInt("keepdims", AttrInt(node, "keepdims", 1));
  a.SetInt("noop_with_empty_axes", AttrInt(node, "noop_with_empty_axes", 0));
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  const std::string& type = node.op_type();
  ASSIGN_OR_RETURN(TensorType xt, ctx.TypeOf(x));
  if ((type == "ReduceSum" || type == "ReduceMax") && xt.dtype == DType::kI64) {
    // A count of a mask's ones ((~pad).sum(1)): in float32, cast back.
    return EmitInFloat(ctx, node, type, {x}, std::move(a));
  }
  if (type == "ReduceMean" || type == "ReduceMax" || type == "ReduceSum") {
    return ctx.Emit(node, type, {x}, std::move(a));
  }
  const std::string at = node.name().empty() ? type : node.name();
  if ((type == "ReduceMin" || type == "ReduceLogSumExp") && xt.dtype != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(type, " of ", DTypeName(xt.dtype),
                                                   " data is not supported (of float32 it is)"));
  }
  if (type == "ReduceMin") {  // torch.amin, torch.min(dim): −max(−x)
    ASSIGN_OR_RETURN(std::string neg, ctx.b().Add("Neg", {x}, {}, at + "/negated"));
    ASSIGN_OR_RETURN(std::string max, ctx.b().Add("ReduceMax", {neg}, std::move(a), at + "/max"));
    return ctx.Emit(node, "Neg", {max}, {});
  }
  if (type == "ReduceLogSumExp") {
    // torch.logsumexp: m + log Σ exp(x − m) with m the (constant) maximum,
    // so no exp overflows; m's gradient cancels, so it takes none.
    Attrs keep = a;
    keep.SetInt("keepdims", 1);
    ASSIGN_OR_RETURN(std::string max, ctx.b().Add("ReduceMax", {x}, keep, at + "/max"));
    ASSIGN_OR_RETURN(std::string m, ctx.b().Add("StopGradient", {max}, {}, at + "/shift"));
    ASSIGN_OR_RETURN(std::string shifted, ctx.b().Add("Sub", {x, m}, {}, at + "/shifted"));
    ASSIGN_OR_RETURN(std::string e, ctx.b().Add("Exp", {shifted}, {}, at + "/exp"));
    ASSIGN_OR_RETURN(std::string sum, ctx.b().Add("ReduceSum", {e}, a, at + "/sum"));
    ASSIGN_OR_RETURN(std::string log, ctx.b().Add("Log", {sum}, {}, at + "/log"));
    std::string m_out = m;
    if (a.Int("keepdims", 1) == 0) {
      ASSIGN_OR_RETURN(std::string max_out, ctx.b().Add("ReduceMax", {x}, a, at + "/max_out"));
      ASSIGN_OR_RETURN(m_out, ctx.b().Add("StopGradient", {max_out}, {}, at + "/shift_out"));
    }
    return ctx.Emit(node, "Add", {log, m_out}, {});
  }
  // Norms as sums (F.normalize's ReduceL2): of |x| (L1) or x² (L2: then
  // the square root).
  ASSIGN_OR_RETURN(std::string term, type == "ReduceL1"
                                         ? ctx.b().Add("Abs", {x}, {}, at + "/abs")
                                         : ctx.b().Add("Mul", {x, x}, {}, at + "/square"));
  if (type != "ReduceL2") return ctx.Emit(node, "ReduceSum", {term}, std::move(a));
  ASSIGN_OR_RETURN(std::string sum, ctx.b().Add("ReduceSum", {term}, std::move(a), at + "/sum"));
  return ctx.Emit(node, "Sqrt", {sum}, {});
}

// CumSum along a constant axis.
absl::Status CumSumNode(ImportContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(std::vector<int64_t> axis, ctx.ConstInts(node, 1));
  if (axis.size() != 1) return absl::InvalidArgumentError("CumSum's axis must be a scalar");
  Attrs a;
  a.SetInt("axis", axis[0]);
  a.SetInt("exclusive", AttrInt(node, "exclusive", 0));
  a.SetInt("reverse", AttrInt(node, "reverse", 0));
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  return ctx.Emit(node, "CumSum", {x}, std::move(a));
}

absl::Status Dropout(ImportContext& ctx, const Node& node) {
  float ratio = AttrFloat(node, "ratio", 0.5f);
  if (const Tensor* r = ctx.ConstantInput(node, 1)) ratio = r->f32()[0];
  // Opset 12 made the mode an input (false when absent). Before it the
  // mode was the runtime's, and PyTorch leaves Dropout out of an export
  // in eval mode: one that is there is a training export's.
  bool training = ctx.opset() < 12;
  if (const Tensor* t = ctx.ConstantInput(node, 2)) training = t->i64()[0] != 0;
  // Training exports always name the mask; only a mask something reads is
  // unsupported.
  if (node.output_size() > 1 && !node.output(1).empty() && ctx.IsRead(node.output(1))) {
    return absl::InvalidArgumentError(
        "Dropout's mask output is read by another node (not supported)");
  }
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  if (!training || ratio == 0) {
    ctx.SetTensor(node.output(0), x);
    return absl::OkStatus();
  }
  Attrs a;
  a.SetFloat("ratio", ratio);
  return ctx.Emit(node, "Dropout", {x}, std::move(a), 2, 1);
}

// Pad: the pads (and the constant) as inputs from opset 11, attributes
// before it.
absl::Status Pad(ImportContext& ctx, const Node& node) {
  const std::string mode = AttrString(node, "mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge") {
    return absl::InvalidArgumentError("Pad mode '" + mode +
                                      "' is not supported (constant, reflect or edge)");
  }
  std::vector<int64_t> pads = AttrInts(node, "pads");
  if (ctx.HasInput(node, 1)) {
    ASSIGN_OR_RETURN(pads, ctx.ConstInts(node, 1));
  }
  if (ctx.HasInput(node, 3)) {
    // Opset 18: pads for the listed axes only.
    ASSIGN_OR_RETURN(std::vector<int64_t> axes, ctx.ConstInts(node, 3));
    ASSIGN_OR_RETURN(std::string data, ctx.Data(node, 0));
    ASSIGN_OR_RETURN(TensorType t, ctx.TypeOf(data));
    const int64_t rank = t.shape.rank();
    if (pads.size() != 2 * axes.size()) {
      return absl::InvalidArgumentError("Pad: pads are not two per axis");
    }
    std::vector<int64_t> full(static_cast<size_t>(2 * rank), 0);
    for (size_t k = 0; k < axes.size(); ++k) {
      const int64_t axis = axes[k] < 0 ? axes[k] + rank : axes[k];
      if (axis < 0 || axis >= rank) return absl::InvalidArgumentError("Pad: axis out of range");
      full[axis] = pads[k];
      full[axis + rank] = pads[k + axes.size()];
    }
    pads = std::move(full);
  }
  const bool crops = std::any_of(pads.begin(), pads.end(), [](int64_t p) { return p < 0; });
  if (mode != "constant") {
    if (crops) {
      return absl::InvalidArgumentError("Pad: negative pads (cropping) in mode '" + mode +
                                        "' are not supported (in mode constant they are)");
    }
    return PadByCopies(ctx, node, mode, pads);
  }
  float value = AttrFloat(node, "value", 0);
  if (const Tensor* v = ctx.ConstantInput(node, 2)) value = v->f32()[0];
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  if (crops) {
    // F.pad with negative amounts crops: a Slice of those edges first.
    ASSIGN_OR_RETURN(TensorType t, ctx.TypeOf(x));
    const int64_t rank = t.shape.rank();
    if (static_cast<int64_t>(pads.size()) != 2 * rank) {
      return absl::InvalidArgumentError("Pad: pads are not two per axis");
    }
    std::vector<int64_t> starts, ends, axes;
    for (int64_t i = 0; i < rank; ++i) {
      const int64_t before = std::min<int64_t>(pads[i], 0),
                    after = std::min<int64_t>(pads[i + rank], 0);
      if (before == 0 && after == 0) continue;
      if (t.shape.dim(static_cast<int>(i)).batch) {
        return absl::InvalidArgumentError("Pad: negative pads would crop the batch dim");
      }
      starts.push_back(-before);
      ends.push_back(t.shape.dim(static_cast<int>(i)).value + after);
      axes.push_back(i);
      pads[i] -= before;
      pads[i + rank] -= after;
    }
    Attrs crop;
    crop.SetInts("starts", starts);
    crop.SetInts("ends", ends);
    crop.SetInts("axes", axes);
    const std::string at = node.name().empty() ? "Pad" : node.name();
    ASSIGN_OR_RETURN(x, ctx.b().Add("Slice", {x}, std::move(crop), at + "/crop"));
  }
  if (std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; })) {
    ctx.SetTensor(node.output(0), x);
    return absl::OkStatus();
  }
  Attrs a;
  a.SetInts("pads", pads);
  a.SetFloat("value", value);
  return ctx.Emit(node, "Pad", {x}, std::move(a));
}

}  // namespace

const std::map<std::string, Converter>& Converters() {
  static const auto* table = new std::map<std::string, Converter>{
      {"Add", Binary},
      {"Sub", Binary},
      {"Mul", Binary},
      {"Div", Binary},
      {"Pow", Binary},
      {"Sum", [](ImportContext& c, const Node& n) { return Direct(c, n, "Sum"); }},
      {"Relu", Unary},
      {"LeakyRelu", LeakyRelu},
      {"Clip", Clip},
      {"Max", MaxMin},
      {"Min", MaxMin},
      {"Mod", ModNode},
      {"And", Logical},
      {"Or", Logical},
      {"Xor", Logical},
      {"Tile", Tile},
      {"DepthToSpace", DepthToSpace},
      {"SpaceToDepth", SpaceToDepth},
      {"ScatterND", ScatterND},
      {"Einsum", Einsum},
      {"GatherElements", GatherElements},
      {"ReduceProd", ReduceProdNode},
      {"HardSigmoid", HardSigmoidLike},
      {"Softplus", Composite},
      {"Mish", Composite},
      {"PRelu", Composite},
      {"Elu", Composite},
      {"Selu", Composite},
      {"Celu", Composite},
      {"HardSwish", HardSigmoidLike},
      {"Abs", Unary},
      {"Sin", ConstantOnlyUnary},
      {"Cos", ConstantOnlyUnary},
      {"Floor", Unary},
      {"Ceil", ConstantOnlyUnary},
      {"Sign", ConstantOnlyUnary},
      {"Tanh", Unary},
      {"Sigmoid", Unary},
      {"Erf", Unary},
      {"Sqrt", Unary},
      {"Exp", Unary},
      {"Log", Log},
      {"Neg", Unary},
      {"Reciprocal", Reciprocal},
      {"Identity", Identity},
      {"Constant", ConstantNode},
      {"Gemm", Gemm},
      {"MatMul", MatMulNode},
      {"Conv", Conv},
      {"ConvTranspose", ConvTranspose},
      {"LSTM", Recurrent},
      {"GRU", Recurrent},
      {"RNN", Recurrent},
      {"MaxPool", Pool},
      {"AveragePool", Pool},
      {"GlobalAveragePool",
       [](ImportContext& c, const Node& n) { return Direct(c, n, "GlobalAveragePool"); }},
      {"BatchNormalization", BatchNorm},
      {"LayerNormalization", LayerNorm},
      {"Softmax", Softmax},
      {"LogSoftmax", Softmax},
      {"Reshape", Reshape},
      {"Flatten", Flatten},
      {"Transpose", Transpose},
      {"Squeeze", SqueezeLike},
      {"Unsqueeze", SqueezeLike},
      {"Concat", Concat},
      {"Split", Split},
      {"Slice", Slice},
      {"Gather", Gather},
      {"Shape", ShapeNode},
      {"ConstantOfShape", ConstantOfShape},
      {"EyeLike", EyeLikeNode},
      {"Equal", CompareNode},
      {"Where", WhereNode},
      {"Expand", ExpandNode},
      {"Cast", Cast},
      {"Range", RangeNode},
      {"Not", NotNode},
      {"Greater", CompareNode},
      {"Less", CompareNode},
      {"GreaterOrEqual", CompareNode},
      {"LessOrEqual", CompareNode},
      {"Trilu", TriluNode},
      {"ReduceMean", Reduce},
      {"ReduceMax", Reduce},
      {"Resize", Resize},
      {"Upsample", Resize},
      {"InstanceNormalization", InstanceNorm},
      {"GroupNormalization", GroupNorm},
      {"Gelu", GeluNode},
      {"ReduceSum", Reduce},
      {"ReduceMin", Reduce},
      {"ReduceLogSumExp", Reduce},
      {"ReduceL1", Reduce},
      {"ReduceL2", Reduce},
      {"ReduceSumSquare", Reduce},
      {"CumSum", CumSumNode},
      {"Dropout", Dropout},
      {"Pad", Pad},
      {"SoftmaxCrossEntropyLoss", Sce},
      {"NegativeLogLikelihoodLoss", Nll},
      {"OneHot", OneHotNode},
  };
  return *table;
}

}  // namespace quilt::onnx_import
