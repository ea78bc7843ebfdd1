#include "src/graph/ops/conv_attrs.h"

#include "absl/strings/str_cat.h"

namespace quilt::ops {
namespace {

int64_t OutExtent(int64_t in, int64_t k, int64_t s, int64_t p0, int64_t p1, int64_t d,
                  bool ceil_mode) {
  const int64_t span = in + p0 + p1 - d * (k - 1) - 1;
  if (span < 0) return 0;
  int64_t out = ceil_mode ? (span + s - 1) / s + 1 : span / s + 1;
  // ceil mode: the last window must start inside the input or left padding.
  if (ceil_mode && (out - 1) * s >= in + p0) --out;
  return out;
}

}  // namespace

int64_t Window2D::OutH(int64_t h) const { return OutExtent(h, kh, sh, pt, pb, dh, ceil_mode); }
int64_t Window2D::OutW(int64_t w) const { return OutExtent(w, kw, sw, pl, pr, dw, ceil_mode); }

absl::StatusOr<Window2D> ParseWindow(const Attrs& attrs, int64_t weight_kh, int64_t weight_kw) {
  Window2D w;
  std::vector<int64_t> k = attrs.Ints("kernel_shape");
  if (k.empty() && weight_kh > 0) k = {weight_kh, weight_kw};
  if (k.size() != 2) return absl::InvalidArgumentError("kernel_shape must have 2 values (2-D)");
  w.kh = k[0];
  w.kw = k[1];
  std::vector<int64_t> s = attrs.Ints("strides", {1, 1});
  std::vector<int64_t> p = attrs.Ints("pads", {0, 0, 0, 0});
  std::vector<int64_t> d = attrs.Ints("dilations", {1, 1});
  if (s.size() != 2 || p.size() != 4 || d.size() != 2) {
    return absl::InvalidArgumentError("strides, dilations need 2 values and pads 4 (2-D)");
  }
  w.sh = s[0];
  w.sw = s[1];
  w.pt = p[0];
  w.pl = p[1];
  w.pb = p[2];
  w.pr = p[3];
  w.dh = d[0];
  w.dw = d[1];
  w.group = attrs.Int("group", 1);
  w.ceil_mode = attrs.Int("ceil_mode", 0) != 0;
  w.count_include_pad = attrs.Int("count_include_pad", 0) != 0;
  if (w.kh < 1 || w.kw < 1 || w.sh < 1 || w.sw < 1 || w.dh < 1 || w.dw < 1 || w.group < 1) {
    return absl::InvalidArgumentError("kernel, stride, dilation and group must be >= 1");
  }
  if (w.pt < 0 || w.pl < 0 || w.pb < 0 || w.pr < 0) {
    return absl::InvalidArgumentError("pads must be >= 0");
  }
  if (attrs.String("auto_pad", "NOTSET") != "NOTSET") {
    return absl::InvalidArgumentError("auto_pad must be resolved to explicit pads");
  }
  return w;
}

}  // namespace quilt::ops
