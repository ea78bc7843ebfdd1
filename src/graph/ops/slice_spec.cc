#include "src/graph/ops/slice_spec.h"

#include <algorithm>
#include <cstdint>

#include "src/common/status.h"

namespace quilt::ops {

absl::StatusOr<SliceSpec> ResolveSlice(const Attrs& attrs, const Shape& in) {
  const std::vector<int64_t> starts = attrs.Ints("starts"), ends = attrs.Ints("ends");
  std::vector<int64_t> axes = attrs.Ints("axes"), steps = attrs.Ints("steps");
  if (starts.size() != ends.size()) {
    return absl::InvalidArgumentError("starts and ends differ in length");
  }
  if (axes.empty()) {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size()) {
    return absl::InvalidArgumentError("axes, steps, starts and ends differ in length");
  }
  SliceSpec s;
  s.start.assign(in.rank(), 0);
  s.step.assign(in.rank(), 1);
  s.count.resize(in.rank());
  for (int i = 0; i < in.rank(); ++i) s.count[i] = in.dim(i).value;
  for (size_t k = 0; k < axes.size(); ++k) {
    ASSIGN_OR_RETURN(int ax, NormalizeAxis(axes[k], in.rank()));
    const int64_t step = steps[k];
    if (step == 0) return absl::InvalidArgumentError("slice step 0");
    if (in.dim(ax).batch) {
      if (starts[k] == 0 && ends[k] >= INT32_MAX && step == 1) continue;  // the whole batch
      return absl::InvalidArgumentError("slicing the batch dimension is not supported");
    }
    const int64_t n = in.dim(ax).value;
    auto clamp = [](int64_t v, int64_t lo, int64_t hi) { return std::max(lo, std::min(v, hi)); };
    int64_t st = starts[k] < 0 ? starts[k] + n : starts[k];
    int64_t en = ends[k] < 0 ? ends[k] + n : ends[k];
    if (step > 0) {
      st = clamp(st, 0, n);
      en = clamp(en, 0, n);
      s.count[ax] = en > st ? (en - st + step - 1) / step : 0;
    } else {
      st = clamp(st, -1, n - 1);
      en = clamp(en, -1, n - 1);
      s.count[ax] = st > en ? (st - en + (-step) - 1) / (-step) : 0;
    }
    s.start[ax] = st;
    s.step[ax] = step;
  }
  return s;
}

}  // namespace quilt::ops
