// Checkpoint retention: the newest complete checkpoints stay, older
// complete ones go, incomplete ones are never touched; a job prunes as it
// passes checkpoint steps and once it succeeds, never after a failure.
#include "src/coordinator/checkpoint_retention.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/testing/temp_dir.h"

namespace quilt {
namespace {

using ::testing::ElementsAre;

// Step `step`'s directory with metrics.json for ranks [0, ranks).
void WriteStep(const std::string& dir, int64_t step, int ranks) {
  for (int r = 0; r < ranks; ++r) {
    const std::string rank = absl::StrFormat("%s/step-%08d/rank-%d", dir, step, r);
    std::filesystem::create_directories(rank);
    std::ofstream(rank + "/metrics.json") << "{}";
    std::ofstream(rank + "/w.npy") << "x";
  }
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(PruneCheckpoints, KeepsTheNewestCompleteOnesAndEveryIncompleteOne) {
  testing::TempDir tmp;
  const std::string dir = tmp.File("job");
  for (int64_t step : {2, 4, 6, 8}) WriteStep(dir, step, 2);
  WriteStep(dir, 3, 1);   // incomplete, older than the kept ones
  WriteStep(dir, 10, 1);  // incomplete: being written
  std::filesystem::create_directories(dir + "/notes");
  absl::StatusOr<PrunedCheckpoints> p = PruneCheckpoints(dir, 2, 2);
  ASSERT_THAT(p, IsOk());
  EXPECT_EQ(p->newest, 8);
  EXPECT_THAT(p->removed, ElementsAre(dir + "/step-00000004", dir + "/step-00000002"));
  EXPECT_THAT(Entries(dir), ElementsAre("notes", "step-00000003", "step-00000006", "step-00000008",
                                        "step-00000010"));
  // Nothing more to remove; keeping more than there are removes nothing.
  p = PruneCheckpoints(dir, 2, 2);
  ASSERT_THAT(p, IsOk());
  EXPECT_TRUE(p->removed.empty());
  p = PruneCheckpoints(dir, 2, 5);
  ASSERT_THAT(p, IsOk());
  EXPECT_TRUE(p->removed.empty());
  // A directory that is not there has nothing.
  p = PruneCheckpoints(tmp.File("none"), 2, 1);
  ASSERT_THAT(p, IsOk());
  EXPECT_EQ(p->newest, 0);
}

quilt::v1::JobRecord Record(const std::string& dir, quilt::v1::JobState state, int64_t step) {
  quilt::v1::JobRecord r;
  r.mutable_spec()->set_checkpoint_dir(dir);
  r.mutable_spec()->set_checkpoint_interval_steps(2);
  r.mutable_spec()->set_steps(9);
  r.mutable_spec()->set_keep_checkpoints(1);
  r.add_world("a");
  r.mutable_status()->set_state(state);
  r.mutable_status()->set_step(step);
  return r;
}

TEST(CheckpointRetention, PrunesAsTheJobPassesCheckpointsAndOnceItSucceeds) {
  testing::TempDir tmp;
  const std::string dir = tmp.File("job");
  CheckpointRetention retention;
  WriteStep(dir, 2, 1);
  WriteStep(dir, 4, 1);
  retention.Progress("j", Record(dir, quilt::v1::JOB_STATE_RUNNING, 5));
  retention.Flush();
  EXPECT_THAT(Entries(dir), ElementsAre("step-00000004"));
  // Its final checkpoint, at step 9 (no multiple of the interval).
  WriteStep(dir, 6, 1);
  WriteStep(dir, 8, 1);
  WriteStep(dir, 9, 1);
  retention.Progress("j", Record(dir, quilt::v1::JOB_STATE_SUCCEEDED, 9));
  retention.Flush();
  EXPECT_THAT(Entries(dir), ElementsAre("step-00000009"));
}

TEST(CheckpointRetention, LeavesAFailedJobsCheckpointsAndJobsThatKeepEveryOne) {
  testing::TempDir tmp;
  CheckpointRetention retention;
  const std::string failed = tmp.File("failed");
  for (int64_t step : {2, 4, 6}) WriteStep(failed, step, 1);
  retention.Progress("f", Record(failed, quilt::v1::JOB_STATE_FAILED, 7));
  retention.Progress("f", Record(failed, quilt::v1::JOB_STATE_CANCELLED, 7));
  const std::string all = tmp.File("all");
  for (int64_t step : {2, 4, 6}) WriteStep(all, step, 1);
  quilt::v1::JobRecord every = Record(all, quilt::v1::JOB_STATE_RUNNING, 7);
  every.mutable_spec()->set_keep_checkpoints(0);
  retention.Progress("a", every);
  retention.Flush();
  EXPECT_THAT(Entries(failed), ElementsAre("step-00000002", "step-00000004", "step-00000006"));
  EXPECT_THAT(Entries(all), ElementsAre("step-00000002", "step-00000004", "step-00000006"));
}

TEST(CheckpointRetention, ForgetsADeletedJob) {
  testing::TempDir tmp;
  CheckpointRetention retention;
  const std::string a = tmp.File("a");
  const std::string b = tmp.File("b");
  for (int64_t step : {2, 4}) {
    WriteStep(a, step, 1);
    WriteStep(b, step, 1);
  }
  retention.Progress("a", Record(a, quilt::v1::JOB_STATE_SUCCEEDED, 9));
  retention.Progress("b", Record(b, quilt::v1::JOB_STATE_RUNNING, 5));
  retention.Flush();
  EXPECT_EQ(retention.remembered(), 2u);
  retention.Forget("a");
  EXPECT_EQ(retention.remembered(), 1u);
  // A job forgotten while its pruning waits leaves nothing behind.
  WriteStep(b, 6, 1);
  retention.Progress("b", Record(b, quilt::v1::JOB_STATE_RUNNING, 7));
  retention.Forget("b");
  retention.Flush();
  EXPECT_EQ(retention.remembered(), 0u);
  EXPECT_THAT(Entries(a), ElementsAre("step-00000004"));
}

}  // namespace
}  // namespace quilt
