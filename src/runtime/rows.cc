#include "src/runtime/rows.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/common/status.h"

namespace quilt {
namespace {

// outer × rows × inner elements around `axis`.
struct Layout {
  int64_t outer = 1, rows = 1, inner = 1;
};

Layout LayoutOf(const Tensor& t, int axis) {
  Layout l;
  for (int i = 0; i < axis; ++i) l.outer *= t.dim(i);
  l.rows = t.rank() == 0 ? 1 : t.dim(axis);
  for (int i = axis + 1; i < t.rank(); ++i) l.inner *= t.dim(i);
  return l;
}

}  // namespace

absl::StatusOr<Tensor> SliceRows(const Tensor& t, int axis, int64_t begin, int64_t end) {
  if (axis < 0 || (t.rank() > 0 && axis >= t.rank()) || begin < 0 || end < begin ||
      end > (t.rank() == 0 ? 1 : t.dim(axis))) {
    return absl::InvalidArgumentError(absl::StrCat("rows [", begin, ", ", end, ") of axis ", axis,
                                                   " are outside a tensor ", t.TypeString()));
  }
  const Layout l = LayoutOf(t, axis);
  if (t.rank() == 0 || (begin == 0 && end == l.rows)) return t;
  std::vector<int64_t> dims = t.dims();
  dims[axis] = end - begin;
  ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(t.dtype(), dims));
  const int64_t es = DTypeSize(t.dtype());
  const int64_t block = (end - begin) * l.inner * es;
  const auto* src = static_cast<const uint8_t*>(t.raw());
  auto* dst = static_cast<uint8_t*>(out.raw());
  for (int64_t o = 0; o < l.outer; ++o) {
    std::memcpy(dst + o * block, src + (o * l.rows + begin) * l.inner * es, block);
  }
  return out;
}

absl::Status WriteRows(Tensor* dst, int axis, int64_t at, const Tensor& src) {
  if (dst->dtype() != src.dtype() || dst->rank() != src.rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write ", src.TypeString(), " into ", dst->TypeString()));
  }
  if (dst->rank() == 0) {
    std::memcpy(dst->raw(), src.raw(), src.bytes());
    return absl::OkStatus();
  }
  for (int i = 0; i < dst->rank(); ++i) {
    if (i != axis && dst->dim(i) != src.dim(i)) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot write ", src.TypeString(), " into ", dst->TypeString()));
    }
  }
  const Layout d = LayoutOf(*dst, axis), s = LayoutOf(src, axis);
  if (at < 0 || at + s.rows > d.rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("rows [", at, ", ", at + s.rows, ") are outside ", dst->TypeString()));
  }
  const int64_t es = DTypeSize(src.dtype());
  const int64_t block = s.rows * s.inner * es;
  const auto* from = static_cast<const uint8_t*>(src.raw());
  auto* to = static_cast<uint8_t*>(dst->raw());
  for (int64_t o = 0; o < d.outer; ++o) {
    std::memcpy(to + (o * d.rows + at) * d.inner * es, from + o * block, block);
  }
  return absl::OkStatus();
}

}  // namespace quilt
