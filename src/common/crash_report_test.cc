// A process with the crash report installed that dies of SIGSEGV writes
// the signal and its stack to stderr, and still dies of the signal.
#include "src/common/crash_report.h"

#include <signal.h>

#include <cstdint>

#include "gtest/gtest.h"

namespace quilt {
namespace {

// A write to an address the compiler cannot see is invalid.
volatile uintptr_t g_nowhere = 8;

__attribute__((noinline)) void CrashHere() {
  *reinterpret_cast<volatile int*>(g_nowhere) = 1;
  asm volatile("");  // (not a tail call: this frame stays on the stack)
}

TEST(CrashReportDeathTest, AFatalSignalPrintsItsStackAndStillKills) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        InstallCrashReport("crash_report_test");
        CrashHere();
      },
      ::testing::KilledBySignal(SIGSEGV), "SIGSEGV(.|\n)*@ +0x[0-9a-f]+(.|\n)*CrashHere");
}

TEST(CrashReportDeathTest, SigtermStaysAQuietStop) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        InstallCrashReport("crash_report_test");
        raise(SIGTERM);
      },
      ::testing::KilledBySignal(SIGTERM), "^$");
}

}  // namespace
}  // namespace quilt
