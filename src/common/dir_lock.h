// An exclusive lock on a directory held by one process at a time: a lock
// file inside it, locked with flock(2) for the holder's lifetime (released
// when the process exits, however it exits) and holding the holder's pid,
// so that a second daemon refused it can name the first.
#ifndef QUILT_SRC_COMMON_DIR_LOCK_H_
#define QUILT_SRC_COMMON_DIR_LOCK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace quilt {

class DirLock {
 public:
  // Locks `dir`/`name`. `holder` names who takes it, in errors ("a
  // coordinator"). Errors: FAILED_PRECONDITION when another process holds
  // it (its pid named), UNAVAILABLE when the file cannot be opened.
  static absl::StatusOr<std::unique_ptr<DirLock>> Acquire(const std::string& dir,
                                                          const std::string& name,
                                                          const std::string& holder);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  explicit DirLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_DIR_LOCK_H_
