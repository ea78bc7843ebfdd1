// Starting a child process of the worker (an executor): it leads a process
// group of its own (signal -pid to reach whatever it started too, e.g.
// under a wrapper script), dies with the
// worker (PR_SET_PDEATHSIG), starts with an empty signal mask (the worker
// blocks termination signals in every thread), appends its stderr to
// `log_path`, and writes its stdout to `stdout_fd` (or the log when -1).
// Everything the child needs is prepared before fork.
#ifndef QUILT_SRC_WORKER_SPAWN_H_
#define QUILT_SRC_WORKER_SPAWN_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace quilt {

// The child's pid. Errors: INTERNAL when fork fails. A binary that cannot
// be executed exits with status 127 after saying so in the log.
absl::StatusOr<pid_t> SpawnChild(std::vector<std::string> argv, const std::string& log_path,
                                 int stdout_fd);

// The executor's error from its log: the last line it wrote as
// "quilt-executor: <error>", else the last message UCX logged in its own
// format (a fatal one aborts the process), else a crash handler's "Caught
// signal" line, else the last line that says something (not a backtrace's
// frames or rules).
std::string LastExecutorError(const std::string& log_path);

}  // namespace quilt

#endif  // QUILT_SRC_WORKER_SPAWN_H_
