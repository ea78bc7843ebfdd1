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

}  // namespace quilt
