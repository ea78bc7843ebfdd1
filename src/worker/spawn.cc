#include "src/worker/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "src/worker/log_tail.h"

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

namespace {

// A line that says something: a few letters, and not a frame or a rule of
// a crash's backtrace ("==== backtrace ====", " 3  /lib/libucs.so(…)",
// Abseil's "PC: @ 0x…" and "    @ 0x30  (unknown)").
bool Meaningful(const std::string& line) {
  const absl::string_view s = absl::StripLeadingAsciiWhitespace(line);
  // The executor's progress lines ("info TIME …") say what went well.
  if (absl::StartsWith(line, "info ")) return false;
  if (absl::StartsWith(s, "====") || absl::StartsWith(s, "----")) return false;
  if (absl::StartsWith(s, "@ ") || absl::StartsWith(s, "PC: @")) return false;
  if (!s.empty() && absl::ascii_isdigit(s[0])) {
    size_t i = 0;
    while (i < s.size() && absl::ascii_isdigit(s[i])) ++i;
    if (i < s.size() && s[i] == ' ') return false;  // a backtrace frame
  }
  int letters = 0;
  for (char c : s) letters += absl::ascii_isalpha(c) ? 1 : 0;
  return letters >= 3;
}

// A message UCX logged before it gave up, as "[host:pid:thread:tid]
// file.c:line  message" (its fatal errors abort the process): the message
// with its source, without the prefix. Empty for other lines.
std::string UcxMessage(const std::string& line) {
  if (!absl::StartsWith(line, "[")) return "";
  const size_t close = line.find(']');
  if (close == std::string::npos) return "";
  const absl::string_view rest =
      absl::StripLeadingAsciiWhitespace(absl::string_view(line).substr(close + 1));
  const size_t space = rest.find(' ');
  const absl::string_view source = rest.substr(0, space);
  if (!absl::StrContains(source, ".c:") || space == absl::string_view::npos) return "";
  return absl::StrCat("UCX: ", absl::StripLeadingAsciiWhitespace(rest.substr(space)), " (", source,
                      ")");
}

}  // namespace

std::string LastExecutorError(const std::string& log_path) {
  std::ifstream in(log_path);
  std::string line, last, error, ucx, caught;
  while (std::getline(in, line)) {
    // A run's first lines (the worker's marker, then the executor's "info
    // TIME rank R of N on NODE: …"): what an earlier run of the job on this
    // node wrote is not this run's reason.
    if (IsRunMarker(line)) {
      last.clear(), error.clear(), ucx.clear(), caught.clear();
      continue;
    }
    if (absl::StartsWith(line, "info ") && absl::StrContains(line, " rank ") &&
        absl::StrContains(line, " of ") && absl::StrContains(line, " on ")) {
      last.clear(), error.clear(), ucx.clear(), caught.clear();
    }
    if (!Meaningful(line)) continue;
    last = line;
    if (absl::StartsWith(line, "quilt-executor: ")) error = line.substr(strlen("quilt-executor: "));
    // A crash handler's report (UCX's: "[host:pid] Caught signal 11 (…)").
    if (absl::StrContains(line, "Caught signal")) {
      caught = line;
    } else if (std::string m = UcxMessage(line); !m.empty()) {
      ucx = std::move(m);
    }
  }
  return !error.empty() ? error : !ucx.empty() ? ucx : !caught.empty() ? caught : last;
}

}  // namespace quilt
