#include "src/common/signals.h"

#include <signal.h>

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

}  // namespace

void BlockTerminationSignals() {
  sigset_t set = DaemonSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
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
