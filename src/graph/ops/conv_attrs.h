// Parsed attributes of 2-D convolution and pooling ops (ONNX conventions:
// pads = [top, left, bottom, right]), shared by op definitions and kernels.
#ifndef QUILT_SRC_GRAPH_OPS_CONV_ATTRS_H_
#define QUILT_SRC_GRAPH_OPS_CONV_ATTRS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "src/graph/attrs.h"

namespace quilt::ops {

struct Window2D {
  int64_t kh = 1, kw = 1;
  int64_t sh = 1, sw = 1;
  int64_t pt = 0, pl = 0, pb = 0, pr = 0;
  int64_t dh = 1, dw = 1;
  int64_t group = 1;
  bool ceil_mode = false;
  bool count_include_pad = false;

  // Output extent of a spatial dim (floor or ceil mode).
  int64_t OutH(int64_t h) const;
  int64_t OutW(int64_t w) const;
};

// From attributes; kernel extents from `kernel_shape` or, for Conv, from the
// weight (`weight_kh`, `weight_kw` > 0). Errors: INVALID_ARGUMENT.
absl::StatusOr<Window2D> ParseWindow(const Attrs& attrs, int64_t weight_kh = 0,
                                     int64_t weight_kw = 0);

}  // namespace quilt::ops

#endif  // QUILT_SRC_GRAPH_OPS_CONV_ATTRS_H_
