#include "src/common/random.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_format.h"

namespace quilt {

uint64_t RandomNonZeroU64() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0) v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return v;
}

std::string RandomId(const std::string& prefix, int hex_digits) {
  std::string hex = absl::StrFormat("%016x", RandomNonZeroU64());
  return prefix + hex.substr(16 - std::min(hex_digits, 16));
}

}  // namespace quilt
