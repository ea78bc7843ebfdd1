// The daemons' `config default` / `config check` and startup errors.
#include <sched.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/testing/subprocess.h"
#include "src/testing/temp_dir.h"

namespace quilt::testing {
namespace {

using ::testing::HasSubstr;

class DaemonConfigTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::string Binary() const { return RunfilePath(GetParam()); }
};

TEST_P(DaemonConfigTest, DefaultConfig_PassesCheck) {
  auto def = RunCommand({Binary(), "config", "default"});
  ASSERT_THAT(def, IsOk());
  ASSERT_EQ(def->exit_code, 0) << def->err;
  EXPECT_THAT(def->out, HasSubstr("version = 1"));
  EXPECT_THAT(def->out, HasSubstr("log_level = \"info\""));
  TempDir dir;
  std::ofstream(dir.File("c.toml")) << def->out;
  auto check = RunCommand({Binary(), "config", "check", dir.File("c.toml")});
  ASSERT_THAT(check, IsOk());
  EXPECT_EQ(check->exit_code, 0) << check->err;
  EXPECT_THAT(check->out, HasSubstr("OK"));
}

TEST_P(DaemonConfigTest, ShippedExampleConfig_PassesCheck) {
  const std::string role =
      GetParam().find("coordinator") != std::string::npos ? "coordinator" : "worker";
  auto check =
      RunCommand({Binary(), "config", "check", RunfilePath("config/" + role + ".example.toml")});
  ASSERT_THAT(check, IsOk());
  EXPECT_EQ(check->exit_code, 0) << check->err;
  // It is `config default` (every key, current docs) under a header line.
  auto defaults = RunCommand({Binary(), "config", "default"});
  ASSERT_THAT(defaults, IsOk());
  std::ifstream in(RunfilePath("config/" + role + ".example.toml"));
  std::string example((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_NE(example.find('\n'), std::string::npos);
  EXPECT_EQ(example.substr(example.find('\n') + 1), defaults->out)
      << "regenerate config/" << role << ".example.toml from `config default`";
}

TEST_P(DaemonConfigTest, BadKey_CheckNamesLineAndKey) {
  TempDir dir;
  std::ofstream(dir.File("c.toml")) << "version = 1\n\nlog_levle = \"debug\"\n";
  auto check = RunCommand({Binary(), "config", "check", dir.File("c.toml")});
  ASSERT_THAT(check, IsOk());
  EXPECT_EQ(check->exit_code, 1);
  EXPECT_THAT(check->err, HasSubstr("c.toml:3: unknown key 'log_levle'"));
  EXPECT_THAT(check->err, HasSubstr("did you mean 'log_level'"));
}

TEST_P(DaemonConfigTest, BadFlagValue_ExitsWithUsageError) {
  auto r = RunCommand({Binary(), "--log_level", "loud"});
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_code, 2);
  EXPECT_THAT(r->err, HasSubstr("--log_level"));
  // An unknown flag is a usage error too.
  auto unknown = RunCommand({Binary(), "--no_such_flag", "1"});
  ASSERT_THAT(unknown, IsOk());
  EXPECT_EQ(unknown->exit_code, 2) << unknown->err;
  // --help is not an error.
  auto help = RunCommand({Binary(), "--help"});
  ASSERT_THAT(help, IsOk());
  EXPECT_EQ(help->exit_code, 0);
}

INSTANTIATE_TEST_SUITE_P(Daemons, DaemonConfigTest,
                         ::testing::Values("src/coordinator/quilt-coordinator",
                                           "src/worker/quilt-worker"),
                         [](const auto& info) {
                           return info.param.find("coordinator") != std::string::npos
                                      ? std::string("Coordinator")
                                      : std::string("Worker");
                         });

TEST(Worker, BadCpus_RefusesToStartNamingTheKey) {
  for (const auto& [cpus, code, reason] : std::vector<std::tuple<std::string, int, std::string>>{
           {"0-x", 2, "cpus: bad CPU 'x' in CPU list entry '0-x'"},
           {"3-1", 2, "cpus: CPU range '3-1' ends before it starts"},
           // Well formed but not among the CPUs it may use.
           {std::to_string(CPU_SETSIZE - 1), 2, "is not available"}}) {
    auto r = RunCommand({RunfilePath("src/worker/quilt-worker"), "--cpus", cpus, "--cuda", "false",
                         "--calibration_ms", "10"});
    ASSERT_THAT(r, IsOk());
    EXPECT_EQ(r->exit_code, code) << cpus << ": " << r->err;
    EXPECT_THAT(r->err + r->out, HasSubstr(reason)) << cpus;
  }
}

TEST(Worker, UnusableWorkDir_RefusesToStart) {
  auto r = RunCommand({RunfilePath("src/worker/quilt-worker"), "--work_dir", "/proc/quilt-work",
                       "--cuda", "false", "--calibration_ms", "10"});
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_code, 2) << r->err;  // a configuration error, before any job fails on it
  EXPECT_THAT(r->err, HasSubstr("work_dir /proc/quilt-work is not usable"));
}

TEST(Worker, UnderSystemd_WorksInItsStateDirectory) {
  TempDir dir;
  // systemd's StateDirectory= sets $STATE_DIRECTORY; the coordinator is
  // not there (the worker keeps trying).
  auto worker = Subprocess::Start(
      {"/usr/bin/env", "STATE_DIRECTORY=" + dir.File("state"),
       RunfilePath("src/worker/quilt-worker"), "--node_id", "n1", "--coordinator_address",
       "127.0.0.1:1", "--cuda", "false", "--calibration_ms", "10"},
      dir.File("w.log"));
  ASSERT_THAT(worker, IsOk());
  bool made = false;
  for (int i = 0; i < 600 && !made; ++i) {
    made = std::filesystem::is_directory(dir.File("state/n1"));
    if (!made) absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(made) << "no work_dir under $STATE_DIRECTORY";
}

TEST(Coordinator, NonLoopbackPlaintext_RefusesToStart) {
  TempDir dir;
  auto r = RunCommand({RunfilePath("src/coordinator/quilt-coordinator"), "--listen_address",
                       "0.0.0.0:0", "--state_dir", dir.File("s")});
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_code, 2);  // a configuration error
  EXPECT_THAT(r->err, HasSubstr("loopback"));
  // `config check` says the same of a file that would not start.
  std::ofstream(dir.File("c.toml")) << "listen_address = \"0.0.0.0:7070\"\n";
  r = RunCommand(
      {RunfilePath("src/coordinator/quilt-coordinator"), "config", "check", dir.File("c.toml")});
  ASSERT_THAT(r, IsOk());
  EXPECT_NE(r->exit_code, 0) << r->out;
  EXPECT_THAT(r->err + r->out, HasSubstr("loopback"));
}

TEST(Coordinator, PortInUse_ClearError) {
  TempDir dir;
  auto first = Subprocess::Start(
      {RunfilePath("src/coordinator/quilt-coordinator"), "--listen_address", "127.0.0.1:0",
       "--state_dir", dir.File("a"), "--ready_file", dir.File("ready")},
      dir.File("a.log"));
  ASSERT_THAT(first, IsOk());
  std::string address;
  for (int i = 0; i < 200 && address.empty(); ++i) {
    std::ifstream in(dir.File("ready"));
    std::getline(in, address);
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_FALSE(address.empty());
  auto second = RunCommand({RunfilePath("src/coordinator/quilt-coordinator"), "--listen_address",
                            address, "--state_dir", dir.File("b")});
  ASSERT_THAT(second, IsOk());
  EXPECT_EQ(second->exit_code, 1);
  EXPECT_THAT(second->err, HasSubstr("cannot listen on " + address));
}

}  // namespace
}  // namespace quilt::testing
