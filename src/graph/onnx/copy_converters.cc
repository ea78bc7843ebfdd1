// Converters that build a tensor from copies of another's slices: Tile
// (tensor.repeat) as Concats of copies, or an Expand over the batch for a
// dim of 1 repeated batch times; Pad by reflection or by the edge
// (nn.ReflectionPad2d, ReplicationPad, padding_mode="reflect" /
// "replicate") as Concats of reversed or repeated slices. Each is exact,
// and its gradient sums over the copies (Concat's and Slice's).
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
  bool expand = false;
  for (int i = 0; i < t.shape.rank(); ++i) {
    const int64_t r = repeats[i];
    if (r < 1) return absl::InvalidArgumentError("Tile: a repeat count below 1");
    if (r == 1) continue;
    const Dim d = t.shape.dim(i);
    if (d.batch) {
      return absl::InvalidArgumentError(
          "Tile repeats the batch dim (replicas split the batch; repeat another dim)");
    }
    if (d.value == 1 && !t.shape.HasBatch() && !expand &&
        (r == b0 || (ctx.symbolic_batch() && r % b0 == 0))) {
      // A parameter repeated over the batch (cls.repeat(B, 1, 1)).
      expanded[i] = Dim::Batch(r / b0);
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

}  // namespace quilt::onnx_import
