#include "src/graph/shape.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace quilt {

Shape Shape::Fixed(const std::vector<int64_t>& dims) {
  std::vector<Dim> d;
  d.reserve(dims.size());
  for (int64_t v : dims) d.push_back(Dim::Fixed(v));
  return Shape(std::move(d));
}

int Shape::BatchAxis() const {
  for (int i = 0; i < rank(); ++i) {
    if (dims_[i].batch) return i;
  }
  return -1;
}

int64_t Shape::Coeff() const {
  int64_t c = 1;
  for (const Dim& d : dims_) c *= d.value;
  return c;
}

std::vector<int64_t> Shape::Concrete(int64_t batch_size) const {
  std::vector<int64_t> out;
  out.reserve(dims_.size());
  for (const Dim& d : dims_) out.push_back(d.Concrete(batch_size));
  return out;
}

int64_t Shape::NumElements(int64_t batch_size) const {
  int64_t n = 1;
  for (const Dim& d : dims_) n *= d.Concrete(batch_size);
  return n;
}

std::string Shape::ToString() const {
  std::vector<std::string> parts;
  for (const Dim& d : dims_) {
    if (!d.batch) {
      parts.push_back(absl::StrCat(d.value));
    } else {
      parts.push_back(d.value == 1 ? "B" : absl::StrCat(d.value, "B"));
    }
  }
  return absl::StrCat("[", absl::StrJoin(parts, ","), "]");
}

absl::StatusOr<int64_t> CheckedNumElements(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("negative dimension ", d));
    if (d != 0 && n > INT64_MAX / d) {
      return absl::InvalidArgumentError("tensor size overflows 64 bits");
    }
    n *= d;
  }
  return n;
}

absl::StatusOr<int> NormalizeAxis(int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("axis ", axis, " is out of range for rank ", rank));
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

}  // namespace quilt
