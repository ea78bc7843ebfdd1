#include "src/common/signals.h"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <ctime>

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

// The thread that blocked the signals (it or a thread it started waits
// for them).
std::atomic<pid_t> g_waiter{0};

// Runs in a thread that left the signals unblocked — one a library started
// before main (OpenBLAS's pool starts in its constructor): the signal is
// handed on to the waiting thread, where it stays pending until
// WaitForSignal takes it, instead of ending the process there.
void HandOn(int sig) {
  const int saved = errno;
  const pid_t waiter = g_waiter.load();
  if (waiter != 0) syscall(SYS_tgkill, getpid(), waiter, sig);
  errno = saved;
}

}  // namespace

void BlockTerminationSignals() {
  sigset_t set = DaemonSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  g_waiter.store(static_cast<pid_t>(syscall(SYS_gettid)));
  struct sigaction sa = {};
  sa.sa_handler = HandOn;
  sa.sa_mask = set;  // (one hand-on at a time)
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaction(sig, &sa, nullptr);
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
