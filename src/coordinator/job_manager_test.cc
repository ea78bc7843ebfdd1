#include "src/coordinator/job_manager.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/fake_clock.h"
#include "src/common/status_matchers.h"
#include "src/coordinator/store/sqlite_store.h"
#include "src/testing/node_info.h"
#include "src/testing/temp_dir.h"

namespace quilt {
namespace {

using quilt::v1::HeartbeatRequest;
using quilt::v1::HeartbeatResponse;
using quilt::v1::TaskReport;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

quilt::v1::NodeInfo Info(const std::string& id) { return testing::CpuNodeInfo(id); }

TaskReport Report(const std::string& job, quilt::v1::TaskState state, int64_t first,
                  std::vector<double> losses) {
  TaskReport r;
  r.set_job_id(job);
  r.set_state(state);
  r.set_first_step(first);
  r.set_step(first + static_cast<int64_t>(losses.size()) - 1);
  for (double l : losses) {
    r.add_loss_parts(l);
    r.add_step_times_s(0.5);
  }
  return r;
}

class JobManagerTest : public ::testing::Test {
 protected:
  void SetUp() override { Reopen(); }

  void Reopen() {
    jobs_.reset();
    registry_.reset();
    store_.reset();
    auto store = SqliteStore::Open(dir_.File("c.db"));
    ASSERT_THAT(store, IsOk());
    store_ = std::move(*store);
    LivenessOptions o;
    o.heartbeat_period = absl::Seconds(1);
    o.not_ready_after = absl::Seconds(5);
    o.down_after = absl::Seconds(30);
    registry_ = std::make_unique<NodeRegistry>(&clock_, store_.get(), o);
    ASSERT_THAT(registry_->Load(), IsOk());
    jobs_ = std::make_unique<JobManager>(store_.get(), registry_.get(), &clock_, "/ckpt");
    ASSERT_THAT(jobs_->Load(), IsOk());
  }

  // A job of `steps` steps on nodes a and b.
  static NewJob OnAB(int64_t steps) {
    NewJob n;
    n.spec.set_steps(steps);
    n.program = "program-bytes";
    n.world = {"a", "b"};
    return n;
  }

  std::string AddJob(int64_t steps = 3) {
    NewJob n;
    n.spec.set_name("j");
    n.spec.set_steps(steps);
    n.spec.set_global_batch(8);
    n.program = "program-bytes";
    n.world = {"a", "b"};
    n.strategy = "dp-even-ring";
    n.predicted_step_time_s = 0.25;
    absl::StatusOr<std::string> id = jobs_->Add(std::move(n));
    EXPECT_THAT(id, IsOk());
    return *id;
  }

  // A job of 100 steps on nodes a, b and c.
  std::string AddJobOnABC() {
    NewJob n;
    n.spec.set_steps(100);
    n.program = "program-bytes";
    n.world = {"a", "b", "c"};
    absl::StatusOr<std::string> id = jobs_->Add(std::move(n));
    EXPECT_THAT(id, IsOk());
    return id.ok() ? *id : "";
  }

  HeartbeatResponse Beat(const std::string& node, std::vector<TaskReport> reports = {}) {
    HeartbeatRequest req;
    req.set_node_id(node);
    for (auto& r : reports) *req.add_tasks() = r;
    HeartbeatResponse resp;
    jobs_->OnHeartbeat(req, &resp);
    return resp;
  }

  quilt::v1::JobStatus Status(const std::string& id) {
    absl::StatusOr<quilt::v1::JobStatus> s = jobs_->Get(id);
    EXPECT_THAT(s, IsOk());
    return *s;
  }

  testing::TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<CoordinatorStore> store_;
  std::unique_ptr<NodeRegistry> registry_;
  std::unique_ptr<JobManager> jobs_;
};

TEST_F(JobManagerTest, EachNodeGetsItsAssignmentOnceWithItsRank) {
  const std::string id = AddJob();
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_PENDING);
  HeartbeatResponse a = Beat("a");
  ASSERT_THAT(a.assignments(), SizeIs(1));
  EXPECT_EQ(a.assignments(0).rank(), 0);
  EXPECT_EQ(a.assignments(0).program(), "program-bytes");
  EXPECT_EQ(a.assignments(0).checkpoint_dir(), "/ckpt/" + id);
  EXPECT_DOUBLE_EQ(a.assignments(0).predicted_step_time_s(), 0.25);  // for the stall watchdog
  EXPECT_THAT(a.assignments(0).world(), ElementsAre("a", "b"));
  EXPECT_EQ(Beat("b").assignments(0).rank(), 1);
  EXPECT_THAT(Beat("c").assignments(), IsEmpty());  // not in the world
  // Once the worker reports the task, it is not assigned again.
  EXPECT_THAT(Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {})}).assignments(),
              IsEmpty());
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_RUNNING);
}

TEST_F(JobManagerTest, LossesSumOverRanksAndTheJobSucceedsWhenAllDo) {
  const std::string id = AddJob(3);
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0, 2.0})});
  // Step 1 and 2 are not complete until b reports them.
  EXPECT_EQ(Status(id).step(), 0);
  Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {0.5})});
  EXPECT_EQ(Status(id).step(), 1);
  EXPECT_DOUBLE_EQ(Status(id).last_loss(), 1.5);
  Beat("b", {Report(id, quilt::v1::TASK_STATE_SUCCEEDED, 2, {0.25, 0.125})});
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_RUNNING);  // a still runs
  Beat("a", {Report(id, quilt::v1::TASK_STATE_SUCCEEDED, 3, {1.0})});
  const quilt::v1::JobStatus s = Status(id);
  EXPECT_EQ(s.state(), quilt::v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(s.step(), 3);
  EXPECT_DOUBLE_EQ(s.last_loss(), 1.125);
  EXPECT_DOUBLE_EQ(s.measured_step_time_s(), 0.5);
  EXPECT_DOUBLE_EQ(s.samples_per_s(), 16);
  absl::StatusOr<std::vector<double>> losses = jobs_->Losses(id);
  ASSERT_THAT(losses, IsOk());
  EXPECT_THAT(*losses, ElementsAre(1.5, 2.25, 1.125));
}

TEST_F(JobManagerTest, ARetriedHeartbeatDoesNotCountItsStepsTwice) {
  const std::string id = AddJob(3);
  const TaskReport a = Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0, 2.0});
  Beat("a", {a});
  Beat("a", {a});  // the worker did not get the answer and sends it again
  Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {0.5, 0.25})});
  absl::StatusOr<std::vector<double>> losses = jobs_->Losses(id);
  ASSERT_THAT(losses, IsOk());
  EXPECT_THAT(*losses, ElementsAre(1.5, 2.25));
  EXPECT_EQ(Status(id).step(), 2);
}

TEST_F(JobManagerTest, AnExecutorItsWorkerNoLongerReportsFailsTheJob) {
  const std::string id = AddJob();
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {})});
  Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {})});
  // a's worker restarted (its executor died with it) and reports nothing.
  Beat("a");
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_FAILED);
  EXPECT_THAT(Status(id).message(), HasSubstr("worker on a"));
  EXPECT_THAT(Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {})}).cancel_jobs(),
              ElementsAre(id));
  // A job this coordinator does not know: stopped while it runs, left
  // alone once it ended.
  EXPECT_THAT(Beat("a", {Report("job-lost", quilt::v1::TASK_STATE_RUNNING, 1, {})}).cancel_jobs(),
              ElementsAre("job-lost"));
  EXPECT_THAT(Beat("a", {Report("job-lost", quilt::v1::TASK_STATE_CANCELLED, 1, {})}).cancel_jobs(),
              IsEmpty());
}

TEST_F(JobManagerTest, AFailedExecutorFailsTheJobAndTheOthersAreStopped) {
  const std::string id = AddJob();
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {})});
  TaskReport failed = Report(id, quilt::v1::TASK_STATE_FAILED, 1, {});
  failed.set_message("out of memory in conv2");
  Beat("b", {failed});
  const quilt::v1::JobStatus s = Status(id);
  EXPECT_EQ(s.state(), quilt::v1::JOB_STATE_FAILED);
  EXPECT_THAT(s.message(), HasSubstr("on b"));
  EXPECT_THAT(s.message(), HasSubstr("out of memory in conv2"));
  EXPECT_THAT(Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {})}).cancel_jobs(),
              ElementsAre(id));
  // The cluster's events attribute the failure to b, not the job's first
  // node.
  const std::vector<quilt::v1::ClusterEvent> events = registry_->RecentEvents(10);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].kind(), quilt::v1::ClusterEvent::KIND_JOB_FAILED);
  EXPECT_EQ(events[0].node_id(), "b");
}

TEST_F(JobManagerTest, AFailureCausedByAPeerGivesWayToThePeersOwnReport) {
  auto failed = [](const std::string& job, const std::string& message) {
    TaskReport r = Report(job, quilt::v1::TASK_STATE_FAILED, 2, {});
    r.set_message(message);
    return r;
  };
  const std::string knock_on = "receive from rank 1 (b) (tag 0x5, 64 bytes): the peer failed";
  // b's report, with the cause, comes after a's.
  const std::string id = AddJob(100);
  Beat("a", {failed(id, knock_on)});
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_PENDING);  // waiting for the cause
  clock_.Advance(absl::Seconds(1));
  jobs_->CheckNodes();
  Beat("b", {failed(id, "the loss is nan at step 1")});
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_FAILED);
  EXPECT_EQ(Status(id).message(), "the executor on b failed: the loss is nan at step 1");
  // No report of the cause (b's worker died with it): a's, a little later.
  const std::string other = AddJob(100);
  Beat("a", {failed(other, knock_on)});
  clock_.Advance(JobManager::kRootCauseWait - absl::Milliseconds(1));
  jobs_->CheckNodes();
  EXPECT_EQ(Status(other).state(), quilt::v1::JOB_STATE_PENDING);
  clock_.Advance(absl::Milliseconds(1));
  jobs_->CheckNodes();
  EXPECT_EQ(Status(other).state(), quilt::v1::JOB_STATE_FAILED);
  EXPECT_EQ(Status(other).message(), "the executor on a failed: " + knock_on);
}

TEST_F(JobManagerTest, AFailureCausedByAPeerNamesANodeThatStoppedHeartbeating) {
  ASSERT_THAT(registry_->Register(Info("a"), 1), IsOk());
  ASSERT_THAT(registry_->Register(Info("b"), 2), IsOk());
  ASSERT_THAT(registry_->Register(Info("c"), 3), IsOk());
  const std::string id = AddJobOnABC();
  // c's worker died with its executor; a and b blame each other.
  TaskReport r = Report(id, quilt::v1::TASK_STATE_FAILED, 2, {});
  r.set_message("receive from rank 1 (b) (tag 0x5, 64 bytes): the peer failed");
  Beat("a", {r});
  r.set_message("receive from rank 0 (a) (tag 0x5, 64 bytes): the peer failed");
  Beat("b", {r});
  clock_.Advance(absl::Seconds(6));  // past not_ready_after for c
  ASSERT_THAT(registry_->Heartbeat("a", 1), IsOk());
  ASSERT_THAT(registry_->Heartbeat("b", 2), IsOk());
  registry_->CheckLiveness();
  jobs_->CheckNodes();
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_FAILED);
  EXPECT_THAT(Status(id).message(), ::testing::StartsWith("node c stopped heartbeating"));
}

// c dies after step 2; a and b fail after step 4 because it did. Steps 3
// and 4 lack c's parts: once c is Down (or the late-steps grace passed)
// they are NaN, and the job's step is the last any executor reached.
TEST_F(JobManagerTest, AFailedJobsStepsWithoutTheStoppedNodesPartsAreNaNOnceItIsDown) {
  for (int grace : {0, 1}) {
    for (const char* n : {"a", "b", "c"}) {
      (void)registry_->Register(Info(n), grace * 3 + (n[0] - 'a') + 1);
    }
    const std::string id = AddJobOnABC();
    for (const char* n : {"a", "b", "c"}) {
      Beat(n, {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0, 1.0})});
    }
    TaskReport r = Report(id, quilt::v1::TASK_STATE_FAILED, 3, {1.0, 1.0});
    r.set_message("receive from rank 2 (c) (tag 0x5, 64 bytes): the peer failed");
    Beat("a", {r});
    Beat("b", {r});
    bool c_alive = false;
    auto beat_ab = [&](absl::Duration d) {
      clock_.Advance(d);
      ASSERT_THAT(registry_->Heartbeat("a", grace * 3 + 1), IsOk());
      ASSERT_THAT(registry_->Heartbeat("b", grace * 3 + 2), IsOk());
      if (c_alive) ASSERT_THAT(registry_->Heartbeat("c", grace * 3 + 3), IsOk());
      registry_->CheckLiveness();
      jobs_->CheckNodes();
    };
    beat_ab(absl::Seconds(6));
    EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_FAILED);
    EXPECT_EQ(Status(id).step(), 2);  // c may still send steps 3 and 4
    EXPECT_THAT(*jobs_->Losses(id), ElementsAre(3.0, 3.0));
    if (grace == 1) {
      // c comes back without its executor before it is Down: the job waits
      // for the grace.
      c_alive = true;
      beat_ab(JobManager::kLateStepsGrace - absl::Milliseconds(1));
      EXPECT_EQ(Status(id).step(), 2);
      beat_ab(absl::Milliseconds(1));
    } else {
      beat_ab(absl::Seconds(25));  // c is Down 30 s after its last heartbeat
    }
    EXPECT_EQ(Status(id).step(), 4) << grace;
    const std::vector<double> losses = *jobs_->Losses(id);
    ASSERT_EQ(losses.size(), 4u) << grace;
    EXPECT_EQ(losses[1], 3.0);
    EXPECT_TRUE(std::isnan(losses[2]) && std::isnan(losses[3])) << losses[2] << " " << losses[3];
    // A restart keeps them.
    Reopen();
    EXPECT_EQ(jobs_->Losses(id)->size(), 4u);
  }
}

TEST_F(JobManagerTest, CancelTellsTheWorkersAndRefusesASecondTime) {
  const std::string id = AddJob();
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {})});
  ASSERT_THAT(jobs_->Cancel(id, "wrong lr"), IsOk());
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_CANCELLED);
  EXPECT_THAT(Status(id).message(), HasSubstr("wrong lr"));
  // a runs it: told to stop, also without reporting; b never started it.
  EXPECT_THAT(Beat("a").cancel_jobs(), ElementsAre(id));
  EXPECT_THAT(Beat("b").cancel_jobs(), IsEmpty());
  EXPECT_THAT(Beat("b").assignments(), IsEmpty());
  EXPECT_THAT(jobs_->Cancel(id, ""), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(jobs_->Cancel("job-none", ""), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(JobManagerTest, ADownNodeFailsItsJobs) {
  ASSERT_THAT(registry_->Register(Info("a"), 1), IsOk());
  ASSERT_THAT(registry_->Register(Info("b"), 2), IsOk());
  const std::string id = AddJob();
  clock_.Advance(absl::Seconds(20));
  ASSERT_THAT(registry_->Heartbeat("a", 1), IsOk());
  clock_.Advance(absl::Seconds(15));
  ASSERT_THAT(registry_->Heartbeat("a", 1), IsOk());
  registry_->CheckLiveness();
  jobs_->CheckNodes();
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_FAILED);
  EXPECT_THAT(Status(id).message(), HasSubstr("node b is down"));
}

TEST_F(JobManagerTest, RendezvousAnswersOnceEveryRankPublished) {
  const std::string id = AddJob();
  absl::StatusOr<std::vector<std::string>> first = jobs_->ExchangeAddresses(id, 1, 2, "addr-b");
  ASSERT_THAT(first, IsOk());
  EXPECT_THAT(*first, IsEmpty());
  absl::StatusOr<std::vector<std::string>> all = jobs_->ExchangeAddresses(id, 0, 2, "addr-a");
  ASSERT_THAT(all, IsOk());
  EXPECT_THAT(*all, ElementsAre("addr-a", "addr-b"));
  EXPECT_THAT(jobs_->ExchangeAddresses(id, 2, 2, "x"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(jobs_->ExchangeAddresses("job-none", 0, 2, "x"),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(JobManagerTest, JobsSurviveARestartAndRunningOnesGoOnWhenTheirNodesReport) {
  const std::string done = AddJob(1);
  Beat("a", {Report(done, quilt::v1::TASK_STATE_SUCCEEDED, 1, {1.0})});
  Beat("b", {Report(done, quilt::v1::TASK_STATE_SUCCEEDED, 1, {2.0})});
  const std::string running = AddJob(4);
  Beat("a", {Report(running, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  Beat("b", {Report(running, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  const std::string pending = AddJob(1);
  Reopen();
  EXPECT_THAT(jobs_->List(), SizeIs(3));
  EXPECT_EQ(Status(done).state(), quilt::v1::JOB_STATE_SUCCEEDED);
  EXPECT_DOUBLE_EQ(Status(done).last_loss(), 3.0);
  EXPECT_EQ(Status(running).state(), quilt::v1::JOB_STATE_RUNNING);
  EXPECT_THAT(Status(running).message(), HasSubstr("the coordinator restarted; waiting"));
  // The executors ran on: step 1 again (its acknowledgement was lost: not
  // counted twice), then the rest; a is not told to stop, and gets the
  // pending job's assignment (the program read back from the store).
  HeartbeatResponse a =
      Beat("a", {Report(running, quilt::v1::TASK_STATE_SUCCEEDED, 1, {1.0, 1.0, 1.0, 1.0})});
  EXPECT_THAT(a.cancel_jobs(), IsEmpty());
  ASSERT_THAT(a.assignments(), SizeIs(1));
  EXPECT_EQ(a.assignments(0).job_id(), pending);
  EXPECT_EQ(a.assignments(0).program(), "program-bytes");
  EXPECT_EQ(Status(running).message(), "");
  Beat("b", {Report(running, quilt::v1::TASK_STATE_SUCCEEDED, 2, {1.0, 1.0, 1.0})});
  const quilt::v1::JobStatus s = Status(running);
  EXPECT_EQ(s.state(), quilt::v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(s.step(), 4);
  EXPECT_THAT(*jobs_->Losses(running), ElementsAre(2.0, 2.0, 2.0, 2.0));
}

TEST_F(JobManagerTest, AJobThatFinishedWhileItsWorkerRestartedSucceeds) {
  NewJob n = OnAB(8);
  n.spec.set_checkpoint_dir(dir_.File("ck"));
  absl::StatusOr<std::string> id = jobs_->Add(n);
  ASSERT_THAT(id, IsOk());
  for (const std::string node : {"a", "b"}) {
    Beat(node, {Report(*id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  }
  auto checkpoint = [&](int64_t step) {
    for (int r = 0; r < 2; ++r) {
      const std::string rank_dir = absl::StrCat(dir_.File("ck"), "/", *id, "/step-",
                                                absl::StrFormat("%08d", step), "/rank-", r);
      std::filesystem::create_directories(rank_dir);
      std::ofstream(rank_dir + "/metrics.json") << "{}";
    }
  };
  // While the coordinator was away: both executors finished, b's worker
  // restarted and lost its report; a reports.
  checkpoint(4);
  checkpoint(8);
  Reopen();
  Beat("a", {Report(*id, quilt::v1::TASK_STATE_SUCCEEDED, 2, {1, 1, 1, 1, 1, 1, 1})});
  Beat("b");
  EXPECT_EQ(Status(*id).state(), quilt::v1::JOB_STATE_SUCCEEDED) << Status(*id).message();
  EXPECT_EQ(Status(*id).step(), 8);
  // The loss it shows is the last one complete, and says so; b's parts of
  // steps 2-8 went with its worker: NaN, every step stored.
  EXPECT_THAT(Status(*id).message(), HasSubstr("losses complete up to step 1"));
  EXPECT_EQ(Status(*id).last_loss_step(), 1);
  const std::vector<double> losses = *jobs_->Losses(*id);
  ASSERT_EQ(losses.size(), 8);
  EXPECT_DOUBLE_EQ(losses[0], 2.0);
  for (size_t i = 1; i < 8; ++i) EXPECT_TRUE(std::isnan(losses[i])) << i;
  // Without the final checkpoint, a worker that lost its executor fails
  // the job.
  const std::string other = AddJob(8);
  for (const std::string node : {"a", "b"}) {
    Beat(node, {Report(other, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  }
  Beat("b");
  EXPECT_EQ(Status(other).state(), quilt::v1::JOB_STATE_FAILED);
}

TEST_F(JobManagerTest, ExecutorsFindEachOtherAfterARestart) {
  const std::string a0("\xff\x00\x80ucx", 6);  // transport addresses are binary
  const std::string id = AddJob(100);
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {})});
  Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {})});
  ASSERT_THAT(jobs_->ExchangeAddresses(id, 0, 2, a0), IsOk());
  // The coordinator restarts before rank 1 published: rank 0's address
  // was kept (rank 0 may not publish again: it may have had them all).
  Reopen();
  absl::StatusOr<std::vector<std::string>> b = jobs_->ExchangeAddresses(id, 1, 2, "addr-b");
  ASSERT_THAT(b, IsOk());
  EXPECT_THAT(*b, ElementsAre(a0, "addr-b"));
  // A rank that publishes again is answered too.
  absl::StatusOr<std::vector<std::string>> a = jobs_->ExchangeAddresses(id, 0, 2, a0);
  ASSERT_THAT(a, IsOk());
  EXPECT_THAT(*a, ElementsAre(a0, "addr-b"));
  // An ended job keeps no addresses.
  ASSERT_THAT(jobs_->Cancel(id, ""), IsOk());
  EXPECT_EQ(jobs_->Record(id)->addresses_size(), 0);
}

TEST_F(JobManagerTest, AJobWhoseNodeComesBackWithoutItsExecutorFailsAfterARestart) {
  const std::string running = AddJob(100);
  Beat("a", {Report(running, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  Beat("b", {Report(running, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  Reopen();
  // b's worker restarted too: it no longer runs the executor.
  Beat("a", {Report(running, quilt::v1::TASK_STATE_RUNNING, 2, {1.0})});
  HeartbeatResponse b = Beat("b");
  EXPECT_EQ(Status(running).state(), quilt::v1::JOB_STATE_FAILED);
  EXPECT_THAT(Status(running).message(), HasSubstr("the worker on b no longer runs the executor"));
  // a is told to stop its executor.
  EXPECT_THAT(Beat("a", {Report(running, quilt::v1::TASK_STATE_RUNNING, 3, {1.0})}).cancel_jobs(),
              ElementsAre(running));
}

TEST_F(JobManagerTest, StepsLostAcrossARestartAreNaNNotZero) {
  const std::string id = AddJob(100);
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  // Steps 2-3 were reported and acknowledged, but not stored (progress is
  // stored every few seconds) when the coordinator stopped.
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 2, {1.0, 1.0})});
  Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 2, {1.0, 1.0})});
  Reopen();
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 4, {0.5})});
  Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 4, {0.5})});
  EXPECT_EQ(Status(id).step(), 4);
  EXPECT_DOUBLE_EQ(Status(id).last_loss(), 1.0);
  const std::vector<double> losses = *jobs_->Losses(id);
  ASSERT_EQ(losses.size(), 4);
  EXPECT_DOUBLE_EQ(losses[0], 2.0);
  EXPECT_TRUE(std::isnan(losses[1]));
  EXPECT_TRUE(std::isnan(losses[2]));
  EXPECT_DOUBLE_EQ(losses[3], 1.0);
}

TEST_F(JobManagerTest, ReceiptsSayWhatIsStoredAndARestartedCoordinatorAsksForTheRestAgain) {
  const std::string id = AddJob(100);
  auto receipt = [&](const HeartbeatResponse& r) {
    EXPECT_THAT(r.receipts(), SizeIs(1));
    return r.receipts_size() == 1 ? r.receipts(0) : quilt::v1::TaskReceipt();
  };
  // The first steps are stored with the job's start (a state change).
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  quilt::v1::TaskReceipt b =
      receipt(Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {2.0})}));
  EXPECT_EQ(b.job_id(), id);
  EXPECT_EQ(b.stored_step(), 1);
  EXPECT_EQ(b.next_step(), 2);
  // Progress is stored every few seconds: steps 2-3 are received, not stored.
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 2, {1.0, 1.0})});
  b = receipt(Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 2, {2.0, 2.0})}));
  EXPECT_EQ(b.stored_step(), 1);
  EXPECT_EQ(b.next_step(), 4);
  // The coordinator dies without a word (no Flush). Started again, it asks
  // for step 2 on, which the workers kept; a worker may also send again
  // what the store has (step 1): counted once.
  Reopen();
  quilt::v1::TaskReceipt a =
      receipt(Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 4, {1.0})}));
  EXPECT_EQ(a.stored_step(), 1);
  EXPECT_EQ(a.next_step(), 5);  // a sent from step 4: it lost 2-3 (not a receipts worker)
  b = receipt(Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {2.0, 2.0, 2.0, 2.0})}));
  EXPECT_EQ(b.next_step(), 5);
  EXPECT_EQ(Status(id).step(), 4);
  std::vector<double> losses = *jobs_->Losses(id);
  ASSERT_EQ(losses.size(), 4);
  EXPECT_DOUBLE_EQ(losses[0], 3.0);
  EXPECT_TRUE(std::isnan(losses[1]));  // a's part never came again
  EXPECT_DOUBLE_EQ(losses[3], 3.0);

  // A second job whose workers keep every step until it is stored loses
  // none across a restart.
  const std::string kept = AddJob(100);
  Beat("a", {Report(kept, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  Beat("b", {Report(kept, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  Beat("a", {Report(kept, quilt::v1::TASK_STATE_RUNNING, 2, {1.0, 1.0})});
  Beat("b", {Report(kept, quilt::v1::TASK_STATE_RUNNING, 2, {1.0, 1.0})});
  Reopen();
  // a goes on from where it was (step 4); it still keeps step 2 on, which
  // the coordinator lacks: the report waits and a is asked for step 2 on.
  TaskReport later = Report(kept, quilt::v1::TASK_STATE_RUNNING, 4, {1.0});
  later.set_kept_from_step(2);
  a = receipt(Beat("a", {later}));
  EXPECT_EQ(a.next_step(), 2);
  EXPECT_EQ(Status(kept).step(), 1);
  // Before every node sent its steps again, none of them is given up.
  clock_.Advance(absl::Seconds(10));
  a = receipt(Beat("a", {Report(kept, quilt::v1::TASK_STATE_RUNNING, 2, {1.0, 1.0, 1.0})}));
  EXPECT_EQ(a.stored_step(), 1);
  EXPECT_EQ(a.next_step(), 5);
  clock_.Advance(absl::Seconds(10));
  b = receipt(Beat("b", {Report(kept, quilt::v1::TASK_STATE_RUNNING, 2, {1.0, 1.0, 1.0})}));
  EXPECT_EQ(b.stored_step(), 4);
  EXPECT_THAT(*jobs_->Losses(kept), ElementsAre(2.0, 2.0, 2.0, 2.0));
  // An ended job, once stored, lets the workers forget everything.
  ASSERT_THAT(jobs_->Cancel(kept, ""), IsOk());
  a = receipt(Beat("a", {Report(kept, quilt::v1::TASK_STATE_CANCELLED, 5, {1.0})}));
  EXPECT_EQ(a.stored_step(), INT64_MAX);
}

TEST_F(JobManagerTest, AJobDoesNotSucceedAfterARestartBeforeEveryNodeSentItsKeptSteps) {
  const std::string id = AddJob(6);
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  // a finished (its end is stored: a state change) while b was behind;
  // a keeps steps 2-6 (not stored: b had not sent them).
  TaskReport a_done = Report(id, quilt::v1::TASK_STATE_SUCCEEDED, 2, {1, 1, 1, 1, 1});
  a_done.set_kept_from_step(2);
  Beat("a", {a_done});
  Reopen();
  // b finishes first after the restart: the job waits for a.
  TaskReport b_done = Report(id, quilt::v1::TASK_STATE_SUCCEEDED, 2, {1, 1, 1, 1, 1});
  b_done.set_kept_from_step(2);
  Beat("b", {b_done});
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_RUNNING);
  Beat("a", {a_done});
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_SUCCEEDED) << Status(id).message();
  EXPECT_THAT(Status(id).message(), HasSubstr("6 steps, final loss 2"));
  EXPECT_THAT(*jobs_->Losses(id), ElementsAre(2.0, 2.0, 2.0, 2.0, 2.0, 2.0));
}

TEST_F(JobManagerTest, AFailedJobKeepsTheLossesOfStepsEveryRankFinishedBeforeIt) {
  const std::string id = AddJob(100);
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  // a fails at step 4 having finished 2-3; b's report of 2-3 comes after,
  // with step 4 (which counts no more: a never finished it).
  TaskReport failed = Report(id, quilt::v1::TASK_STATE_FAILED, 2, {1.0, 1.0});
  failed.set_message("the loss is nan at step 4");
  Beat("a", {failed});
  ASSERT_EQ(Status(id).state(), quilt::v1::JOB_STATE_FAILED);
  HeartbeatResponse r = Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 2, {2.0, 2.0, 2.0})});
  EXPECT_THAT(r.cancel_jobs(), ElementsAre(id));
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_FAILED);
  EXPECT_EQ(Status(id).step(), 3);
  EXPECT_THAT(*jobs_->Losses(id), ElementsAre(2.0, 3.0, 3.0));
  // b has sent everything up to the end: it may forget its steps.
  ASSERT_THAT(r.receipts(), SizeIs(1));
  EXPECT_EQ(r.receipts(0).stored_step(), INT64_MAX);
}

TEST_F(JobManagerTest, FlushStoresProgressAndAnEndedJobTakesNoMoreReports) {
  const std::string id = AddJob(100);
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0, 1.0, 1.0})});
  Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0, 1.0, 1.0})});
  ASSERT_EQ(Status(id).step(), 3);
  jobs_->Flush();  // progress is otherwise stored at most every few seconds
  Reopen();
  EXPECT_EQ(Status(id).step(), 3);
  ASSERT_THAT(jobs_->Cancel(id, ""), IsOk());
  // Executors that kept running report more steps: the ended job keeps its.
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 4, {1.0, 1.0})});
  Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 4, {1.0, 1.0})});
  EXPECT_EQ(Status(id).step(), 3);
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_CANCELLED);
}

TEST_F(JobManagerTest, AJobsModelIsKeptInTheStoreAndOutOfItsRecord) {
  NewJob n;
  n.spec.set_steps(100);
  n.spec.set_onnx(std::string(1 << 20, 'm'));
  n.program = std::string(1 << 20, 'p');
  n.world = {"a", "b"};
  absl::StatusOr<std::string> id = jobs_->Add(n);
  ASSERT_THAT(id, IsOk());
  // Both nodes are handed the program.
  EXPECT_EQ(Beat("a").assignments(0).program(), n.program);
  for (const std::string node : {"a", "b"}) {
    Beat(node, {Report(*id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0, 1.0})});
  }
  jobs_->Flush();
  // The record, rewritten as the job runs, is small; the model is there
  // for export.
  absl::StatusOr<std::vector<quilt::v1::JobRecord>> stored = store_->ListJobs();
  ASSERT_THAT(stored, IsOk());
  ASSERT_THAT(*stored, SizeIs(1));
  EXPECT_LT((*stored)[0].ByteSizeLong(), 4096u);
  EXPECT_LT(jobs_->Record(*id)->ByteSizeLong(), 4096u);
  absl::StatusOr<quilt::v1::JobRecord> whole = jobs_->RecordWithModel(*id);
  ASSERT_THAT(whole, IsOk());
  EXPECT_EQ(whole->spec().onnx(), n.spec.onnx());
  EXPECT_EQ(whole->program(), n.program);
  EXPECT_EQ(whole->status().step(), 2);
}

TEST_F(JobManagerTest, LossesAreAppendedToTheStoreAndTheRecordStaysSmall) {
  const std::string id = AddJob(100000);
  int64_t step = 1;
  for (int beat = 0; beat < 20; ++beat) {
    std::vector<double> parts(500, 0.25);
    for (const std::string node : {"a", "b"}) {
      Beat(node, {Report(id, quilt::v1::TASK_STATE_RUNNING, step, parts)});
    }
    step += 500;
    clock_.Advance(absl::Seconds(6));  // a periodic write each time
  }
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, step, {1.0})});
  Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, step, {2.0})});
  jobs_->Flush();
  // 10 001 steps: every loss kept; the record does not grow with them.
  absl::StatusOr<std::vector<double>> losses = jobs_->Losses(id);
  ASSERT_THAT(losses, IsOk());
  ASSERT_EQ(losses->size(), 10001u);
  EXPECT_DOUBLE_EQ((*losses)[0], 0.5);
  EXPECT_DOUBLE_EQ((*losses)[9999], 0.5);
  EXPECT_DOUBLE_EQ((*losses)[10000], 3.0);
  EXPECT_LT((*store_->ListJobs())[0].ByteSizeLong(), 4096u);
  Reopen();
  losses = jobs_->Losses(id);
  ASSERT_THAT(losses, IsOk());
  EXPECT_EQ(losses->size(), 10001u);
  EXPECT_DOUBLE_EQ(losses->back(), 3.0);
}

TEST_F(JobManagerTest, AStepThatPassesACheckpointIsStoredAtOnce) {
  NewJob n = OnAB(100);
  n.spec.set_checkpoint_interval_steps(4);
  absl::StatusOr<std::string> id = jobs_->Add(n);
  ASSERT_THAT(id, IsOk());
  for (const std::string node : {"a", "b"}) {
    Beat(node, {Report(*id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  }
  for (const std::string node : {"a", "b"}) {
    Beat(node, {Report(*id, quilt::v1::TASK_STATE_RUNNING, 2, {1.0, 1.0, 1.0})});
  }
  for (const std::string node : {"a", "b"}) {
    Beat(node, {Report(*id, quilt::v1::TASK_STATE_RUNNING, 5, {1.0})});
  }
  ASSERT_EQ(Status(*id).step(), 5);
  Reopen();  // no Flush: only what was stored survives
  // Steps 2–3 and 5 waited for the next periodic write; step 4, a
  // checkpoint, was stored when it completed.
  EXPECT_EQ(Status(*id).step(), 4);
}

// The real store, whose job writes fail on demand (a full disk).
class FullDiskStore final : public CoordinatorStore {
 public:
  explicit FullDiskStore(CoordinatorStore* store) : store_(store) {}
  absl::Status PutNode(const quilt::v1::NodeStatus& n) override { return store_->PutNode(n); }
  absl::Status DeleteNode(const std::string& id) override { return store_->DeleteNode(id); }
  absl::StatusOr<std::vector<quilt::v1::NodeStatus>> ListNodes() override {
    return store_->ListNodes();
  }
  absl::Status AppendEvent(const quilt::v1::ClusterEvent& e) override {
    return store_->AppendEvent(e);
  }
  absl::StatusOr<std::vector<quilt::v1::ClusterEvent>> RecentEvents(int max) override {
    return store_->RecentEvents(max);
  }
  absl::Status AddJob(const quilt::v1::JobRecord& job, const JobModel& model) override {
    if (full) return absl::ResourceExhaustedError("database or disk is full");
    ++job_writes;
    return store_->AddJob(job, model);
  }
  absl::Status PutJob(const quilt::v1::JobRecord& job, const LossChunk& losses) override {
    if (full) return absl::ResourceExhaustedError("database or disk is full");
    ++job_writes;
    return store_->PutJob(job, losses);
  }
  absl::StatusOr<std::vector<double>> GetJobLosses(const std::string& job_id) override {
    return store_->GetJobLosses(job_id);
  }
  absl::StatusOr<int64_t> LastLossStep(const std::string& job_id) override {
    return store_->LastLossStep(job_id);
  }
  absl::StatusOr<JobModel> GetJobModel(const std::string& job_id) override {
    return store_->GetJobModel(job_id);
  }
  absl::Status DeleteJob(const std::string& job_id) override {
    if (full) return absl::ResourceExhaustedError("database or disk is full");
    return store_->DeleteJob(job_id);
  }
  absl::StatusOr<std::vector<quilt::v1::JobRecord>> ListJobs() override {
    return store_->ListJobs();
  }
  bool full = false;
  int job_writes = 0;

 private:
  CoordinatorStore* store_;
};

TEST_F(JobManagerTest, AJobThatCannotBeStoredIsNotAccepted) {
  FullDiskStore disk(store_.get());
  JobManager jobs(&disk, registry_.get(), &clock_, "/ckpt");
  ASSERT_THAT(jobs.Load(), IsOk());
  disk.full = true;
  NewJob n;
  n.spec.set_steps(3);
  n.program = "program-bytes";
  n.world = {"a"};
  EXPECT_THAT(jobs.Add(n), StatusIs(absl::StatusCode::kUnavailable,
                                    HasSubstr("cannot store the job (database or disk is full)")));
  EXPECT_THAT(jobs.List(), IsEmpty());
  // Nothing is handed to the workers.
  HeartbeatRequest hb;
  hb.set_node_id("a");
  HeartbeatResponse out;
  jobs.OnHeartbeat(hb, &out);
  EXPECT_EQ(out.assignments_size(), 0);
  disk.full = false;
  EXPECT_THAT(jobs.Add(n), IsOk());
  EXPECT_THAT(jobs.List(), SizeIs(1));
}

TEST_F(JobManagerTest, AnEndedJobIsStoppedOnItsNodesOnceAndThenLeftAlone) {
  FullDiskStore disk(store_.get());
  JobManager jobs(&disk, registry_.get(), &clock_, "/ckpt");
  ASSERT_THAT(jobs.Load(), IsOk());
  NewJob n = OnAB(100);
  absl::StatusOr<std::string> id = jobs.Add(n);
  ASSERT_THAT(id, IsOk());
  auto beat = [&](const std::string& node, std::vector<TaskReport> reports) {
    HeartbeatRequest hb;
    hb.set_node_id(node);
    for (auto& r : reports) *hb.add_tasks() = r;
    HeartbeatResponse out;
    jobs.OnHeartbeat(hb, &out);
    return out;
  };
  beat("a", {Report(*id, quilt::v1::TASK_STATE_RUNNING, 1, {})});
  beat("b", {Report(*id, quilt::v1::TASK_STATE_RUNNING, 1, {})});
  ASSERT_THAT(jobs.Cancel(*id, ""), IsOk());
  // a's executor is still running: it is told to stop it.
  EXPECT_THAT(beat("a", {Report(*id, quilt::v1::TASK_STATE_RUNNING, 1, {})}).cancel_jobs(),
              ElementsAre(*id));
  // b's worker no longer reports it (it reported the end and had it
  // acknowledged): it is told to stop it, and answers that it has.
  EXPECT_THAT(beat("b", {}).cancel_jobs(), ElementsAre(*id));
  beat("b", {Report(*id, quilt::v1::TASK_STATE_CANCELLED, 1, {})});
  beat("a", {Report(*id, quilt::v1::TASK_STATE_CANCELLED, 1, {})});
  // From then on, neither node hears of the job, and its record is not
  // written again however often they heartbeat.
  const int writes = disk.job_writes;
  for (int i = 0; i < 10; ++i) {
    EXPECT_THAT(beat("a", {}).cancel_jobs(), IsEmpty());
    EXPECT_THAT(beat("b", {}).cancel_jobs(), IsEmpty());
  }
  EXPECT_EQ(disk.job_writes, writes);
  EXPECT_EQ(jobs.Get(*id)->state(), quilt::v1::JOB_STATE_CANCELLED);
}

TEST_F(JobManagerTest, OnlyAnEndedJobIsDeletedAndItStaysDeleted) {
  const std::string kept = AddJob(3);
  const std::string id = AddJob(3);
  EXPECT_THAT(jobs_->Delete(id), StatusIs(absl::StatusCode::kFailedPrecondition,
                                          HasSubstr("is pending; cancel it first")));
  EXPECT_THAT(jobs_->Delete("job-none"), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_THAT(jobs_->Cancel(id, ""), IsOk());
  // A watcher of the job hears of its deletion.
  int64_t version = -1;
  ASSERT_THAT(jobs_->WaitForChange(id, &version, absl::Seconds(5)), IsOk());
  std::thread watcher([&] {
    EXPECT_THAT(jobs_->WaitForChange(id, &version, absl::Seconds(30)),
                StatusIs(absl::StatusCode::kNotFound, HasSubstr("deleted")));
  });
  absl::SleepFor(absl::Milliseconds(50));
  absl::StatusOr<std::string> checkpoints = jobs_->Delete(id);
  ASSERT_THAT(checkpoints, IsOk());
  EXPECT_EQ(*checkpoints, "/ckpt/" + id);
  watcher.join();
  EXPECT_THAT(jobs_->Get(id), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(jobs_->List(), SizeIs(1));
  // Its workers are no longer told of it, and after a restart it is gone.
  EXPECT_THAT(Beat("a").assignments(), SizeIs(1));  // the other job's
  Reopen();
  EXPECT_THAT(jobs_->Get(id), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(Status(kept).state(), quilt::v1::JOB_STATE_PENDING);
}

TEST_F(JobManagerTest, WaitForChangeReturnsOnChangeOrTimeout) {
  const std::string id = AddJob();
  int64_t version = -1;
  ASSERT_THAT(jobs_->WaitForChange(id, &version, absl::Seconds(5)), IsOk());
  const int64_t seen = version;
  const absl::Time start = absl::Now();
  ASSERT_THAT(jobs_->WaitForChange(id, &version, absl::Milliseconds(50)), IsOk());
  EXPECT_EQ(version, seen);  // nothing changed
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(45));
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {})});
  ASSERT_THAT(jobs_->WaitForChange(id, &version, absl::Seconds(5)), IsOk());
  EXPECT_GT(version, seen);
  EXPECT_THAT(jobs_->WaitForChange("job-none", &version, absl::Seconds(1)),
              StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace quilt
