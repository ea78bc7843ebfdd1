// Layout ops: Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Concat, Split,
// Slice, Gather (embedding lookup) and their gradients.
#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/common/status.h"
#include "src/graph/ops/op_util.h"
#include "src/graph/ops/slice_spec.h"

namespace quilt::ops {
namespace {

// Reshape target for `s` in Reshape's own convention: the batch dim is -1.
std::vector<int64_t> ReshapeTarget(const Shape& s) {
  std::vector<int64_t> t;
  for (const Dim& d : s.dims()) t.push_back(d.batch ? -1 : d.value);
  return t;
}

// Gradient of any op that only reshapes its input: reshape dy back.
absl::Status ReshapeBackGrad(GradContext& g) {
  if (!g.needs_dx(0)) return absl::OkStatus();
  ASSIGN_OR_RETURN(Shape xs, ShapeOf(g, g.x(0)));
  ASSIGN_OR_RETURN(Shape dys, ShapeOf(g, g.dy(0)));
  if (xs == dys) {
    g.set_dx(0, g.dy(0));
    return absl::OkStatus();
  }
  Attrs a;
  a.SetInts("shape", ReshapeTarget(xs));
  ASSIGN_OR_RETURN(std::string dx,
                   g.b().Add("Reshape", {g.dy(0)}, std::move(a), g.op().name + "_grad"));
  g.set_dx(0, dx);
  return absl::OkStatus();
}

CostFn CopyCost() {
  return [](const CostContext& c) { return OpCost{0, c.IoBytes()}; };
}

OpSchema ViewOp(const std::string& type, const std::string& doc, InferFn infer) {
  OpSchema s;
  s.type = type;
  s.linear = true;
  s.doc = doc;
  s.infer = std::move(infer);
  s.cost = [](const CostContext&) { return OpCost{0, 0}; };  // a view: no data moves
  s.grad = ReshapeBackGrad;
  return s;
}

absl::Status InferReshape(InferContext& ctx) {
  const Shape& in = ctx.shape(0);
  absl::StatusOr<std::vector<int64_t>> target = ctx.attrs().RequireInts("shape");
  if (!target.ok()) return ctx.Error(std::string(target.status().message()));
  std::vector<Dim> out(target->size());
  int infer_at = -1;
  int64_t known = 1;
  bool known_batch = false;
  for (size_t i = 0; i < target->size(); ++i) {
    const int64_t t = (*target)[i];
    if (t == 0) {
      if (static_cast<int>(i) >= in.rank()) return ctx.Error("0 in shape beyond the input's rank");
      out[i] = in.dim(static_cast<int>(i));
      known *= out[i].value;
      known_batch |= out[i].batch;
    } else if (t == -1) {
      if (infer_at >= 0) return ctx.Error("more than one -1 in shape");
      infer_at = static_cast<int>(i);
    } else if (t < 0) {
      return ctx.Error(absl::StrCat("invalid extent ", t, " in shape"));
    } else {
      out[i] = Dim::Fixed(t);
      known *= t;
    }
  }
  const int64_t c = in.Coeff();
  const bool in_batch = in.HasBatch();
  auto mismatch = [&] {
    return ctx.Error(
        absl::StrCat("cannot reshape ", in.ToString(), " to [", absl::StrJoin(*target, ","), "]"));
  };
  if (known_batch && !in_batch) return mismatch();
  if (infer_at >= 0) {
    if (known == 0 || c % known != 0) return mismatch();
    const int64_t v = c / known;
    out[infer_at] = (in_batch && !known_batch) ? Dim::Batch(v) : Dim::Fixed(v);
    if (out[infer_at].batch && v < 1) return mismatch();
  } else {
    if (known != c) return mismatch();
    if (in_batch && !known_batch) {
      return ctx.Error(absl::StrCat("the target shape [", absl::StrJoin(*target, ","),
                                    "] has no dimension for the batch of ", in.ToString(),
                                    " (use 0 or -1 there)"));
    }
  }
  ctx.set_output(0, ctx.dtype(0), Shape(std::move(out)));
  return absl::OkStatus();
}

QUILT_REGISTER_OP(ViewOp("Reshape",
                         "Reshapes to attribute shape (0 = copy the input's dim, -1 = infer; "
                         "the batch must fall on a 0 or -1).",
                         InferReshape));

QUILT_REGISTER_OP(ViewOp("Flatten", "Flattens to 2-D at attribute axis (1).",
                         [](InferContext& ctx) -> absl::Status {
                           const Shape& in = ctx.shape(0);
                           int64_t axis = ctx.attrs().Int("axis", 1);
                           if (axis < 0) axis += in.rank();
                           if (axis < 0 || axis > in.rank())
                             return ctx.Error("axis is out of range");
                           Dim a = Dim::Fixed(1), b = Dim::Fixed(1);
                           for (int i = 0; i < in.rank(); ++i) {
                             Dim& t = i < axis ? a : b;
                             t.value *= in.dim(i).value;
                             t.batch |= in.dim(i).batch;
                           }
                           ctx.set_output(0, ctx.dtype(0), Shape({a, b}));
                           return absl::OkStatus();
                         }));

QUILT_REGISTER_OP(ViewOp("Squeeze",
                         "Removes the size-1 dims listed in attribute axes (all when empty).",
                         [](InferContext& ctx) -> absl::Status {
                           const Shape& in = ctx.shape(0);
                           std::vector<bool> drop(in.rank(), false);
                           const std::vector<int64_t> axes = ctx.attrs().Ints("axes");
                           for (int64_t a : axes) {
                             absl::StatusOr<int> ax = NormalizeAxis(a, in.rank());
                             if (!ax.ok()) return ctx.Error(std::string(ax.status().message()));
                             if (in.dim(*ax) != Dim::Fixed(1)) {
                               return ctx.Error(
                                   absl::StrCat("dim ", *ax, " of ", in.ToString(), " is not 1"));
                             }
                             drop[*ax] = true;
                           }
                           std::vector<Dim> out;
                           for (int i = 0; i < in.rank(); ++i) {
                             const bool one = in.dim(i) == Dim::Fixed(1);
                             if (axes.empty() ? one : drop[i]) continue;
                             out.push_back(in.dim(i));
                           }
                           ctx.set_output(0, ctx.dtype(0), Shape(std::move(out)));
                           return absl::OkStatus();
                         }));

QUILT_REGISTER_OP(ViewOp("Unsqueeze",
                         "Inserts size-1 dims at attribute axes (positions in the output).",
                         [](InferContext& ctx) -> absl::Status {
                           const Shape& in = ctx.shape(0);
                           const std::vector<int64_t> axes = ctx.attrs().Ints("axes");
                           const int rank = in.rank() + static_cast<int>(axes.size());
                           std::vector<bool> ins(rank, false);
                           for (int64_t a : axes) {
                             absl::StatusOr<int> ax = NormalizeAxis(a, rank);
                             if (!ax.ok()) return ctx.Error(std::string(ax.status().message()));
                             if (ins[*ax]) return ctx.Error("repeated axis");
                             ins[*ax] = true;
                           }
                           std::vector<Dim> out;
                           int j = 0;
                           for (int i = 0; i < rank; ++i)
                             out.push_back(ins[i] ? Dim::Fixed(1) : in.dim(j++));
                           ctx.set_output(0, ctx.dtype(0), Shape(std::move(out)));
                           return absl::OkStatus();
                         }));

std::vector<int64_t> PermOrReverse(const Attrs& attrs, int rank) {
  std::vector<int64_t> perm = attrs.Ints("perm");
  if (perm.empty()) {
    for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  return perm;
}

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "Transpose";
  s.linear = true;
  s.doc = "Permutes the dims by attribute perm (default: reverse).";
  s.infer = [](InferContext& ctx) -> absl::Status {
    const Shape& in = ctx.shape(0);
    const std::vector<int64_t> perm = PermOrReverse(ctx.attrs(), in.rank());
    if (static_cast<int>(perm.size()) != in.rank()) return ctx.Error("perm has the wrong length");
    std::vector<bool> seen(in.rank(), false);
    std::vector<Dim> out;
    for (int64_t p : perm) {
      if (p < 0 || p >= in.rank() || seen[p]) return ctx.Error("perm is not a permutation");
      seen[p] = true;
      out.push_back(in.dim(static_cast<int>(p)));
    }
    ctx.set_output(0, ctx.dtype(0), Shape(std::move(out)));
    return absl::OkStatus();
  };
  s.cost = CopyCost();
  s.grad = [](GradContext& g) -> absl::Status {
    if (!g.needs_dx(0)) return absl::OkStatus();
    ASSIGN_OR_RETURN(Shape xs, ShapeOf(g, g.x(0)));
    const std::vector<int64_t> perm = PermOrReverse(g.op().attrs, xs.rank());
    std::vector<int64_t> inv(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
    Attrs a;
    a.SetInts("perm", inv);
    ASSIGN_OR_RETURN(std::string dx, Unary(g, "Transpose", g.dy(0), std::move(a)));
    g.set_dx(0, dx);
    return absl::OkStatus();
  };
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "Concat";
  s.linear = true;
  s.doc = "Concatenates the inputs along attribute axis.";
  s.min_inputs = 1;
  s.max_inputs = -1;
  s.infer = [](InferContext& ctx) -> absl::Status {
    const Shape& first = ctx.shape(0);
    absl::StatusOr<int> axis = NormalizeAxis(ctx.attrs().Int("axis", 0), first.rank());
    if (!axis.ok()) return ctx.Error(std::string(axis.status().message()));
    Dim total = first.dim(*axis);
    for (int i = 1; i < ctx.num_inputs(); ++i) {
      const Shape& s = ctx.shape(i);
      if (ctx.dtype(i) != ctx.dtype(0)) return ctx.Error("inputs differ in dtype");
      if (s.rank() != first.rank()) return ctx.Error("inputs differ in rank");
      for (int d = 0; d < s.rank(); ++d) {
        if (d != *axis && s.dim(d) != first.dim(d)) {
          return ctx.Error(absl::StrCat("input ", i, " ", s.ToString(), " does not match ",
                                        first.ToString(), " outside the concat axis"));
        }
      }
      if (s.dim(*axis).batch != total.batch) {
        return ctx.Error("cannot concatenate batch and fixed extents");
      }
      total.value += s.dim(*axis).value;
    }
    Shape out = first;
    out.dim(*axis) = total;
    ctx.set_output(0, ctx.dtype(0), out);
    return absl::OkStatus();
  };
  s.cost = CopyCost();
  s.grad = [](GradContext& g) -> absl::Status {
    ASSIGN_OR_RETURN(Shape ys, ShapeOf(g, g.y(0)));
    ASSIGN_OR_RETURN(int axis, NormalizeAxis(g.op().attrs.Int("axis", 0), ys.rank()));
    if (ys.dim(axis).batch) return g.Error("gradient of a concat along the batch is not supported");
    std::vector<int64_t> sizes;
    for (const std::string& x : g.op().inputs) {
      ASSIGN_OR_RETURN(Shape xs, ShapeOf(g, x));
      sizes.push_back(xs.dim(axis).value);
    }
    Attrs a;
    a.SetInt("axis", axis);
    a.SetInts("split", sizes);
    ASSIGN_OR_RETURN(std::vector<std::string> parts,
                     g.b().AddOp("Split", {g.dy(0)}, std::move(a), static_cast<int>(sizes.size()),
                                 g.op().name + "_grad"));
    for (size_t i = 0; i < parts.size(); ++i) {
      if (g.needs_dx(static_cast<int>(i))) g.set_dx(static_cast<int>(i), parts[i]);
    }
    return absl::OkStatus();
  };
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "Split";
  s.linear = true;
  s.doc = "Splits along attribute axis into pieces of attribute split (equal when absent).";
  s.min_outputs = 1;
  s.max_outputs = -1;
  s.infer = [](InferContext& ctx) -> absl::Status {
    const Shape& in = ctx.shape(0);
    absl::StatusOr<int> axis = NormalizeAxis(ctx.attrs().Int("axis", 0), in.rank());
    if (!axis.ok()) return ctx.Error(std::string(axis.status().message()));
    if (in.dim(*axis).batch) return ctx.Error("cannot split along the batch");
    std::vector<int64_t> split = ctx.attrs().Ints("split");
    const int n = ctx.num_outputs();
    if (split.empty()) {
      if (in.dim(*axis).value % n != 0) return ctx.Error("extent does not split evenly");
      split.assign(n, in.dim(*axis).value / n);
    }
    if (static_cast<int>(split.size()) != n ||
        std::accumulate(split.begin(), split.end(), int64_t{0}) != in.dim(*axis).value) {
      return ctx.Error("split sizes do not add up to the extent");
    }
    for (int i = 0; i < n; ++i) {
      Shape o = in;
      o.dim(*axis) = Dim::Fixed(split[i]);
      ctx.set_output(i, ctx.dtype(0), o);
    }
    return absl::OkStatus();
  };
  s.cost = CopyCost();
  s.grad = [](GradContext& g) -> absl::Status {
    if (!g.needs_dx(0)) return absl::OkStatus();
    std::vector<std::string> parts;
    for (size_t i = 0; i < g.op().outputs.size(); ++i) {
      if (!g.dy(static_cast<int>(i)).empty()) {
        parts.push_back(g.dy(static_cast<int>(i)));
        continue;
      }
      ASSIGN_OR_RETURN(Shape ys, ShapeOf(g, g.y(static_cast<int>(i))));
      Attrs z;
      EncodeShape(&z, "shape", ys);
      ASSIGN_OR_RETURN(std::string zero,
                       g.b().Add("Zeros", {}, std::move(z), g.op().name + "_zero"));
      parts.push_back(zero);
    }
    Attrs a;
    a.SetInt("axis", g.op().attrs.Int("axis", 0));
    ASSIGN_OR_RETURN(std::string dx,
                     g.b().Add("Concat", parts, std::move(a), g.op().name + "_grad"));
    g.set_dx(0, dx);
    return absl::OkStatus();
  };
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "Slice";
  s.linear = true;
  s.doc = "ONNX Slice with attributes starts, ends, axes, steps.";
  s.infer = [](InferContext& ctx) -> absl::Status {
    const Shape& in = ctx.shape(0);
    absl::StatusOr<SliceSpec> spec = ResolveSlice(ctx.attrs(), in);
    if (!spec.ok()) return ctx.Error(std::string(spec.status().message()));
    Shape out = in;
    for (int i = 0; i < in.rank(); ++i) {
      if (!in.dim(i).batch) out.dim(i) = Dim::Fixed(spec->count[i]);
    }
    ctx.set_output(0, ctx.dtype(0), out);
    return absl::OkStatus();
  };
  s.cost = CopyCost();
  s.grad = [](GradContext& g) -> absl::Status {
    if (!g.needs_dx(0)) return absl::OkStatus();
    ASSIGN_OR_RETURN(Shape xs, ShapeOf(g, g.x(0)));
    Attrs a = g.op().attrs;
    EncodeShape(&a, "input_shape", xs);
    ASSIGN_OR_RETURN(std::string dx, Unary(g, "SliceGrad", g.dy(0), std::move(a)));
    g.set_dx(0, dx);
    return absl::OkStatus();
  };
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "SliceGrad";
  s.linear = true;
  s.doc = "Gradient of Slice: dY placed into zeros of attribute input_shape.";
  s.infer = [](InferContext& ctx) -> absl::Status {
    absl::StatusOr<Shape> in = DecodeShape(ctx.attrs(), "input_shape");
    if (!in.ok()) return ctx.Error(std::string(in.status().message()));
    ctx.set_output(0, ctx.dtype(0), *in);
    return absl::OkStatus();
  };
  s.cost = CopyCost();
  return s;
}());

absl::StatusOr<Shape> GatherShape(const Shape& data, const Shape& indices, int64_t axis_attr) {
  ASSIGN_OR_RETURN(int axis, NormalizeAxis(axis_attr, data.rank()));
  if (data.dim(axis).batch) return absl::InvalidArgumentError("cannot gather along the batch");
  std::vector<Dim> out(data.dims().begin(), data.dims().begin() + axis);
  out.insert(out.end(), indices.dims().begin(), indices.dims().end());
  out.insert(out.end(), data.dims().begin() + axis + 1, data.dims().end());
  Shape s(std::move(out));
  int batch = 0;
  for (const Dim& d : s.dims()) batch += d.batch;
  if (batch > 1) return absl::InvalidArgumentError("result would have two batch dimensions");
  return s;
}

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "Gather";
  s.doc =
      "Takes slices of data along attribute axis (0) at int64 indices (embedding lookup); "
      "ids_from_data (0): the indices are the model's input, and negative ones are refused "
      "rather than counted from the end.";
  s.min_inputs = s.max_inputs = 2;
  s.non_differentiable_inputs = {1};
  s.infer = [](InferContext& ctx) -> absl::Status {
    if (ctx.dtype(1) != DType::kI64) return ctx.Error("indices must be i64");
    absl::StatusOr<Shape> out = GatherShape(ctx.shape(0), ctx.shape(1), ctx.attrs().Int("axis", 0));
    if (!out.ok()) return ctx.Error(std::string(out.status().message()));
    ctx.set_output(0, ctx.dtype(0), *out);
    return absl::OkStatus();
  };
  s.cost = CopyCost();
  s.grad = [](GradContext& g) -> absl::Status {
    if (!g.needs_dx(0)) return absl::OkStatus();
    ASSIGN_OR_RETURN(Shape ds, ShapeOf(g, g.x(0)));
    Attrs a;
    a.SetInt("axis", g.op().attrs.Int("axis", 0));
    EncodeShape(&a, "data_shape", ds);
    ASSIGN_OR_RETURN(std::string dx, Binary(g, "GatherGrad", g.dy(0), g.x(1), std::move(a)));
    g.set_dx(0, dx);
    return absl::OkStatus();
  };
  return s;
}());

QUILT_REGISTER_OP([] {
  OpSchema s;
  s.type = "GatherGrad";
  s.doc = "Gradient of Gather: dY scatter-added into zeros of attribute data_shape.";
  s.min_inputs = s.max_inputs = 2;
  s.infer = [](InferContext& ctx) -> absl::Status {
    absl::StatusOr<Shape> data = DecodeShape(ctx.attrs(), "data_shape");
    if (!data.ok()) return ctx.Error(std::string(data.status().message()));
    ctx.set_output(0, ctx.dtype(0), *data);
    return absl::OkStatus();
  };
  s.cost = [](const CostContext& c) {
    return OpCost{static_cast<double>(c.InNumel(0)), c.IoBytes()};
  };
  return s;
}());

}  // namespace
}  // namespace quilt::ops
