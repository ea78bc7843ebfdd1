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
  in.seekg(static_cast<std::streamoff>(start));
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  data.resize(static_cast<size_t>(in.gcount()));
  return data;
}

}  // namespace

absl::StatusOr<LogTail> ReadLogTail(const std::string& path, int lines, size_t max_bytes) {
  std::ifstream in;
  size_t size = 0;
  if (absl::Status s = Open(path, &in, &size); !s.ok()) return s;
  const size_t start = size > max_bytes ? size - max_bytes : 0;
  const std::string data = ReadAt(in, start, size - start);
  LogTail tail;
  tail.end_offset = static_cast<int64_t>(start + data.size());
  size_t from = 0;
  if (start > 0) {
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
  size_t begin = from;
  if (starts.size() > keep) {
    tail.truncated = true;
    begin = keep == 0 ? data.size() : starts[starts.size() - keep];
  }
  tail.text = ToUtf8(std::string_view(data).substr(begin));
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
