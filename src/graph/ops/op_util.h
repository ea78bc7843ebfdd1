// Helpers shared by op definitions: symbolic broadcasting, common inference
// patterns, and gradient-building shortcuts.
#ifndef QUILT_SRC_GRAPH_OPS_OP_UTIL_H_
#define QUILT_SRC_GRAPH_OPS_OP_UTIL_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/graph/graph_builder.h"
#include "src/graph/op_registry.h"

namespace quilt::ops {

// Numpy-style broadcast of symbolic shapes. Errors: INVALID_ARGUMENT
// describing the incompatible dims.
absl::StatusOr<Shape> Broadcast(const Shape& a, const Shape& b);

// Output 0 = input 0's type.
absl::Status InferSameAsInput(InferContext& ctx);
// Every input float and of one dtype (for element-wise ops).
absl::Status RequireFloatInputs(InferContext& ctx);

// Gradient that flows into an input of shape `target` from `dy` (shape of
// the broadcast output): dy summed over the broadcast dims.
absl::StatusOr<std::string> SumTo(GradContext& g, const std::string& dy, const Shape& target);

// Shorthands that add one op through the builder.
absl::StatusOr<std::string> Unary(GradContext& g, const std::string& type, const std::string& x,
                                  Attrs attrs = {});
absl::StatusOr<std::string> Binary(GradContext& g, const std::string& type, const std::string& a,
                                   const std::string& b, Attrs attrs = {});

// Shape of a tensor known to the builder.
absl::StatusOr<Shape> ShapeOf(GradContext& g, const std::string& tensor);

// Cost of an element-wise op: `flops_per_element` per output element.
CostFn ElementwiseCost(double flops_per_element);

}  // namespace quilt::ops

#endif  // QUILT_SRC_GRAPH_OPS_OP_UTIL_H_
