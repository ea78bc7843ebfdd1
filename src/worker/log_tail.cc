#include "src/worker/log_tail.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/common/utf8.h"

namespace quilt {

namespace {

// `path` opened, and its size. Errors as ReadLogTail's.
absl::Status Open(const std::string& path, std::ifstream* in, size_t* size) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no log at ", path));
    return absl::UnavailableError(absl::StrCat("cannot read ", path, ": ", strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file"));
  }
  in->open(path, std::ios::binary);
  if (!*in) return absl::UnavailableError(absl::StrCat("cannot open ", path));
  in->seekg(0, std::ios::end);
  const std::streamoff end = in->tellg();
  if (end < 0) return absl::UnavailableError(absl::StrCat("cannot read ", path));
  *size = static_cast<size_t>(end);
  return absl::OkStatus();
}

// `n` bytes of `in` from `start`.
std::string ReadAt(std::ifstream& in, size_t start, size_t n) {
  std::string data(n, '\0');
  in.clear();  // (a read before may have reached the end)
  in.seekg(static_cast<std::streamoff>(start));
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  data.resize(static_cast<size_t>(in.gcount()));
  return data;
}

// The last `lines` lines of `in`'s bytes [begin, end), within its last
// `max_bytes` of them (as ReadLogTail).
LogTail TailOf(std::ifstream& in, size_t begin, size_t end, int lines, size_t max_bytes) {
  const size_t start = end - begin > max_bytes ? end - max_bytes : begin;
  const std::string data = ReadAt(in, start, end - start);
  LogTail tail;
  tail.end_offset = static_cast<int64_t>(start + data.size());
  size_t from = 0;
  if (start > begin) {
    // The first line began before the window: left out, unless it is all
    // the window holds (a line longer than the window: its end is shown).
    const size_t newline = data.find('\n');
    from = newline == std::string::npos || newline + 1 == data.size() ? 0 : newline + 1;
    tail.truncated = true;
  }
  // Where each line begins (a final newline ends the last line, it does
  // not begin another); the last `lines` kept.
  std::vector<size_t> starts;
  for (size_t pos = from; pos < data.size();) {
    starts.push_back(pos);
    const size_t newline = data.find('\n', pos);
    if (newline == std::string::npos) break;
    pos = newline + 1;
  }
  const size_t keep = static_cast<size_t>(std::max(lines, 0));
  size_t first = from;
  if (starts.size() > keep) {
    tail.truncated = true;
    first = keep == 0 ? data.size() : starts[starts.size() - keep];
  }
  tail.text = ToUtf8(std::string_view(data).substr(first));
  return tail;
}

constexpr char kMarker[] = "=== quilt-worker: run ";

// Where each run of `in` (`size` bytes) begins: at 0 where the file does
// not begin with a marker, and at each marker line.
std::vector<size_t> RunStarts(std::ifstream& in, size_t size) {
  std::vector<size_t> starts;
  constexpr size_t kChunk = 1 << 20;
  const size_t marker = sizeof(kMarker) - 1;
  std::string prefix;  // the current line's first bytes, up to a marker's
  size_t line_at = 0;  // where the current line begins
  bool collecting = true;
  for (size_t at = 0; at < size; at += kChunk) {
    const std::string chunk = ReadAt(in, at, std::min(kChunk, size - at));
    if (chunk.empty()) break;
    for (size_t i = 0; i < chunk.size();) {
      if (!collecting) {  // (the rest of a line that is no marker)
        const size_t newline = chunk.find('\n', i);
        if (newline == std::string::npos) break;
        i = newline;
      }
      const char c = chunk[i++];
      if (c == '\n') {
        prefix.clear();
        line_at = at + i;
        collecting = true;
        continue;
      }
      prefix.push_back(c);
      if (prefix.size() == marker) {
        if (prefix == kMarker) starts.push_back(line_at);
        collecting = false;
      }
    }
  }
  if (size > 0 && (starts.empty() || starts.front() != 0)) starts.insert(starts.begin(), 0);
  return starts;
}

}  // namespace

std::string RunMarker(int run, int rank, int world_size, const std::string& started,
                      int64_t from_step) {
  return absl::StrCat(kMarker, run, " (rank ", rank, " of ", world_size, "), started ", started,
                      from_step > 0 ? absl::StrCat(", from step ", from_step) : "", " ===");
}

bool IsRunMarker(std::string_view line) { return line.substr(0, sizeof(kMarker) - 1) == kMarker; }

absl::StatusOr<int> CountLogRuns(const std::string& path) {
  std::ifstream in;
  size_t size = 0;
  if (absl::Status s = Open(path, &in, &size); !s.ok()) {
    if (s.code() == absl::StatusCode::kNotFound) return 0;
    return s;
  }
  return static_cast<int>(RunStarts(in, size).size());
}

absl::StatusOr<LogTail> ReadLogTail(const std::string& path, int lines, size_t max_bytes) {
  std::ifstream in;
  size_t size = 0;
  if (absl::Status s = Open(path, &in, &size); !s.ok()) return s;
  return TailOf(in, 0, size, lines, max_bytes);
}

absl::StatusOr<LogTail> ReadLogRun(const std::string& path, int run, int lines, size_t max_bytes) {
  std::ifstream in;
  size_t size = 0;
  if (absl::Status s = Open(path, &in, &size); !s.ok()) return s;
  const std::vector<size_t> starts = RunStarts(in, size);
  const int runs = static_cast<int>(starts.size());
  const int pick = run == -1 ? runs : run;
  if (pick < 1 || pick > runs) {
    return absl::OutOfRangeError(absl::StrCat("the log holds ", runs, runs == 1 ? " run" : " runs",
                                              "; there is no run ", run));
  }
  const size_t end = pick < runs ? starts[pick] : size;
  LogTail tail = TailOf(in, starts[pick - 1], end, lines, max_bytes);
  tail.run = pick;
  tail.runs = runs;
  return tail;
}

absl::StatusOr<LogTail> ReadLogFrom(const std::string& path, int64_t offset, size_t max_bytes) {
  std::ifstream in;
  size_t size = 0;
  if (absl::Status s = Open(path, &in, &size); !s.ok()) return s;
  LogTail tail;
  size_t start = offset < 0 ? 0 : static_cast<size_t>(offset);
  if (start > size) {  // a new file in its place
    start = 0;
    tail.truncated = true;
  }
  std::string data = ReadAt(in, start, std::min(size - start, max_bytes));
  // Whole lines only, unless one line fills the window.
  const size_t newline = data.rfind('\n');
  if (newline != std::string::npos) {
    data.resize(newline + 1);
  } else if (data.size() < max_bytes) {
    data.clear();
  }
  tail.end_offset = static_cast<int64_t>(start + data.size());
  tail.text = ToUtf8(data);
  return tail;
}

}  // namespace quilt
