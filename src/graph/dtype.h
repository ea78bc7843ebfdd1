// Element types of tensors and their sizes; conversion to and from the API
// enum.
#ifndef QUILT_SRC_GRAPH_DTYPE_H_
#define QUILT_SRC_GRAPH_DTYPE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "proto/quilt/v1/graph.pb.h"

namespace quilt {

enum class DType : uint8_t { kInvalid, kF32, kF16, kBF16, kI64, kI32, kBool };

// Bytes per element (0 for kInvalid).
int64_t DTypeSize(DType t);
// "f32", "i64", ...
const char* DTypeName(DType t);
bool IsFloat(DType t);

quilt::v1::DataType ToProto(DType t);
// Errors: INVALID_ARGUMENT for DATA_TYPE_UNSPECIFIED / unknown values.
absl::StatusOr<DType> FromProto(quilt::v1::DataType t);

}  // namespace quilt

#endif  // QUILT_SRC_GRAPH_DTYPE_H_
