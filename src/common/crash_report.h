// Crash reports for Quilt's processes: on a fatal signal (SIGSEGV, SIGBUS,
// SIGFPE, SIGILL, SIGABRT, SIGTRAP) the process writes the signal and its
// stack, symbolized, to stderr and then dies of the signal as before, so
// that a crash in a daemon's log or a job's executor output says where it
// happened. Call once, first thing in main.
#ifndef QUILT_SRC_COMMON_CRASH_REPORT_H_
#define QUILT_SRC_COMMON_CRASH_REPORT_H_

namespace quilt {

void InstallCrashReport(const char* argv0);

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_CRASH_REPORT_H_
