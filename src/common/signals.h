// Process signal handling for daemons: SIGTERM / SIGINT request a drain,
// SIGHUP a reload. Signals are blocked in every thread (call
// BlockTerminationSignals() first in main, before any thread starts) and
// received synchronously by WaitForSignal(). A thread a library started
// before main (with the signals unblocked) hands a signal it gets on to
// the thread that blocked them, so it never ends the process.
#ifndef QUILT_SRC_COMMON_SIGNALS_H_
#define QUILT_SRC_COMMON_SIGNALS_H_

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace quilt {

enum class DaemonSignal { kNone, kTerminate, kReload };

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread (and the threads it
// starts afterwards). Errors: INTERNAL when the mask or a handler cannot be
// set.
absl::Status BlockTerminationSignals();

// Waits up to `timeout` for one of the blocked signals, in the thread that
// called BlockTerminationSignals. kNone on timeout.
DaemonSignal WaitForSignal(absl::Duration timeout);

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_SIGNALS_H_
