#include "src/graph/onnx/transposed_copies.h"

#include "absl/strings/match.h"
#include "src/common/status.h"

namespace quilt {
namespace {

bool IsTransposeOf(const Tensor& copy, const Tensor& w) {
  const int64_t rows = w.dim(0), cols = w.dim(1);
  if (copy.dim(0) != cols || copy.dim(1) != rows) return false;
  const float* a = copy.f32();
  const float* b = w.f32();
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      if (a[j * rows + i] != b[i * cols + j]) return false;
    }
  }
  return true;
}

// A float matrix with at least two distinct values (equal-valued ones, as
// zero-initialized weights, would match any other of their shape).
bool Matrix(const Tensor& t) {
  if (t.dtype() != DType::kF32 || t.rank() != 2 || t.numel() < 2) return false;
  for (int64_t i = 1; i < t.numel(); ++i) {
    if (t.f32()[i] != t.f32()[0]) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<Tensor> TransposedMatrix(const Tensor& w) {
  if (w.dtype() != DType::kF32 || w.rank() != 2) {
    return absl::InvalidArgumentError("a transpose of " + w.TypeString() + " (not a float matrix)");
  }
  const int64_t rows = w.dim(0), cols = w.dim(1);
  ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(DType::kF32, {cols, rows}));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) t.f32()[j * rows + i] = w.f32()[i * cols + j];
  }
  return t;
}

std::map<std::string, std::string> TransposedCopies(
    const std::map<std::string, Tensor>& initializers) {
  std::map<std::string, std::string> out;
  for (const auto& [copy, c] : initializers) {
    if (!absl::StartsWith(copy, "onnx::") || !Matrix(c)) continue;
    for (const auto& [name, w] : initializers) {
      if (absl::StartsWith(name, "onnx::") || !Matrix(w) || !IsTransposeOf(c, w)) continue;
      out[copy] = name;
      break;
    }
  }
  return out;
}

}  // namespace quilt
