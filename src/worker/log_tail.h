// The end of a text file (a job's executor log, for GetJobLogs): its last
// lines within its last bytes, as valid UTF-8 (other bytes become '?', so
// that the text travels in a protobuf string).
#ifndef QUILT_SRC_WORKER_LOG_TAIL_H_
#define QUILT_SRC_WORKER_LOG_TAIL_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace quilt {

struct LogTail {
  std::string text;
  bool truncated = false;  // earlier lines left out
  int64_t end_offset = 0;  // the file's offset after `text`
};

// The last `lines` lines of `path` (a last line without a newline counts)
// found in its last `max_bytes` bytes; a line cut by that limit is left
// out, unless no other line is in them (its end is kept). Errors: NOT_FOUND (no such file),
// FAILED_PRECONDITION (not a regular file), UNAVAILABLE (unreadable), each naming the path.
absl::StatusOr<LogTail> ReadLogTail(const std::string& path, int lines, size_t max_bytes);

// The whole lines of `path` from byte `offset` on, at most `max_bytes`
// (a line longer than that comes in pieces); a last line not ended yet is
// left for a later read. A file shorter than `offset` (replaced) is read
// from its start, `truncated` set. Errors as ReadLogTail's.
absl::StatusOr<LogTail> ReadLogFrom(const std::string& path, int64_t offset, size_t max_bytes);

}  // namespace quilt

#endif  // QUILT_SRC_WORKER_LOG_TAIL_H_
