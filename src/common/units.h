// Byte counts and short durations for people: binary units, one decimal
// ("16.0GiB", "62.8KiB", "512B"); "850 µs", "612.9 ms", "23.28 s"; shared by
// the CLI's tables and the messages of libraries.
#ifndef QUILT_SRC_COMMON_UNITS_H_
#define QUILT_SRC_COMMON_UNITS_H_

#include <cstdint>
#include <string>

namespace quilt {

// 17179869184 → "16.0GiB".
std::string HumanBytes(int64_t bytes);
// Short durations with their unit: "850 µs", "612.9 ms", "23.28 s" ("-"
// for negative or non-finite).
std::string HumanSeconds(double seconds);

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_UNITS_H_
