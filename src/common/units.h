// Byte counts for people: binary units, one decimal ("16.0GiB", "62.8KiB",
// "512B"), shared by the CLI's tables and the messages of libraries.
#ifndef QUILT_SRC_COMMON_UNITS_H_
#define QUILT_SRC_COMMON_UNITS_H_

#include <cstdint>
#include <string>

namespace quilt {

// 17179869184 → "16.0GiB".
std::string HumanBytes(int64_t bytes);

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_UNITS_H_
