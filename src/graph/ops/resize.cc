// Bilinear resizing of [N,C,H,W] (F.interpolate(mode="bilinear"), ONNX
// Resize in linear mode) and its gradient. Attributes: out_h, out_w, and
// coords, how an output pixel maps to the input: "half_pixel" (PyTorch's
// align_corners=False: (o + 0.5) / scale - 0.5, clamped at 0),
// "align_corners" (o · (in - 1) / (out - 1)) or "asymmetric" (o / scale).
#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/graph/ops/op_util.h"

namespace quilt::ops {
namespace {

absl::Status CheckCoords(InferContext& ctx) {
  const std::string c = ctx.attrs().String("coords", "half_pixel");
  if (c != "half_pixel" && c != "align_corners" && c != "asymmetric") {
    return ctx.Error("coords must be half_pixel, align_corners or asymmetric, got '" + c + "'");
  }
  return absl::OkStatus();
}

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "ResizeBilinear";
  s.doc =
      "Bilinear resizing of X [N,C,H,W] to [N,C,out_h,out_w]; attribute coords (half_pixel, "
      "align_corners, asymmetric) maps output pixels to input coordinates.";
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    RETURN_IF_ERROR(CheckCoords(ctx));
    const Shape& x = ctx.shape(0);
    if (x.rank() != 4) return ctx.Error("only [N,C,H,W] inputs are resized");
    for (int i = 1; i < 4; ++i) {
      if (x.dim(i).batch) return ctx.Error("only dim 0 may carry the batch");
    }
    const int64_t h = ctx.attrs().Int("out_h", 0), w = ctx.attrs().Int("out_w", 0);
    if (h <= 0 || w <= 0) return ctx.Error("out_h and out_w must be positive");
    ctx.set_output(0, ctx.dtype(0), Shape({x.dim(0), x.dim(1), Dim::Fixed(h), Dim::Fixed(w)}));
    return absl::OkStatus();
  };
  s.cost = [](const CostContext& c) {
    return OpCost{8.0 * static_cast<double>(c.OutNumel(0)), c.IoBytes()};
  };
  s.grad = [](GradContext& g) -> absl::Status {
    if (!g.needs_dx(0)) return absl::OkStatus();
    ASSIGN_OR_RETURN(std::string dx, g.b().Add("ResizeBilinearGrad", {g.dy(0), g.x(0)},
                                               g.op().attrs, g.op().name + "_grad"));
    g.set_dx(0, dx);
    return absl::OkStatus();
  };
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "ResizeBilinearGrad";
  s.doc =
      "Gradient of ResizeBilinear: dY's pixels spread onto X's with the interpolation weights. "
      "Inputs dY and X (for its shape).";
  s.min_inputs = s.max_inputs = 2;
  s.non_differentiable_inputs = {1};
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    RETURN_IF_ERROR(CheckCoords(ctx));
    ctx.set_output(0, ctx.dtype(1), ctx.shape(1));
    return absl::OkStatus();
  };
  s.cost = [](const CostContext& c) {
    return OpCost{8.0 * static_cast<double>(c.InNumel(0)), c.IoBytes()};
  };
  return s;
}());

}  // namespace
}  // namespace quilt::ops
