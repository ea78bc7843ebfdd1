// Constant padding (ONNX Pad, mode "constant") and its gradient (a slice).
#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/graph/ops/op_util.h"

namespace quilt::ops {
namespace {

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "Pad";
  s.doc =
      "Pads with attribute value (0) by attribute pads [x1_begin, x2_begin, ..., x1_end, "
      "...] (ONNX layout; non-negative, none on the batch dim).";
  s.infer = [](InferContext& ctx) -> absl::Status {
    RETURN_IF_ERROR(RequireFloatInputs(ctx));
    const Shape& in = ctx.shape(0);
    const std::vector<int64_t> pads = ctx.attrs().Ints("pads");
    if (static_cast<int>(pads.size()) != 2 * in.rank()) {
      return ctx.Error(absl::StrCat("pads needs ", 2 * in.rank(), " values"));
    }
    Shape out = in;
    for (int i = 0; i < in.rank(); ++i) {
      const int64_t b = pads[i], e = pads[i + in.rank()];
      if (b < 0 || e < 0) return ctx.Error("negative pads are not supported");
      if (in.dim(i).batch) {
        if (b != 0 || e != 0) return ctx.Error("cannot pad the batch dimension");
        continue;
      }
      out.dim(i) = Dim::Fixed(in.dim(i).value + b + e);
    }
    ctx.set_output(0, ctx.dtype(0), out);
    return absl::OkStatus();
  };
  s.cost = [](const CostContext& c) { return OpCost{0, c.IoBytes()}; };
  s.grad = [](GradContext& g) -> absl::Status {
    if (!g.needs_dx(0)) return absl::OkStatus();
    ASSIGN_OR_RETURN(Shape xs, ShapeOf(g, g.x(0)));
    const std::vector<int64_t> pads = g.op().attrs.Ints("pads");
    std::vector<int64_t> starts, ends, axes;
    for (int i = 0; i < xs.rank(); ++i) {
      if (xs.dim(i).batch) continue;
      axes.push_back(i);
      starts.push_back(pads[i]);
      ends.push_back(pads[i] + xs.dim(i).value);
    }
    Attrs a;
    a.SetInts("starts", starts);
    a.SetInts("ends", ends);
    a.SetInts("axes", axes);
    ASSIGN_OR_RETURN(std::string dx, Unary(g, "Slice", g.dy(0), std::move(a)));
    g.set_dx(0, dx);
    return absl::OkStatus();
  };
  return s;
}());

}  // namespace
}  // namespace quilt::ops
