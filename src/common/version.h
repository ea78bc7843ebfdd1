// Quilt's version, reported by every binary (`--version`), by workers at
// registration and by the coordinator.
#ifndef QUILT_SRC_COMMON_VERSION_H_
#define QUILT_SRC_COMMON_VERSION_H_

namespace quilt {

inline constexpr char kVersion[] = "0.1.0";

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_VERSION_H_
