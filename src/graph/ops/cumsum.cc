// Cumulative sums along one axis (torch.cumsum; ONNX CumSum), of float
// or int64 tensors (position ids counted from a mask), and their gradient:
// the cumulative sum of dY the other way.
#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/graph/ops/op_util.h"

namespace quilt::ops {
namespace {

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "CumSum";
  s.doc =
      "Cumulative sum of X along attribute axis (not the batch's); attributes exclusive (the sum "
      "before each element) and reverse (from the end). Float32 or int64.";
  s.infer = [](InferContext& ctx) -> absl::Status {
    if (ctx.dtype(0) != DType::kF32 && ctx.dtype(0) != DType::kI64) {
      return ctx.Error("X must be float32 or int64");
    }
    const Shape& x = ctx.shape(0);
    int64_t axis = ctx.attrs().Int("axis", 0);
    if (axis < 0) axis += x.rank();
    if (axis < 0 || axis >= x.rank()) return ctx.Error("axis out of range");
    if (x.dim(static_cast<int>(axis)).batch) {
      return ctx.Error("a cumulative sum over the batch dim is not supported (replicas split it)");
    }
    ctx.set_output(0, ctx.dtype(0), x);
    return absl::OkStatus();
  };
  s.cost = ElementwiseCost(1);
  s.grad = [](GradContext& g) -> absl::Status {
    if (!g.needs_dx(0)) return absl::OkStatus();
    Attrs a = g.op().attrs;
    a.SetInt("reverse", a.Int("reverse", 0) == 0 ? 1 : 0);
    ASSIGN_OR_RETURN(std::string dx,
                     g.b().Add("CumSum", {g.dy(0)}, std::move(a), g.op().name + "_grad"));
    g.set_dx(0, dx);
    return absl::OkStatus();
  };
  return s;
}());

}  // namespace
}  // namespace quilt::ops
