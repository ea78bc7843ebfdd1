// Converters that build a tensor from copies of another's slices: Tile
// (tensor.repeat) as Concats of copies, or an Expand for dims of 1 (over
// the batch for a dim of 1 repeated batch times); Pad by reflection or by the edge
// (nn.ReflectionPad2d, ReplicationPad, padding_mode="reflect" /
// "replicate") as Concats of reversed or repeated slices; GatherElements
// (torch.gather) as a one-hot mask of the indices times the data, summed
// over the gathered axis. Each is exact, and its gradient sums over the
// copies (Concat's, Slice's, or the mask's). Split: into parts along an
// axis (a constant's parts folded, as repeat_interleave's repeat counts).
#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/graph/graph_builder.h"
#include "src/graph/onnx/converter_parts.h"

namespace quilt::onnx_import {
namespace {

constexpr int64_t kThroughFirst = std::numeric_limits<int64_t>::min();

// x[start:end:step] along `axis`.
absl::StatusOr<std::string> SliceAxis(ImportContext& ctx, const std::string& x, int axis,
                                      int64_t start, int64_t end, int64_t step,
                                      const std::string& name) {
  Attrs a;
  a.SetInts("starts", {start});
  a.SetInts("ends", {end});
  a.SetInts("axes", {axis});
  a.SetInts("steps", {step});
  return ctx.b().Add("Slice", {x}, std::move(a), name);
}

absl::StatusOr<std::string> ConcatAxis(ImportContext& ctx, std::vector<std::string> parts, int axis,
                                       const std::string& name) {
  if (parts.size() == 1) return parts[0];
  Attrs a;
  a.SetInt("axis", axis);
  return ctx.b().Add("Concat", std::move(parts), std::move(a), name);
}

std::string At(const Node& node) { return node.name().empty() ? node.op_type() : node.name(); }

}  // namespace

absl::Status Tile(ImportContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(std::vector<int64_t> repeats, ctx.ConstInts(node, 1));
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  ASSIGN_OR_RETURN(TensorType t, ctx.TypeOf(x));
  if (static_cast<int>(repeats.size()) != t.shape.rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Tile: ", repeats.size(), " repeats for a tensor of rank ", t.shape.rank()));
  }
  const int64_t b0 = ctx.export_batch();
  std::vector<Dim> expanded = t.shape.dims();
  bool expand = false, over_batch = false;
  for (int i = 0; i < t.shape.rank(); ++i) {
    const int64_t r = repeats[i];
    if (r < 1) return absl::InvalidArgumentError("Tile: a repeat count below 1");
    if (r == 1) continue;
    const Dim d = t.shape.dim(i);
    if (d.batch) {
      return absl::InvalidArgumentError(
          "Tile repeats the batch dim (replicas split the batch; repeat another dim)");
    }
    // (Graphs hold at most 2^40 elements a tensor; copies are concatenated.)
    constexpr int64_t kMaxCopies = 65536;
    const int64_t extent = std::max<int64_t>(1, d.value);
    if (r > (int64_t{1} << 40) / extent || (extent > 1 && r > kMaxCopies)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Tile: ", r, " repeats of dim ", i, " (of ", extent,
                       ") are more than Quilt takes (a dim of at most 2^40 elements, at most ",
                       kMaxCopies, " copies of a dim longer than 1)"));
    }
    const bool batch_count = r == b0 || (ctx.symbolic_batch() && r % b0 == 0);
    if (d.value == 1 && !t.shape.HasBatch() && !over_batch && batch_count) {
      // A parameter repeated over the batch (cls.repeat(B, 1, 1); a
      // sequence-first bias_k.repeat(1, B, 1)).
      expanded[i] = Dim::Batch(r / b0);
      expand = true;
      over_batch = true;
      continue;
    }
    if (ctx.symbolic_batch() && r % b0 == 0) {
      return absl::InvalidArgumentError(
          "Tile by a count that depends on the batch, other than of a dim of 1 of a tensor "
          "without a batch");
    }
    if (d.value == 1) {  // an Expand, not r copies
      expanded[i] = Dim::Fixed(r);
      expand = true;
      continue;
    }
    std::vector<std::string> copies(static_cast<size_t>(r), x);
    ASSIGN_OR_RETURN(x, ConcatAxis(ctx, copies, i, absl::StrCat(At(node), "/tile", i)));
    expanded[i] = Dim::Fixed(d.value * r);
  }
  if (!expand) return ctx.Emit(node, "Identity", {x}, {});
  Attrs a;
  EncodeShape(&a, "shape", Shape(expanded));
  return ctx.Emit(node, "Expand", {x}, std::move(a));
}

absl::Status PadByCopies(ImportContext& ctx, const Node& node, const std::string& mode,
                         const std::vector<int64_t>& pads) {
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  ASSIGN_OR_RETURN(TensorType t, ctx.TypeOf(x));
  const int rank = t.shape.rank();
  if (static_cast<int>(pads.size()) != 2 * rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("Pad: ", pads.size(), " pads for a tensor of rank ", rank));
  }
  const bool reflect = mode == "reflect";
  for (int i = 0; i < rank; ++i) {
    const int64_t before = pads[i], after = pads[i + rank];
    if (before == 0 && after == 0) continue;
    const Dim d = t.shape.dim(i);
    if (d.batch) return absl::InvalidArgumentError("Pad " + mode + " of the batch dim");
    const int64_t n = d.value;
    if (before < 0 || after < 0) {
      return absl::InvalidArgumentError("Pad " + mode + " with negative pads is not supported");
    }
    if (reflect && (before >= n || after >= n)) {
      return absl::InvalidArgumentError(absl::StrCat("Pad reflect by ", std::max(before, after),
                                                     " of a dim of ", n,
                                                     " (a reflection is shorter than the dim)"));
    }
    const std::string at = absl::StrCat(At(node), "/", mode, i);
    std::vector<std::string> parts;
    if (before > 0) {
      if (reflect) {
        ASSIGN_OR_RETURN(std::string s, SliceAxis(ctx, x, i, before, 0, -1, at + "/before"));
        parts.push_back(s);
      } else {
        ASSIGN_OR_RETURN(std::string s, SliceAxis(ctx, x, i, 0, 1, 1, at + "/first"));
        parts.insert(parts.end(), static_cast<size_t>(before), s);
      }
    }
    parts.push_back(x);
    if (after > 0) {
      if (reflect) {
        const int64_t end = n - 2 - after;
        ASSIGN_OR_RETURN(std::string s, SliceAxis(ctx, x, i, n - 2, end < 0 ? kThroughFirst : end,
                                                  -1, at + "/after"));
        parts.push_back(s);
      } else {
        ASSIGN_OR_RETURN(std::string s, SliceAxis(ctx, x, i, n - 1, n, 1, at + "/last"));
        parts.insert(parts.end(), static_cast<size_t>(after), s);
      }
    }
    ASSIGN_OR_RETURN(x, ConcatAxis(ctx, parts, i, at));
  }
  return ctx.Emit(node, "Identity", {x}, {});
}

absl::Status GatherElements(ImportContext& ctx, const Node& node) {
  ASSIGN_OR_RETURN(std::string data, ctx.Data(node, 0));
  ASSIGN_OR_RETURN(std::string idx, ctx.Data(node, 1));
  ASSIGN_OR_RETURN(TensorType dt, ctx.TypeOf(data));
  ASSIGN_OR_RETURN(TensorType it, ctx.TypeOf(idx));
  const int r = dt.shape.rank();
  if (it.dtype != DType::kI64) return absl::InvalidArgumentError("GatherElements: int64 indices");
  if (it.shape.rank() != r) {
    return absl::InvalidArgumentError("GatherElements: indices of another rank than the data");
  }
  int64_t axis = AttrInt(node, "axis", 0);
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return absl::InvalidArgumentError("GatherElements: bad axis");
  const int ax = static_cast<int>(axis);
  if (dt.shape.dim(ax).batch || it.shape.dim(ax).batch) {
    return absl::InvalidArgumentError("GatherElements along the batch dim");
  }
  const std::string at = At(node);
  // The data cut to the indices' extent in every other dim.
  for (int d = 0; d < r; ++d) {
    if (d == ax || dt.shape.dim(d) == it.shape.dim(d)) continue;
    if (dt.shape.dim(d).batch || it.shape.dim(d).batch ||
        it.shape.dim(d).value > dt.shape.dim(d).value) {
      return absl::InvalidArgumentError(absl::StrCat("GatherElements: indices ",
                                                     it.shape.ToString(), " exceed the data ",
                                                     dt.shape.ToString(), " in dim ", d));
    }
    ASSIGN_OR_RETURN(
        data, SliceAxis(ctx, data, d, 0, it.shape.dim(d).value, 1, absl::StrCat(at, "/cut", d)));
  }
  const int64_t n = dt.shape.dim(ax).value;
  // [..., k, 1, ...] indices against [1, ..., 1, n, 1, ...] positions
  // (and their negative forms): 1 where an index names the position.
  auto with_one_at = [&](const Shape& s, int where) {
    std::vector<int64_t> target;
    for (int d = 0; d < s.rank(); ++d) {
      if (d == where) target.push_back(1);
      target.push_back(s.dim(d).batch ? -1 : s.dim(d).value);
    }
    if (where == s.rank()) target.push_back(1);
    return target;
  };
  auto reshape = [&](const std::string& x, std::vector<int64_t> target, const std::string& hint) {
    return ReshapeTo(ctx, x, std::move(target), at + "/" + hint);
  };
  ASSIGN_OR_RETURN(std::string idx_u, reshape(idx, with_one_at(it.shape, ax + 1), "indices"));
  ASSIGN_OR_RETURN(TensorType cut, ctx.TypeOf(data));
  ASSIGN_OR_RETURN(std::string data_u, reshape(data, with_one_at(cut.shape, ax), "data"));
  std::vector<int64_t> pos_dims(static_cast<size_t>(r + 1), 1);
  pos_dims[static_cast<size_t>(ax + 1)] = n;
  std::vector<std::string> masks;
  for (int64_t shift : {int64_t{0}, -n}) {
    std::vector<int64_t> v;
    for (int64_t i = 0; i < n; ++i) v.push_back(i + shift);
    ASSIGN_OR_RETURN(std::string pos,
                     ctx.b().AddConstant(absl::StrCat(at, "/positions", shift == 0 ? "" : "_neg"),
                                         Tensor::FromI64(pos_dims, v)));
    Attrs eq;
    eq.SetString("mode", "eq");
    ASSIGN_OR_RETURN(std::string m, ctx.b().Add("CompareMask", {idx_u, pos}, std::move(eq),
                                                at + (shift == 0 ? "/hit" : "/hit_neg")));
    masks.push_back(m);
  }
  ASSIGN_OR_RETURN(std::string mask, ctx.b().Add("Add", masks, {}, at + "/one_hot"));
  ASSIGN_OR_RETURN(std::string picked, ctx.b().Add("Mul", {mask, data_u}, {}, at + "/picked"));
  Attrs sum;
  sum.SetInts("axes", {axis + 1});
  sum.SetInt("keepdims", 0);
  return ctx.Emit(node, "ReduceSum", {picked}, std::move(sum));
}

absl::Status Split(ImportContext& ctx, const Node& node) {
  Attrs a;
  a.SetInt("axis", AttrInt(node, "axis", 0));
  std::vector<int64_t> split = AttrInts(node, "split");
  if (ctx.HasInput(node, 1)) {
    ASSIGN_OR_RETURN(split, ctx.ConstInts(node, 1));
  }
  if (const Tensor* c = ctx.ConstantInput(node, 0);
      c != nullptr && !ctx.IsParameterInitializer(node, 0) && c->rank() > 0) {
    // Constant data (repeat counts of repeat_interleave): split it here, so
    // what reads the parts may still need them constant.
    int64_t axis = AttrInt(node, "axis", 0);
    if (axis < 0) axis += c->rank();
    if (axis < 0 || axis >= c->rank()) return absl::InvalidArgumentError("Split: bad axis");
    const int64_t n = c->dim(static_cast<int>(axis));
    const int parts = node.output_size();
    if (split.empty()) {
      // Equal parts (opset 18's num_outputs: of ceil(n / parts), the last
      // one smaller).
      const bool ceil = AttrInt(node, "num_outputs", 0) > 0;
      if (parts == 0 || (!ceil && n % parts != 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("Split: ", n, " does not split into ", parts, " equal parts"));
      }
      const int64_t each = (n + parts - 1) / parts;
      for (int64_t k = 0; k < parts; ++k)
        split.push_back(std::clamp<int64_t>(n - k * each, 0, each));
    }
    int64_t total = 0;
    for (int64_t k : split) total += k < 0 ? n + 1 : k;
    if (static_cast<int>(split.size()) != parts || total != n) {
      return absl::InvalidArgumentError(absl::StrCat("Split: parts of ", n, " that do not add up"));
    }
    int64_t outer = 1, inner = DTypeSize(c->dtype());
    for (int i = 0; i < c->rank(); ++i) {
      if (i < axis) outer *= c->dim(i);
      if (i > axis) inner *= c->dim(i);
    }
    int64_t at = 0;
    for (int k = 0; k < parts; ++k) {
      std::vector<int64_t> dims = c->dims();
      dims[axis] = split[k];
      ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(c->dtype(), dims));
      const auto* from = static_cast<const char*>(c->raw());
      auto* to = static_cast<char*>(out.raw());
      for (int64_t o = 0; o < outer; ++o) {
        std::memcpy(to + o * split[k] * inner, from + (o * n + at) * inner,
                    static_cast<size_t>(split[k] * inner));
      }
      at += split[k];
      ctx.SetConstant(node.output(k), std::move(out));
    }
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::string x, ctx.Data(node, 0));
  if (const int64_t parts = AttrInt(node, "num_outputs", 0); split.empty() && parts > 0) {
    // Opset 18: equal parts of ceil(n / parts), the last one smaller.
    ASSIGN_OR_RETURN(TensorType t, ctx.TypeOf(x));
    int64_t axis = AttrInt(node, "axis", 0);
    if (axis < 0) axis += t.shape.rank();
    if (axis < 0 || axis >= t.shape.rank() || t.shape.dim(static_cast<int>(axis)).batch) {
      return absl::InvalidArgumentError("Split: bad axis, or the batch dim");
    }
    if (parts != node.output_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Split: num_outputs ", parts, " but ", node.output_size(), " outputs"));
    }
    const int64_t n = t.shape.dim(static_cast<int>(axis)).value;
    const int64_t each = (n + parts - 1) / parts;
    if (each * (parts - 1) >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat("Split: ", n, " into ", parts, " parts leaves an empty one"));
    }
    for (int64_t i = 0; i < parts; ++i)
      split.push_back(std::max<int64_t>(0, std::min(each, n - i * each)));
  }
  if (!split.empty()) a.SetInts("split", split);
  return ctx.Emit(node, "Split", {x}, std::move(a));
}

}  // namespace quilt::onnx_import
