// Daemon signals: a SIGTERM the kernel hands to a thread that left it
// unblocked (a library's thread started before main blocked the signals)
// reaches WaitForSignal instead of ending the process; a forked child
// still ends on it.
#include "src/common/signals.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

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
  ASSERT_TRUE(BlockTerminationSignals().ok());
  // Only `library` takes it: without the hand-on this ends the test binary.
  ASSERT_EQ(kill(getpid(), SIGTERM), 0);
  EXPECT_EQ(WaitForSignal(absl::Seconds(10)), DaemonSignal::kTerminate);
  ASSERT_EQ(kill(getpid(), SIGHUP), 0);
  EXPECT_EQ(WaitForSignal(absl::Seconds(10)), DaemonSignal::kReload);
  EXPECT_EQ(WaitForSignal(absl::Milliseconds(50)), DaemonSignal::kNone);
  done = true;
  library.join();
}

// A child forked before it execs (a worker starting an executor) inherits
// the hand-on handler but not the waiting thread: a SIGTERM that reaches it
// there ends it, as by default, instead of vanishing.
TEST(Signals, AForkedChildIsEndedByASignalAsByDefault) {
  ASSERT_TRUE(BlockTerminationSignals().ok());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int i = 0; i < 500; ++i) usleep(10000);
    _exit(0);  // the signal was lost
  }
  usleep(50000);
  ASSERT_EQ(kill(child, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status)) << "exit status " << status;
  if (WIFSIGNALED(status)) {
    EXPECT_EQ(WTERMSIG(status), SIGTERM);
  }
}

}  // namespace
}  // namespace quilt
