#include "src/common/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace quilt {
namespace {

absl::Status ErrnoStatus(int err, const std::string& what) {
  std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::UnavailableError(msg);
}

}  // namespace

absl::Status CheckWritablePath(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("an empty path names no file");
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(path + " is a directory, not a file");
  }
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) {
    // (A new file is renamed over it: a device or a pipe would be replaced.)
    return absl::InvalidArgumentError(path +
                                      " is not a regular file (a device, a pipe or a socket)");
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec)) {
    return ErrnoStatus(ENOTDIR, absl::StrCat("cannot write ", path, " (", dir, ")"));
  }
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    return ErrnoStatus(errno, absl::StrCat("cannot write ", path, " (directory ", dir, ")"));
  }
  if (access(path.c_str(), F_OK) == 0 && access(path.c_str(), W_OK) != 0) {
    return ErrnoStatus(errno, "cannot write " + path);
  }
  return absl::OkStatus();
}

absl::Status MakeWritableDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::FailedPreconditionError(ec.message());
  if (!std::filesystem::is_directory(dir, ec))
    return absl::FailedPreconditionError("not a directory");
  const std::string probe = absl::StrCat(dir, "/.quilt-write-check-", getpid());
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::UnavailableError(std::strerror(errno));
  close(fd);
  unlink(probe.c_str());
  return absl::OkStatus();
}

absl::Status CheckOutputsApart(const std::vector<std::pair<std::string, std::string>>& outputs,
                               const std::vector<std::pair<std::string, std::string>>& inputs) {
  auto canonical = [](const std::string& path) {
    std::error_code ec;
    const std::filesystem::path c = std::filesystem::weakly_canonical(path, ec);
    return ec ? path : c.string();
  };
  std::vector<std::pair<std::string, std::string>> seen;  // (canonical, flag)
  for (const auto& [flag, path] : inputs) {
    if (!path.empty()) seen.push_back({canonical(path), flag});
  }
  for (const auto& [flag, path] : outputs) {
    if (path.empty()) continue;
    const std::string c = canonical(path);
    for (const auto& [other, other_flag] : seen) {
      if (other == c) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, " ", path, " is also ", other_flag, ": it would be written over"));
      }
    }
    seen.push_back({c, flag});
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(path + " is a directory, not a file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoStatus(errno, "cannot read " + path);
  if (!std::filesystem::is_regular_file(path, ec)) {
    // A pipe (a shell's process substitution) is read to its end, up to a
    // bound: a device like /dev/zero has none.
    constexpr size_t kMaxStreamBytes = size_t{256} << 20;
    std::string out;
    char chunk[1 << 16];
    while (in.read(chunk, sizeof(chunk)) || in.gcount() > 0) {
      out.append(chunk, static_cast<size_t>(in.gcount()));
      if (out.size() > kMaxStreamBytes) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, " is not a regular file and gives more than ", kMaxStreamBytes >> 20,
                         " MiB (a device?)"));
      }
    }
    if (in.bad()) return ErrnoStatus(errno, "error reading " + path);
    return out;
  }
  // A regular file is read once into a string of its size (a stream
  // buffer would grow by copies, then be copied out: three times the bytes
  // of a model file of hundreds of MB).
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  if (size < 0 || !in) return ErrnoStatus(errno, "cannot read " + path);
  std::string out(static_cast<size_t>(size), '\0');
  in.read(out.data(), size);
  if (in.gcount() != size) {
    return absl::DataLossError(absl::StrCat("error reading ", path, ": got ", in.gcount(),
                                            " of its ", size, " bytes (it changed while read?)"));
  }
  // (It may have grown since: what was there when it was measured is read.)
  return out;
}

absl::Status WriteAll(int fd, const void* data, size_t size, const std::string& path) {
  const char* bytes = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    ssize_t n = write(fd, bytes + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "cannot write " + path);
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  return WriteFileAtomicallyWith(
      path, [&](int fd) { return WriteAll(fd, contents.data(), contents.size(), path); });
}

absl::Status WriteFileAtomicallyWith(const std::string& path,
                                     const std::function<absl::Status(int fd)>& write) {
  {
    // The new file is renamed over the old: never over a device or a pipe.
    std::error_code ec;
    if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) {
      return absl::InvalidArgumentError(path +
                                        " is not a regular file (a device, a pipe or a socket)");
    }
  }
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "cannot write " + path + " (creating " + tmp + ")");
  if (absl::Status w = write(fd); !w.ok()) {
    close(fd);
    unlink(tmp.c_str());
    return w;
  }
  // (Closed whether or not the flush worked: no descriptor is left open.)
  const int synced = fsync(fd) == 0 ? 0 : errno;
  const int closed = close(fd) == 0 ? 0 : errno;
  if (synced != 0 || closed != 0) {
    unlink(tmp.c_str());
    return ErrnoStatus(synced != 0 ? synced : closed, "cannot flush " + tmp);
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    unlink(tmp.c_str());
    return ErrnoStatus(err, "cannot rename " + tmp + " to " + path);
  }
  return absl::OkStatus();
}

}  // namespace quilt
