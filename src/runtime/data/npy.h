// NumPy .npy files: reading (f32, f64 → f32, i64, i32 → i64; C order,
// little-endian, format versions 1–3) and writing (f32, i64). Errors name
// the file and what is wrong with it.
#ifndef QUILT_SRC_RUNTIME_DATA_NPY_H_
#define QUILT_SRC_RUNTIME_DATA_NPY_H_

#include <string>

#include "absl/status/statusor.h"
#include "src/graph/tensor.h"

namespace quilt {

// Errors: NOT_FOUND (no file), INVALID_ARGUMENT (not a supported .npy).
absl::StatusOr<Tensor> ReadNpy(const std::string& path);
// Parses .npy bytes; `name` is used in errors.
absl::StatusOr<Tensor> ParseNpy(const std::string& bytes, const std::string& name);
absl::Status WriteNpy(const std::string& path, const Tensor& t);

}  // namespace quilt

#endif  // QUILT_SRC_RUNTIME_DATA_NPY_H_
