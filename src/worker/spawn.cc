#include "src/worker/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/match.h"

namespace quilt {

absl::StatusOr<pid_t> SpawnChild(std::vector<std::string> argv, const std::string& log_path,
                                 int stdout_fd) {
  std::vector<char*> args;
  for (std::string& arg : argv) args.push_back(arg.data());
  args.push_back(nullptr);
  const char* log = log_path.c_str();
  static constexpr char kExecFailed[] = "quilt-executor: cannot run the executor binary\n";
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(std::string("fork: ") + strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    const int err = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (err >= 0) dup2(err, STDERR_FILENO);
    dup2(stdout_fd >= 0 ? stdout_fd : err, STDOUT_FILENO);
    execv(args[0], args.data());
    if (write(STDERR_FILENO, kExecFailed, sizeof(kExecFailed) - 1) < 0) _exit(127);
    _exit(127);
  }
  setpgid(pid, pid);  // (also here: signals to the group may come before the child runs)
  return pid;
}

std::string LastExecutorError(const std::string& log_path) {
  std::ifstream in(log_path);
  std::string line, last, error;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    last = line;
    if (absl::StartsWith(line, "quilt-executor: ")) error = line.substr(strlen("quilt-executor: "));
  }
  return error.empty() ? last : error;
}

}  // namespace quilt
