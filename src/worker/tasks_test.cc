// TaskRunner: an executor's end is seen when it exits, even when a process
// it started holds its output open, and whatever it started is stopped
// with it; a stalled executor is stopped with its process group.
#include "src/worker/tasks.h"

#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/files.h"
#include "src/common/status_matchers.h"
#include "src/testing/temp_dir.h"
#include "src/worker/log_tail.h"

namespace quilt {
namespace {

// An executor stand-in: a shell script that reports one step, starts a
// long sleep in the background (holding its output; its pid in
// `pidfile`), then runs `tail`.
std::string Script(const std::string& dir, const std::string& pidfile, const std::string& tail) {
  const std::string path = dir + "/executor.sh";
  std::ofstream(path) << "#!/bin/sh\n"
                      << "echo '{\"step\": 1, \"loss_part\": 0.5, \"step_time_s\": 0.01}'\n"
                      << "sleep 600 &\n"
                      << "echo $! > " << pidfile << "\n"
                      << tail << "\n";
  chmod(path.c_str(), 0755);
  return path;
}

quilt::v1::TaskReport WaitForEnd(TaskRunner& runner, absl::Duration limit) {
  const absl::Time until = absl::Now() + limit;
  quilt::v1::TaskReport last;
  while (absl::Now() < until) {
    for (const auto& r : runner.Reports()) {
      last = r;
      if (r.state() == quilt::v1::TASK_STATE_FAILED ||
          r.state() == quilt::v1::TASK_STATE_SUCCEEDED ||
          r.state() == quilt::v1::TASK_STATE_CANCELLED) {
        return r;
      }
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return last;
}

// Whether the process is gone (or a zombie no one reaped yet).
bool Gone(const std::string& pidfile) {
  absl::StatusOr<std::string> text = ReadFile(pidfile);
  int pid = 0;
  if (!text.ok() || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &pid) || pid <= 0) {
    return false;
  }
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<std::string> stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
    if (!stat.ok()) return true;
    const size_t paren = stat->rfind(')');
    if (paren != std::string::npos && paren + 2 < stat->size() && (*stat)[paren + 2] == 'Z') {
      return true;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

TaskRunnerOptions Options(const std::string& dir, const std::string& executor) {
  TaskRunnerOptions o;
  o.executor_path = executor;
  o.work_dir = dir + "/work";
  o.coordinator_address = "127.0.0.1:1";
  return o;
}

quilt::v1::TaskAssignment Assignment() {
  quilt::v1::TaskAssignment a;
  a.set_job_id("job-1");
  a.add_world("w1");
  a.set_steps(10);
  return a;
}

// A job's log is in its directory of the work dir; an id that could name
// another place has none.
TEST(TaskRunner, TheLogPathOfAJobIdAndNoneForAPath) {
  testing::TempDir tmp;
  const TaskRunnerOptions options = Options(tmp.path(), "/bin/true");
  TaskRunner runner(options);
  EXPECT_EQ(runner.LogPath("job-1"), options.work_dir + "/job-1/executor.log");
  // A path made of a job id holds the executor's log of an assignment.
  runner.Start(Assignment());
  WaitForEnd(runner, absl::Seconds(20));
  EXPECT_TRUE(std::filesystem::exists(runner.LogPath("job-1")));
  for (const std::string bad : {"", ".", "..", "../job-1", "a/b", "a\\b"}) {
    EXPECT_EQ(runner.LogPath(bad), "") << bad;
  }
}

// Each run of a job's executor on the node begins its log with a line of
// the worker's: run 1, then run 2 from the step it resumes at, each with
// the lines its executor wrote after it.
TEST(TaskRunner, EachRunOfAJobBeginsItsLogWithItsNumber) {
  testing::TempDir tmp;
  const std::string path = tmp.path() + "/executor.sh";
  std::ofstream(path) << "#!/bin/sh\necho \"executor $*\" >&2\n";
  chmod(path.c_str(), 0755);
  const TaskRunnerOptions options = Options(tmp.path(), path);
  {
    TaskRunner runner(options);
    runner.Start(Assignment());
    EXPECT_EQ(WaitForEnd(runner, absl::Seconds(20)).state(), quilt::v1::TASK_STATE_SUCCEEDED);
  }
  quilt::v1::TaskAssignment again = Assignment();
  again.mutable_resume_from()->set_steps_before(7);
  TaskRunner runner(options);
  runner.Start(again);
  EXPECT_EQ(WaitForEnd(runner, absl::Seconds(20)).state(), quilt::v1::TASK_STATE_SUCCEEDED);
  const std::string log = runner.LogPath("job-1");
  EXPECT_THAT(CountLogRuns(log), IsOkAndHolds(2));
  absl::StatusOr<LogTail> first = ReadLogRun(log, 1, 100, 1 << 20);
  ASSERT_THAT(first.status(), IsOk());
  EXPECT_THAT(first->text,
              ::testing::StartsWith("=== quilt-worker: run 1 (rank 0 of 1), started "));
  EXPECT_THAT(first->text, ::testing::HasSubstr("executor --program"));
  EXPECT_THAT(first->text, ::testing::Not(::testing::HasSubstr("--steps-before")));
  absl::StatusOr<LogTail> second = ReadLogRun(log, -1, 100, 1 << 20);
  ASSERT_THAT(second.status(), IsOk());
  EXPECT_EQ(second->run, 2);
  EXPECT_THAT(second->text, ::testing::StartsWith("=== quilt-worker: run 2 (rank 0 of 1)"));
  EXPECT_THAT(second->text, ::testing::HasSubstr(", from step 7 ===\n"));
  EXPECT_THAT(second->text, ::testing::HasSubstr("--steps-before 7"));
}

TEST(TaskRunner, AnExecutorThatExitsEndsItsTaskThoughAChildHoldsItsOutput) {
  testing::TempDir tmp;
  const std::string pidfile = tmp.path() + "/child.pid";
  TaskRunner runner(Options(tmp.path(), Script(tmp.path(), pidfile, "exit 3")));
  runner.Start(Assignment());
  const quilt::v1::TaskReport r = WaitForEnd(runner, absl::Seconds(20));
  EXPECT_EQ(r.state(), quilt::v1::TASK_STATE_FAILED) << r.message();
  EXPECT_EQ(r.step(), 1);
  EXPECT_NE(r.message().find("status 3"), std::string::npos) << r.message();
  EXPECT_TRUE(Gone(pidfile)) << "the background sleep outlived its executor";
}

// The most bytes its devices held in any step, not the last step's.
TEST(TaskRunner, ReportsTheMostItsExecutorsDevicesHeldInAStep) {
  testing::TempDir tmp;
  const std::string path = tmp.path() + "/executor.sh";
  std::ofstream(path) << "#!/bin/sh\n"
                      << "echo '{\"step\": 1, \"loss_part\": 0.5, \"step_time_s\": 0.01, "
                         "\"peak_bytes\": 1000}'\n"
                      << "echo '{\"step\": 2, \"loss_part\": 0.4, \"step_time_s\": 0.01, "
                         "\"peak_bytes\": 700}'\n";
  chmod(path.c_str(), 0755);
  TaskRunner runner(Options(tmp.path(), path));
  runner.Start(Assignment());
  const quilt::v1::TaskReport r = WaitForEnd(runner, absl::Seconds(20));
  EXPECT_EQ(r.step(), 2);
  EXPECT_EQ(r.peak_bytes(), 1000);
}

TEST(TaskRunner, ACrashIsNamedByItsSignalAndItsHandlersLineNotABacktraceRule) {
  testing::TempDir tmp;
  const std::string pidfile = tmp.path() + "/child.pid";
  // As UCX's crash handler writes it, then the signal kills the process.
  const std::string crash =
      "echo '[host:1:0:1] Caught signal 11 (Segmentation fault: address not mapped)' >&2\n"
      "echo '==== backtrace (tid:      1) ====' >&2\n"
      "echo ' 0  /usr/lib/libucs.so.0(ucs_handle_error+0x2dc) [0x7f]' >&2\n"
      "echo '=================================' >&2\n"
      "kill -SEGV $$";
  TaskRunner runner(Options(tmp.path(), Script(tmp.path(), pidfile, crash)));
  runner.Start(Assignment());
  const quilt::v1::TaskReport r = WaitForEnd(runner, absl::Seconds(20));
  EXPECT_EQ(r.state(), quilt::v1::TASK_STATE_FAILED) << r.message();
  EXPECT_NE(
      r.message().find("killed by signal 11 (Segmentation fault): [host:1:0:1] Caught signal"),
      std::string::npos)
      << r.message();
  EXPECT_NE(r.message().find("/executor.log"), std::string::npos) << r.message();
  EXPECT_EQ(r.message().find("===="), std::string::npos) << r.message();
}

TEST(TaskRunner, AStalledExecutorIsStoppedWithWhatItStarted) {
  testing::TempDir tmp;
  const std::string pidfile = tmp.path() + "/child.pid";
  TaskRunnerOptions o = Options(tmp.path(), Script(tmp.path(), pidfile, "sleep 600"));
  o.stall_timeout = absl::Seconds(1);
  TaskRunner runner(o);
  runner.Start(Assignment());
  const absl::Time until = absl::Now() + absl::Seconds(30);
  quilt::v1::TaskReport r;
  while (absl::Now() < until) {
    runner.KillStalled();
    r = WaitForEnd(runner, absl::Milliseconds(200));
    if (r.state() == quilt::v1::TASK_STATE_FAILED) break;
  }
  EXPECT_EQ(r.state(), quilt::v1::TASK_STATE_FAILED);
  EXPECT_NE(r.message().find("stalled"), std::string::npos) << r.message();
  EXPECT_TRUE(Gone(pidfile)) << "the background sleep outlived its stalled executor";
}

}  // namespace
}  // namespace quilt
