// LastExecutorError picks the line of an executor's log that says why it
// ended: its own error, else UCX's last message (a fatal one aborts the
// process, and a crash report with frames follows), else a crash handler's
// line, else the last line that is not a backtrace frame nor the
// executor's progress.
#include "src/worker/spawn.h"

#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "src/testing/temp_dir.h"

namespace quilt {
namespace {

std::string ErrorOf(const std::string& log) {
  testing::TempDir dir;
  const std::string path = dir.File("executor.log");
  std::ofstream(path) << log;
  return LastExecutorError(path);
}

TEST(LastExecutorError, TheExecutorsOwnErrorWins) {
  EXPECT_EQ(ErrorOf("starting\n"
                    "quilt-executor: lost peer rank 1 (worker-b)\n"
                    "[vm:1:0:2]      cma_ep.c:81   process_vm_readv returned -1: No such process\n"
                    "*** SIGABRT received at time=1 on cpu 0 ***\n"),
            "lost peer rank 1 (worker-b)");
}

TEST(LastExecutorError, UcxsFatalMessageRatherThanTheCrashReportAfterIt) {
  EXPECT_EQ(
      ErrorOf("step 10\n"
              "[vm:25675:0:25685]      cma_ep.c:81   process_vm_readv(pid=25664) returned -1: No "
              "such process\n"
              "==== backtrace (tid:  25685) ====\n"
              " 0  /lib/x86_64-linux-gnu/libucs.so.0(ucs_handle_error+0x2dc) [0x7fed1a345e9c]\n"
              "=================================\n"
              "*** SIGABRT received at time=1796412825 on cpu 0 ***\n"
              "PC: @     0x7fed190a8eec  (unknown)  (unknown)\n"
              "    @               0x30  (unknown)  (unknown)\n"),
      "UCX: process_vm_readv(pid=25664) returned -1: No such process (cma_ep.c:81)");
}

TEST(LastExecutorError, ACrashHandlersLineOtherwise) {
  EXPECT_EQ(ErrorOf("step 3\n"
                    "[vm:7:0] Caught signal 11 (Segmentation fault: address not mapped)\n"
                    "==== backtrace (tid:  7) ====\n"
                    " 0  /lib/libucs.so.0(+0x1) [0x1]\n"),
            "[vm:7:0] Caught signal 11 (Segmentation fault: address not mapped)");
}

TEST(LastExecutorError, TheLastLineThatSaysSomethingNotAFrame) {
  EXPECT_EQ(ErrorOf("loading the program\n"
                    "terminate called after throwing an instance of 'std::bad_alloc'\n"
                    "PC: @     0x7fed190a8eec  (unknown)  (unknown)\n"
                    "    @               0x30  (unknown)  (unknown)\n"
                    " 12  /lib/libc.so.6(+0x891f5) [0x7fed190a71f5]\n"),
            "terminate called after throwing an instance of 'std::bad_alloc'");
  EXPECT_EQ(ErrorOf(""), "");
}

// The executor's progress lines say what went well, not why it ended: an
// executor killed after them has no reason from its log.
TEST(LastExecutorError, NotAProgressLine) {
  EXPECT_EQ(ErrorOf("info 2026-12-07T15:25:30Z rank 0 of 2 on worker-a: 300 steps, data x\n"
                    "info 2026-12-07T15:26:00Z step 120/300: 8.100 ms, loss part 0.0385\n"),
            "");
  EXPECT_EQ(ErrorOf("info 2026-12-07T15:25:30Z rank 0 of 2 on worker-a: 300 steps, data x\n"
                    "quilt-executor: lost peer rank 1 (worker-b)\n"
                    "info 2026-12-07T15:25:31Z late line\n"),
            "lost peer rank 1 (worker-b)");
  // An earlier run's error is not the reason of a later one that said none.
  EXPECT_EQ(ErrorOf("info 2026-12-07T15:25:30Z rank 0 of 2 on worker-a: 300 steps, data x\n"
                    "quilt-executor: lost peer rank 1 (worker-b)\n"
                    "info 2026-12-07T16:00:00Z rank 0 of 2 on worker-a: 300 steps, data x\n"
                    "info 2026-12-07T16:00:30Z step 10/300: 8.000 ms\n"),
            "");
}

}  // namespace
}  // namespace quilt
