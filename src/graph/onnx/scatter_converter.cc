// ScatterND of constants folds: slice assignment into a tensor built in
// `forward` from fixed shapes (Swin's shifted-window attention mask,
// `mask[h, w] = count`) exports as ScatterND of constants. Scattering into
// or from data (the inputs, parameters) is refused: it is not built.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/common/status.h"
#include "src/graph/onnx/converter_parts.h"

namespace quilt::onnx_import {
namespace {

// out[at] = out[at] ∘ v for the node's reduction, in T.
template <typename T>
void Combine(const std::string& reduction, T v, T* out) {
  if (reduction == "add") {
    *out += v;
  } else if (reduction == "mul") {
    *out *= v;
  } else if (reduction == "max") {
    *out = std::max(*out, v);
  } else if (reduction == "min") {
    *out = std::min(*out, v);
  } else {
    *out = v;
  }
}

}  // namespace

absl::Status ScatterND(ImportContext& ctx, const Node& node) {
  const Tensor* data = ctx.ConstantInput(node, 0);
  const Tensor* indices = ctx.ConstantInput(node, 1);
  const Tensor* updates = ctx.ConstantInput(node, 2);
  for (int i = 0; i < 3; ++i) {
    if (ctx.ConstantInput(node, i) == nullptr || ctx.IsParameterInitializer(node, i)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ScatterND: input ", i, " ('", node.input(i),
          "') is computed from the model's inputs or parameters; only a ScatterND of constants "
          "(a fixed mask built in forward) is supported"));
    }
  }
  const std::string reduction = AttrString(node, "reduction", "none");
  if (reduction != "none" && reduction != "add" && reduction != "mul" && reduction != "max" &&
      reduction != "min") {
    return absl::InvalidArgumentError(
        absl::StrCat("ScatterND: reduction \"", reduction, "\" (none, add, mul, max or min)"));
  }
  if (indices->dtype() != DType::kI64 || indices->rank() < 1) {
    return absl::InvalidArgumentError("ScatterND: indices must be int64 of rank 1 or more");
  }
  if (updates->dtype() != data->dtype()) {
    return absl::InvalidArgumentError(absl::StrCat("ScatterND: updates of ", updates->TypeString(),
                                                   " into data of ", data->TypeString()));
  }
  if (reduction != "none" && data->dtype() != DType::kF32 && data->dtype() != DType::kI64) {
    return absl::InvalidArgumentError(
        absl::StrCat("ScatterND: reduction \"", reduction, "\" of ", data->TypeString()));
  }
  const int k = static_cast<int>(indices->dim(indices->rank() - 1));
  if (k < 1 || k > data->rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ScatterND: indices of ", k, " coordinates into data of rank ", data->rank()));
  }
  // updates = indices.shape[:-1] + data.shape[k:].
  std::vector<int64_t> want(indices->dims().begin(), indices->dims().end() - 1);
  want.insert(want.end(), data->dims().begin() + k, data->dims().end());
  if (updates->dims() != want) {
    return absl::InvalidArgumentError(absl::StrCat("ScatterND: updates ", updates->TypeString(),
                                                   " where indices and data call for [",
                                                   absl::StrJoin(want, ","), "]"));
  }
  int64_t slice = 1;  // elements each index writes
  for (int d = k; d < data->rank(); ++d) slice *= data->dim(d);
  Tensor out = data->Clone();
  const size_t esize = DTypeSize(data->dtype());
  const int64_t count = indices->numel() / k;
  for (int64_t i = 0; i < count; ++i) {
    int64_t offset = 0;
    for (int j = 0; j < k; ++j) {
      int64_t idx = indices->i64()[i * k + j];
      const int64_t extent = data->dim(j);
      if (idx < 0) idx += extent;
      if (idx < 0 || idx >= extent) {
        return absl::InvalidArgumentError(
            absl::StrCat("ScatterND: index ", indices->i64()[i * k + j], " out of range for dim ",
                         j, " of extent ", extent));
      }
      offset = offset * extent + idx;
    }
    offset *= slice;
    if (reduction == "none") {
      std::memcpy(static_cast<char*>(out.raw()) + offset * esize,
                  static_cast<const char*>(updates->raw()) + i * slice * esize, slice * esize);
      continue;
    }
    for (int64_t e = 0; e < slice; ++e) {
      if (data->dtype() == DType::kF32) {
        Combine(reduction, updates->f32()[i * slice + e], &out.f32()[offset + e]);
      } else {
        Combine(reduction, updates->i64()[i * slice + e], &out.i64()[offset + e]);
      }
    }
  }
  ctx.SetConstant(node.output(0), std::move(out));
  return absl::OkStatus();
}

}  // namespace quilt::onnx_import
