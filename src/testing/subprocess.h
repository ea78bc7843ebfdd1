// Real child processes for integration tests: start a binary with arguments,
// its output going to a log file; signal it; wait for it with a timeout;
// run a command to completion and capture its stdout. Children are killed
// (SIGKILL) when the object goes away, so a failing test leaves nothing
// behind.
#ifndef QUILT_SRC_TESTING_SUBPROCESS_H_
#define QUILT_SRC_TESTING_SUBPROCESS_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace quilt::testing {

class Subprocess {
 public:
  // Starts argv[0] with stdout and stderr appended to `log_path`.
  static absl::StatusOr<Subprocess> Start(const std::vector<std::string>& argv,
                                          const std::string& log_path);
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  ~Subprocess();

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }
  void Signal(int sig);
  // Waits up to `timeout`; the exit status (as from waitpid) or nullopt.
  std::optional<int> Wait(absl::Duration timeout);

 private:
  Subprocess() = default;
  pid_t pid_ = -1;
};

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs argv to completion (killed after `timeout`) and captures its output.
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout = absl::Seconds(30));

// Path of a binary in the test's runfiles, e.g. "src/cli/quiltctl".
std::string RunfilePath(const std::string& workspace_relative);

}  // namespace quilt::testing

#endif  // QUILT_SRC_TESTING_SUBPROCESS_H_
