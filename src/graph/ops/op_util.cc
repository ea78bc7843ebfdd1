#include "src/graph/ops/op_util.h"

#include "absl/strings/str_cat.h"
#include "src/common/status.h"

namespace quilt::ops {

absl::StatusOr<Shape> Broadcast(const Shape& a, const Shape& b) {
  const int rank = std::max(a.rank(), b.rank());
  std::vector<Dim> out(rank);
  for (int i = 0; i < rank; ++i) {
    const int ia = i - (rank - a.rank());
    const int ib = i - (rank - b.rank());
    const Dim da = ia >= 0 ? a.dim(ia) : Dim::Fixed(1);
    const Dim db = ib >= 0 ? b.dim(ib) : Dim::Fixed(1);
    if (da == db) {
      out[i] = da;
    } else if (!da.batch && da.value == 1) {
      out[i] = db;
    } else if (!db.batch && db.value == 1) {
      out[i] = da;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("shapes ", a.ToString(), " and ", b.ToString(), " do not broadcast"));
    }
  }
  Shape s(std::move(out));
  int batch_dims = 0;
  for (const Dim& d : s.dims()) batch_dims += d.batch;
  if (batch_dims > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "broadcasting ", a.ToString(), " and ", b.ToString(), " would give two batch dimensions"));
  }
  return s;
}

absl::Status InferSameAsInput(InferContext& ctx) {
  ctx.set_output(0, ctx.input(0));
  return absl::OkStatus();
}

absl::Status RequireFloatInputs(InferContext& ctx) {
  DType first = DType::kInvalid;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    if (!IsFloat(ctx.dtype(i))) {
      return ctx.Error(
          absl::StrCat("input ", i, " must be a float tensor, got ", DTypeName(ctx.dtype(i))));
    }
    if (first == DType::kInvalid) first = ctx.dtype(i);
    if (ctx.dtype(i) != first) {
      return ctx.Error(
          absl::StrCat("inputs mix ", DTypeName(first), " and ", DTypeName(ctx.dtype(i))));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Shape> ShapeOf(GradContext& g, const std::string& tensor) {
  ASSIGN_OR_RETURN(TensorType t, g.b().TypeOf(tensor));
  return t.shape;
}

absl::StatusOr<std::string> SumTo(GradContext& g, const std::string& dy, const Shape& target) {
  ASSIGN_OR_RETURN(Shape dy_shape, ShapeOf(g, dy));
  if (dy_shape == target) return dy;
  Attrs attrs;
  EncodeShape(&attrs, "shape", target);
  return g.b().Add("SumToShape", {dy}, std::move(attrs), g.op().name + "_grad_sum");
}

absl::StatusOr<std::string> Unary(GradContext& g, const std::string& type, const std::string& x,
                                  Attrs attrs) {
  return g.b().Add(type, {x}, std::move(attrs), g.op().name + "_grad");
}

absl::StatusOr<std::string> Binary(GradContext& g, const std::string& type, const std::string& a,
                                   const std::string& b, Attrs attrs) {
  return g.b().Add(type, {a, b}, std::move(attrs), g.op().name + "_grad");
}

CostFn ElementwiseCost(double flops_per_element) {
  return [flops_per_element](const CostContext& c) {
    OpCost cost;
    for (size_t i = 0; i < c.out_dims.size(); ++i) {
      cost.flops += flops_per_element * static_cast<double>(c.OutNumel(static_cast<int>(i)));
    }
    cost.bytes = c.IoBytes();
    return cost;
  };
}

}  // namespace quilt::ops
