#include "src/common/crash_report.h"

#include <signal.h>

#include "absl/debugging/failure_signal_handler.h"
#include "absl/debugging/symbolize.h"

namespace quilt {

void InstallCrashReport(const char* argv0) {
  absl::InitializeSymbolizer(argv0);
  // The handler also takes SIGTERM, which is how processes are asked to
  // stop, not a crash: its disposition is put back as it was.
  struct sigaction term = {};
  sigaction(SIGTERM, nullptr, &term);
  absl::FailureSignalHandlerOptions options;
  // Dies of the signal itself afterwards (the exit status a supervisor or
  // a test sees is the signal's).
  options.call_previous_handler = false;
  absl::InstallFailureSignalHandler(options);
  sigaction(SIGTERM, &term, nullptr);
}

}  // namespace quilt
