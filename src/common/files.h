// Small file helpers: whole-file read, and atomic write (temp file + rename),
// so readers never see a partial file.
#ifndef QUILT_SRC_COMMON_FILES_H_
#define QUILT_SRC_COMMON_FILES_H_

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace quilt {

// Errors: NOT_FOUND / PERMISSION_DENIED / UNAVAILABLE with the path named;
// INVALID_ARGUMENT for a directory, or a file that is not a regular one
// (a pipe, a device) giving more than 256 MiB.
absl::StatusOr<std::string> ReadFile(const std::string& path);
absl::Status WriteFileAtomically(const std::string& path, const std::string& contents);
// The same with the contents written by `write` to the open temporary
// file's descriptor (large contents need not be built in memory first).
absl::Status WriteFileAtomicallyWith(const std::string& path,
                                     const std::function<absl::Status(int fd)>& write);
// Writes all `size` bytes at `data` to `fd` (short writes and EINTR
// retried); errors name `path`.
absl::Status WriteAll(int fd, const void* data, size_t size, const std::string& path);
// Whether a file could be written at `path` (before long work whose result
// goes there): not empty, not a directory, in a directory this process may
// write in. Errors: INVALID_ARGUMENT, NOT_FOUND, PERMISSION_DENIED, with the
// path named.
absl::Status CheckWritablePath(const std::string& path);
// Output files that are none of the inputs and not each other (compared as
// canonical paths): each a (flag, path) pair; empty paths are skipped.
// INVALID_ARGUMENT naming both flags, so that a command never writes over
// what it reads or writes twice.
absl::Status CheckOutputsApart(const std::vector<std::pair<std::string, std::string>>& outputs,
                               const std::vector<std::pair<std::string, std::string>>& inputs);
// Creates `dir` if missing and checks that a file can be made in it (a
// read-only mount fails here, not at the first real write). The message is
// the cause alone: FAILED_PRECONDITION when the directory cannot be
// created (or is no directory), UNAVAILABLE when nothing can be written in
// it.
absl::Status MakeWritableDir(const std::string& dir);

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_FILES_H_
