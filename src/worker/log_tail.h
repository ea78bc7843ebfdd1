// The end of a text file (a job's executor log, for GetJobLogs): its last
// lines within its last bytes, as valid UTF-8 (other bytes become '?', so
// that the text travels in a protobuf string).
#ifndef QUILT_SRC_WORKER_LOG_TAIL_H_
#define QUILT_SRC_WORKER_LOG_TAIL_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace quilt {

struct LogTail {
  std::string text;
  bool truncated = false;  // earlier lines left out
};

// The last `lines` lines of `path` (a last line without a newline counts)
// found in its last `max_bytes` bytes; a line cut by that limit is left
// out, unless no other line is in them (its end is kept). Errors: NOT_FOUND (no such file),
// FAILED_PRECONDITION (not a regular file), UNAVAILABLE (unreadable), each naming the path.
absl::StatusOr<LogTail> ReadLogTail(const std::string& path, int lines, size_t max_bytes);

}  // namespace quilt

#endif  // QUILT_SRC_WORKER_LOG_TAIL_H_
