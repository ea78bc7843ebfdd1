#include "src/common/signals.h"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "absl/strings/str_cat.h"

namespace quilt {
namespace {

sigset_t DaemonSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  return set;
}

// The thread that blocked the signals, which WaitForSignal must run in
// (a signal handed on is pending on that thread alone), and its process.
std::atomic<pid_t> g_waiter{0};
std::atomic<pid_t> g_process{0};

// Runs in a thread that left the signals unblocked — one a library started
// before main (OpenBLAS's pool starts in its constructor): the signal is
// handed on to the waiting thread, where it stays pending until
// WaitForSignal takes it, instead of ending the process there. In a child
// forked before it execs (which inherits the handler, not the waiter) the
// signal does what it would by default.
void HandOn(int sig) {
  const int saved = errno;
  const pid_t waiter = g_waiter.load();
  if (waiter != 0 && getpid() == g_process.load()) {
    syscall(SYS_tgkill, g_process.load(), waiter, sig);
  } else {
    signal(sig, SIG_DFL);
    raise(sig);
  }
  errno = saved;
}

}  // namespace

absl::Status BlockTerminationSignals() {
  sigset_t set = DaemonSignals();
  if (int err = pthread_sigmask(SIG_BLOCK, &set, nullptr); err != 0) {
    return absl::InternalError(absl::StrCat("cannot block signals: ", std::strerror(err)));
  }
  g_process.store(getpid());
  g_waiter.store(static_cast<pid_t>(syscall(SYS_gettid)));
  struct sigaction sa = {};
  sa.sa_handler = HandOn;
  sa.sa_mask = set;  // (one hand-on at a time)
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    if (sigaction(sig, &sa, nullptr) != 0) {
      return absl::InternalError(
          absl::StrCat("cannot handle signal ", sig, ": ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

DaemonSignal WaitForSignal(absl::Duration timeout) {
  sigset_t set = DaemonSignals();
  timespec ts = absl::ToTimespec(timeout);
  int sig = sigtimedwait(&set, nullptr, &ts);
  if (sig == SIGTERM || sig == SIGINT) return DaemonSignal::kTerminate;
  if (sig == SIGHUP) return DaemonSignal::kReload;
  return DaemonSignal::kNone;
}

}  // namespace quilt
