// Daemon signals: a SIGTERM the kernel hands to a thread that left it
// unblocked (a library's thread started before main blocked the signals)
// reaches WaitForSignal instead of ending the process.
#include "src/common/signals.h"

#include <signal.h>

#include <atomic>
#include <thread>

#include "gtest/gtest.h"

namespace quilt {
namespace {

TEST(Signals, ASignalToAThreadThatLeftItUnblockedReachesTheWaiter) {
  std::atomic<bool> ready{false}, done{false};
  // Started before the signals are blocked, and unblocking them itself:
  // the kernel may give a process-directed signal to it alone.
  std::thread library([&] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    ready = true;
    while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  while (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  BlockTerminationSignals();
  // Only `library` takes it: without the hand-on this ends the test binary.
  ASSERT_EQ(kill(getpid(), SIGTERM), 0);
  EXPECT_EQ(WaitForSignal(absl::Seconds(10)), DaemonSignal::kTerminate);
  ASSERT_EQ(kill(getpid(), SIGHUP), 0);
  EXPECT_EQ(WaitForSignal(absl::Seconds(10)), DaemonSignal::kReload);
  EXPECT_EQ(WaitForSignal(absl::Milliseconds(50)), DaemonSignal::kNone);
  done = true;
  library.join();
}

}  // namespace
}  // namespace quilt
