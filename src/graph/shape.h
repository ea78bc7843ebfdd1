// Tensor shapes with a symbolic batch dimension. A Dim is either a fixed
// extent or `value × B` where B is the batch size of a run (per replica);
// at most one dim of a shape carries the batch. Shapes are instantiated with
// a concrete B for kernels and cost estimates.
#ifndef QUILT_SRC_GRAPH_SHAPE_H_
#define QUILT_SRC_GRAPH_SHAPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace quilt {

struct Dim {
  // Fixed extent, or the batch multiple when `batch` is set (>= 1).
  int64_t value = 0;
  bool batch = false;

  static Dim Fixed(int64_t v) { return Dim{v, false}; }
  static Dim Batch(int64_t multiple = 1) { return Dim{multiple, true}; }
  int64_t Concrete(int64_t batch_size) const { return batch ? value * batch_size : value; }
  bool operator==(const Dim& o) const { return value == o.value && batch == o.batch; }
  bool operator!=(const Dim& o) const { return !(*this == o); }
};

class Shape {
 public:
  Shape() = default;
  explicit Shape(std::vector<Dim> dims) : dims_(std::move(dims)) {}
  static Shape Fixed(const std::vector<int64_t>& dims);

  int rank() const { return static_cast<int>(dims_.size()); }
  const Dim& dim(int i) const { return dims_[i]; }
  Dim& dim(int i) { return dims_[i]; }
  const std::vector<Dim>& dims() const { return dims_; }
  std::vector<Dim>& dims() { return dims_; }

  // Index of the batch-carrying dim, or -1.
  int BatchAxis() const;
  bool HasBatch() const { return BatchAxis() >= 0; }
  // Product of the fixed extents and of the batch multiple: numel = Coeff × B
  // when HasBatch(), else numel = Coeff.
  int64_t Coeff() const;
  std::vector<int64_t> Concrete(int64_t batch_size) const;
  int64_t NumElements(int64_t batch_size) const;

  // "[B,3,224,224]", "[4B,10]", "[]".
  std::string ToString() const;
  bool operator==(const Shape& o) const { return dims_ == o.dims_; }
  bool operator!=(const Shape& o) const { return !(*this == o); }

 private:
  std::vector<Dim> dims_;
};

// Product of concrete dims. Errors: INVALID_ARGUMENT on a negative extent or
// int64 overflow.
absl::StatusOr<int64_t> CheckedNumElements(const std::vector<int64_t>& dims);

// Normalizes a possibly negative axis for `rank`. Errors: INVALID_ARGUMENT.
absl::StatusOr<int> NormalizeAxis(int64_t axis, int rank);

}  // namespace quilt

#endif  // QUILT_SRC_GRAPH_SHAPE_H_
