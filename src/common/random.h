// Random identifiers: worker incarnations and job ids. Drawn from the OS
// entropy source, never zero.
#ifndef QUILT_SRC_COMMON_RANDOM_H_
#define QUILT_SRC_COMMON_RANDOM_H_

#include <cstdint>
#include <string>

namespace quilt {

// A non-zero random 64-bit value.
uint64_t RandomNonZeroU64();

// `prefix` followed by `hex_digits` random hex digits, e.g. "job-3fa9c2d1".
std::string RandomId(const std::string& prefix, int hex_digits = 8);

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_RANDOM_H_
