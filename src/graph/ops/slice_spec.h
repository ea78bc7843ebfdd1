// Slice attributes (ONNX: starts, ends, axes, steps) resolved against a
// shape: per-axis start, step and element count. Shared by the Slice op
// definition and the kernels.
#ifndef QUILT_SRC_GRAPH_OPS_SLICE_SPEC_H_
#define QUILT_SRC_GRAPH_OPS_SLICE_SPEC_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "src/graph/attrs.h"
#include "src/graph/shape.h"

namespace quilt::ops {

struct SliceSpec {
  std::vector<int64_t> start, step, count;
};

// Errors: INVALID_ARGUMENT (mismatched lists, step 0, slicing the batch).
absl::StatusOr<SliceSpec> ResolveSlice(const Attrs& attrs, const Shape& in);

}  // namespace quilt::ops

#endif  // QUILT_SRC_GRAPH_OPS_SLICE_SPEC_H_
