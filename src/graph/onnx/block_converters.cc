// DepthToSpace (nn.PixelShuffle exports it in CRD mode; DCR is ONNX's
// default) and SpaceToDepth (nn.PixelUnshuffle's counterpart) as a
// Reshape to six dims, a Transpose and a Reshape back to four: exact
// copies, whose gradient is the inverse permutation. The batch stays whole
// in dim 0, so replicas split it as any other NCHW tensor.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/graph/graph_builder.h"
#include "src/graph/onnx/converter_parts.h"

namespace quilt::onnx_import {
namespace {

struct Nchw {
  std::string x;
  int64_t n = -1;  // -1: the batch (Reshape's inferred dim)
  int64_t c = 0, h = 0, w = 0;
};

absl::StatusOr<Nchw> ReadNchw(ImportContext& ctx, const Node& node) {
  Nchw out;
  ASSIGN_OR_RETURN(out.x, ctx.Data(node, 0));
  ASSIGN_OR_RETURN(TensorType t, ctx.TypeOf(out.x));
  const Shape& s = t.shape;
  if (s.rank() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(node.op_type(), ": input ", s.ToString(), " is not NCHW (rank 4)"));
  }
  for (int d = 1; d < 4; ++d) {
    if (s.dim(d).batch) {
      return absl::InvalidArgumentError(absl::StrCat(node.op_type(), ": input ", s.ToString(),
                                                     " holds the batch in dim ", d, ", not dim 0"));
    }
  }
  if (!s.dim(0).batch) out.n = s.dim(0).value;
  out.c = s.dim(1).value;
  out.h = s.dim(2).value;
  out.w = s.dim(3).value;
  return out;
}

absl::Status Rearrange(ImportContext& ctx, const Node& node, const std::string& x,
                       std::vector<int64_t> six, std::vector<int64_t> perm,
                       std::vector<int64_t> four) {
  const std::string at = node.name().empty() ? node.op_type() : node.name();
  ASSIGN_OR_RETURN(std::string split, ReshapeTo(ctx, x, std::move(six), at + "/blocks"));
  Attrs t;
  t.SetInts("perm", std::move(perm));
  ASSIGN_OR_RETURN(std::string moved,
                   ctx.b().Add("Transpose", {split}, std::move(t), at + "/move"));
  Attrs r;
  r.SetInts("shape", std::move(four));
  return ctx.Emit(node, "Reshape", {moved}, std::move(r));
}

}  // namespace

absl::Status DepthToSpace(ImportContext& ctx, const Node& node) {
  const int64_t b = AttrInt(node, "blocksize", 0);
  if (b < 1) return absl::InvalidArgumentError("DepthToSpace: blocksize must be at least 1");
  const std::string mode = AttrString(node, "mode", "DCR");
  if (mode != "DCR" && mode != "CRD") {
    return absl::InvalidArgumentError(
        absl::StrCat("DepthToSpace: mode \"", mode, "\" (DCR or CRD expected)"));
  }
  ASSIGN_OR_RETURN(Nchw in, ReadNchw(ctx, node));
  if (in.c % (b * b) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DepthToSpace: ", in.c, " channels are not a multiple of blocksize² (", b * b, ")"));
  }
  const int64_t c = in.c / (b * b);
  std::vector<int64_t> four = {in.n, c, in.h * b, in.w * b};
  if (mode == "DCR") {
    return Rearrange(ctx, node, in.x, {in.n, b, b, c, in.h, in.w}, {0, 3, 4, 1, 5, 2},
                     std::move(four));
  }
  return Rearrange(ctx, node, in.x, {in.n, c, b, b, in.h, in.w}, {0, 1, 4, 2, 5, 3},
                   std::move(four));
}

absl::Status SpaceToDepth(ImportContext& ctx, const Node& node) {
  const int64_t b = AttrInt(node, "blocksize", 0);
  if (b < 1) return absl::InvalidArgumentError("SpaceToDepth: blocksize must be at least 1");
  ASSIGN_OR_RETURN(Nchw in, ReadNchw(ctx, node));
  if (in.h % b != 0 || in.w % b != 0) {
    return absl::InvalidArgumentError(absl::StrCat("SpaceToDepth: height ", in.h, " and width ",
                                                   in.w, " must be multiples of blocksize ", b));
  }
  return Rearrange(ctx, node, in.x, {in.n, in.c, in.h / b, b, in.w / b, b}, {0, 3, 5, 1, 2, 4},
                   {in.n, in.c * b * b, in.h / b, in.w / b});
}

}  // namespace quilt::onnx_import
