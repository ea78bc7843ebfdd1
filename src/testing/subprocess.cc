#include "src/testing/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

extern char** environ;

namespace quilt::testing {
namespace {

absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, int out_fd, int err_fd) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_fd, STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Children start with default signal dispositions and an empty mask.
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("cannot start ", argv[0], ": ", std::strerror(rc)));
  }
  return pid;
}

std::optional<int> WaitPid(pid_t pid, absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  for (;;) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0) return std::nullopt;
    if (absl::Now() >= end) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

}  // namespace

absl::StatusOr<Subprocess> Subprocess::Start(const std::vector<std::string>& argv,
                                             const std::string& log_path) {
  int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError("cannot open " + log_path);
  absl::StatusOr<pid_t> pid = Spawn(argv, fd, fd);
  close(fd);
  if (!pid.ok()) return pid.status();
  Subprocess p;
  p.pid_ = *pid;
  return p;
}

Subprocess::Subprocess(Subprocess&& other) noexcept : pid_(other.pid_) { other.pid_ = -1; }

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      WaitPid(pid_, absl::Seconds(5));
    }
    pid_ = other.pid_;
    other.pid_ = -1;
  }
  return *this;
}

Subprocess::~Subprocess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    WaitPid(pid_, absl::Seconds(5));
  }
}

void Subprocess::Signal(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

std::optional<int> Subprocess::Wait(absl::Duration timeout) {
  if (pid_ <= 0) return std::nullopt;
  std::optional<int> status = WaitPid(pid_, timeout);
  if (status.has_value()) pid_ = -1;
  return status;
}

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout) {
  char out_path[] = "/tmp/quilt-cmd-out-XXXXXX";
  char err_path[] = "/tmp/quilt-cmd-err-XXXXXX";
  int out_fd = mkstemp(out_path);
  int err_fd = mkstemp(err_path);
  if (out_fd < 0 || err_fd < 0) return absl::InternalError("mkstemp failed");
  absl::StatusOr<pid_t> pid = Spawn(argv, out_fd, err_fd);
  close(out_fd);
  close(err_fd);
  CommandResult result;
  if (pid.ok()) {
    std::optional<int> status = WaitPid(*pid, timeout);
    if (!status.has_value()) {
      kill(*pid, SIGKILL);
      WaitPid(*pid, absl::Seconds(5));
      result.exit_code = -1;
    } else {
      result.exit_code = WIFEXITED(*status) ? WEXITSTATUS(*status) : 128 + WTERMSIG(*status);
    }
  }
  auto slurp = [](const char* path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  result.out = slurp(out_path);
  result.err = slurp(err_path);
  unlink(out_path);
  unlink(err_path);
  if (!pid.ok()) return pid.status();
  return result;
}

std::string RunfilePath(const std::string& workspace_relative) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr) return workspace_relative;
  return absl::StrCat(srcdir, "/", workspace ? workspace : "quilt", "/", workspace_relative);
}

}  // namespace quilt::testing
