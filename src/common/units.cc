#include "src/common/units.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace quilt {

std::string HumanBytes(int64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (std::fabs(v) >= 1024 && unit < 5) {
    v /= 1024;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(bytes, "B");
  return absl::StrFormat("%.1f%s", v, kUnits[unit]);
}

std::string HumanSeconds(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  if (seconds < 1e-9) return "0 µs";  // (rounding left over from sums of times)
  if (seconds < 1e-3) return absl::StrFormat("%.3g µs", seconds * 1e6);
  if (seconds < 10) return absl::StrFormat("%.4g ms", seconds * 1e3);
  return absl::StrFormat("%.2f s", seconds);
}

}  // namespace quilt
