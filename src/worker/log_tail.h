// The end of a text file (a job's executor log, for GetJobLogs): its last
// lines within its last bytes, as valid UTF-8 (other bytes become '?', so
// that the text travels in a protobuf string); or those of one run, where
// the log holds several: the worker begins each executor's run of a job on
// its node with a line of its own (RunMarker), and what comes before the
// first such line (a log written before them) counts as a run too.
#ifndef QUILT_SRC_WORKER_LOG_TAIL_H_
#define QUILT_SRC_WORKER_LOG_TAIL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace quilt {

struct LogTail {
  std::string text;
  bool truncated = false;  // earlier lines left out
  int64_t end_offset = 0;  // the file's offset after `text`
  int run = 0;             // ReadLogRun: the run read (1 the first), of
  int runs = 0;            // this many
};

// The line (without its newline) that begins run `run` (1 the first) of
// an executor, rank `rank` of `world_size`, started at `started`, from
// step `from_step` (0: the first).
std::string RunMarker(int run, int rank, int world_size, const std::string& started,
                      int64_t from_step);

// Whether `line` (without its newline) begins a run (RunMarker's).
bool IsRunMarker(std::string_view line);

// The runs `path` holds: 0 for no file or an empty one. Errors as
// ReadLogTail's, but for NOT_FOUND.
absl::StatusOr<int> CountLogRuns(const std::string& path);

// The last `lines` lines of `path` (a last line without a newline counts)
// found in its last `max_bytes` bytes; a line cut by that limit is left
// out, unless no other line is in them (its end is kept). Errors: NOT_FOUND (no such file),
// FAILED_PRECONDITION (not a regular file), UNAVAILABLE (unreadable), each naming the path.
absl::StatusOr<LogTail> ReadLogTail(const std::string& path, int lines, size_t max_bytes);

// ReadLogTail within run `run` of `path` (1 the first; -1 the last), its
// marker line included. Errors as ReadLogTail's, and OUT_OF_RANGE where
// the log holds no such run (saying how many it holds).
absl::StatusOr<LogTail> ReadLogRun(const std::string& path, int run, int lines, size_t max_bytes);

// The whole lines of `path` from byte `offset` on, at most `max_bytes`
// (a line longer than that comes in pieces); a last line not ended yet is
// left for a later read. A file shorter than `offset` (replaced) is read
// from its start, `truncated` set. Errors as ReadLogTail's.
absl::StatusOr<LogTail> ReadLogFrom(const std::string& path, int64_t offset, size_t max_bytes);

}  // namespace quilt

#endif  // QUILT_SRC_WORKER_LOG_TAIL_H_
