// The worker's model profiles: the real executor runs one-device programs
// and the medians of its step times come back; a program the executor
// cannot run fails the profile with its error.
#include "src/worker/model_profiler.h"

#include <atomic>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/planner/calibration.h"
#include "src/testing/subprocess.h"
#include "src/testing/temp_dir.h"
#include "src/testing/zoo_training.h"

namespace quilt {
namespace {

using ::testing::HasSubstr;

quilt::v1::Device Cpu() {
  quilt::v1::Device d;
  d.set_id("n0/cpu:0");
  d.set_kind(quilt::v1::DEVICE_KIND_CPU);
  d.set_measured_gemm_flops_per_s(5e10);
  d.set_memory_bytes(int64_t{8} << 30);
  return d;
}

std::string Program(int64_t rows, float learning_rate = 0.01f) {
  const Graph g = testing::ZooTrainingGraph("mlp", learning_rate);
  absl::StatusOr<quilt::v1::DistributedProgram> p = OneDeviceProgram(g, Cpu(), rows);
  EXPECT_THAT(p.status(), IsOk());
  return p->SerializeAsString();
}

// Runs `profile` and waits for its result.
quilt::v1::ModelProfileResult Profile(const quilt::v1::ModelProfile& profile,
                                      const std::string& dir, double slowdown = 1) {
  absl::Notification done;
  ProfilerOptions o;
  o.executor_path = testing::RunfilePath("src/runtime/quilt-executor");
  o.work_dir = dir;
  o.node_id = "n0";
  o.compute_slowdown = slowdown;
  o.on_result = [&done] {
    if (!done.HasBeenNotified()) done.Notify();
  };
  ModelProfiler profiler(o);
  profiler.Start(profile);
  profiler.Start(profile);  // the same id again: run once
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(120)));
  std::vector<quilt::v1::ModelProfileResult> results = profiler.Results();
  EXPECT_EQ(results.size(), 1u);
  profiler.Ack(results);
  EXPECT_TRUE(profiler.Results().empty());
  return results.empty() ? quilt::v1::ModelProfileResult{} : results[0];
}

TEST(ModelProfiler, RunsEachProgramAndReportsItsMedians) {
  testing::TempDir dir;
  quilt::v1::ModelProfile p;
  p.set_profile_id("p1");
  p.set_device("n0/cpu:0");
  p.set_steps(6);
  p.set_warmup_steps(2);
  for (int64_t rows : {256, 32}) {
    auto* run = p.add_runs();
    run->set_rows(rows);
    run->set_program(Program(rows));
  }
  const quilt::v1::ModelProfileResult r = Profile(p, dir.path());
  EXPECT_EQ(r.profile_id(), "p1");
  EXPECT_EQ(r.error(), "");
  ASSERT_EQ(r.runs_size(), 2);
  EXPECT_EQ(r.runs(0).rows(), 256);
  EXPECT_EQ(r.runs(1).rows(), 32);
  for (const auto& run : r.runs()) {
    EXPECT_GT(run.compute_time_s(), 0);
    EXPECT_GE(run.step_time_s(), run.compute_time_s());
  }
  // Eight times the rows take longer in kernels.
  EXPECT_GT(r.runs(0).compute_time_s(), r.runs(1).compute_time_s());
  EXPECT_GT(r.wall_s(), 0);
}

// A profile of one run of the program at `rows`.
quilt::v1::ModelProfile OneRun(const std::string& id, int64_t rows, int64_t steps, int64_t warmup) {
  quilt::v1::ModelProfile p;
  p.set_profile_id(id);
  p.set_device("n0/cpu:0");
  p.set_steps(steps);
  p.set_warmup_steps(warmup);
  auto* run = p.add_runs();
  run->set_rows(rows);
  run->set_program(Program(rows));
  return p;
}

TEST(ModelProfiler, EmulatedSlowdownSlowsTheKernels) {
  testing::TempDir dir;
  quilt::v1::ModelProfile p = OneRun("plain", 256, 6, 2);
  const quilt::v1::ModelProfileResult plain = Profile(p, dir.path());
  p.set_profile_id("slow");
  const quilt::v1::ModelProfileResult slow = Profile(p, dir.path(), 10);
  ASSERT_EQ(plain.runs_size(), 1);
  ASSERT_EQ(slow.runs_size(), 1);
  // Ten times slower kernels; a loaded machine can stretch the plain run
  // alone by 2× or more, so the bound leaves a factor of 4 for that.
  EXPECT_GT(slow.runs(0).step_time_s(), 2.5 * plain.runs(0).step_time_s());
}

TEST(ModelProfiler, AProfileTakenWhileJobsRunSaysSoAndIsRunAgainWhenAsked) {
  testing::TempDir dir;
  const quilt::v1::ModelProfile p = OneRun("busy", 32, 4, 1);
  std::atomic<int> results{0};
  ProfilerOptions o;
  o.executor_path = testing::RunfilePath("src/runtime/quilt-executor");
  o.work_dir = dir.path();
  o.node_id = "n0";
  o.on_result = [&results] { ++results; };
  o.jobs_running = [] { return 2; };
  ModelProfiler profiler(o);
  std::vector<double> walls;
  for (int round = 1; round <= 2; ++round) {
    profiler.Start(p);
    for (int i = 0; i < 2400 && results.load() < round; ++i) absl::SleepFor(absl::Milliseconds(50));
    std::vector<quilt::v1::ModelProfileResult> r = profiler.Results();
    ASSERT_EQ(r.size(), 1u) << "round " << round;
    EXPECT_EQ(r[0].error(), "");
    EXPECT_EQ(r[0].jobs_running(), 2);
    walls.push_back(r[0].wall_s());
    profiler.Ack(r);
  }
  EXPECT_NE(walls[0], walls[1]);  // measured again, not the first result re-sent
}

TEST(ModelProfiler, AJobsLearningRateThatDivergesOnSyntheticDataStillProfiles) {
  // The program is the job's own, its learning rate far too high for the
  // synthetic data: the timing run applies no update, so it cannot diverge.
  testing::TempDir dir;
  quilt::v1::ModelProfile p;
  p.set_profile_id("diverging");
  p.set_device("n0/cpu:0");
  p.set_steps(12);
  p.set_warmup_steps(2);
  auto* run = p.add_runs();
  run->set_rows(64);
  run->set_program(Program(64, 1e6f));
  const quilt::v1::ModelProfileResult r = Profile(p, dir.path());
  EXPECT_EQ(r.error(), "");
  ASSERT_EQ(r.runs_size(), 1);
  EXPECT_GT(r.runs(0).step_time_s(), 0);
}

TEST(ModelProfiler, AProgramTheExecutorRejectsFailsTheProfile) {
  testing::TempDir dir;
  quilt::v1::ModelProfile p;
  p.set_profile_id("bad");
  p.set_device("n0/cpu:0");
  p.set_steps(2);
  auto* run = p.add_runs();
  run->set_rows(8);
  run->set_program("not a program");
  const quilt::v1::ModelProfileResult r = Profile(p, dir.path());
  EXPECT_EQ(r.runs_size(), 0);
  EXPECT_THAT(r.error(), HasSubstr("the executor at 8 rows failed"));
}

}  // namespace
}  // namespace quilt
