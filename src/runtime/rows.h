// Rows of tensors: a slice of the batch dimension (which may be any axis)
// or of dimension 0, copied out of or written into a tensor. Distributed
// execution moves and assembles tensors by rows.
#ifndef QUILT_SRC_RUNTIME_ROWS_H_
#define QUILT_SRC_RUNTIME_ROWS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "src/graph/tensor.h"

namespace quilt {

// Rows [begin, end) of `t` along `axis`, as a new tensor. Errors:
// INVALID_ARGUMENT for an axis or range outside `t`.
absl::StatusOr<Tensor> SliceRows(const Tensor& t, int axis, int64_t begin, int64_t end);

// Writes `src` into `dst` at rows [at, at + rows of src) along `axis` (the
// other dims must match).
absl::Status WriteRows(Tensor* dst, int axis, int64_t at, const Tensor& src);

}  // namespace quilt

#endif  // QUILT_SRC_RUNTIME_ROWS_H_
