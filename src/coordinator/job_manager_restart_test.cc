// JobManager across coordinator restarts: jobs and their losses survive,
// running jobs go on when their nodes report, steps lost are asked for
// again or NaN.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "src/coordinator/job_manager.h"
#include "src/coordinator/job_manager_test_fixture.h"

namespace quilt {
namespace {

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

TEST_F(JobManagerTest, ANodeUnheardWhenTheJobFailedAfterARestartKeepsTheStepsItReached) {
  for (const bool second_restart : {false, true}) {
    const std::string id = AddJob(100);
    Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
    Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
    Reopen();
    // b's worker restarted while the coordinator was away; it is heard
    // first, and the job fails before a's kept steps arrive.
    Beat("b");
    ASSERT_EQ(Status(id).state(), quilt::v1::JOB_STATE_FAILED);
    // (The coordinator may restart again before they do.)
    if (second_restart) Reopen();
    // a's executor had reached step 40 (and then failed with its peer): its
    // steps came before it could know of the end, in pages.
    TaskReport first = Report(id, quilt::v1::TASK_STATE_RUNNING, 2, std::vector<double>(19, 1.0));
    first.set_step(40);
    Beat("a", {first});
    TaskReport last = Report(id, quilt::v1::TASK_STATE_FAILED, 21, std::vector<double>(20, 1.0));
    last.set_message("receive from rank 1 (b): the peer failed");
    Beat("a", {last});
    clock_.Advance(JobManager::kLateStepsGrace + absl::Seconds(1));
    jobs_->CheckNodes();
    EXPECT_EQ(Status(id).step(), 40);
    EXPECT_THAT(Status(id).message(), HasSubstr("the worker on b no longer runs the executor"));
    // b's parts of steps 2-40 went with its worker: NaN, every step stored.
    const std::vector<double> losses = *jobs_->Losses(id);
    ASSERT_EQ(losses.size(), 40u);
    EXPECT_DOUBLE_EQ(losses[0], 2.0);
    for (size_t i = 1; i < losses.size(); ++i) EXPECT_TRUE(std::isnan(losses[i])) << i;
  }
}

TEST_F(JobManagerTest, AJobThatFinishedBeforeACancelAfterARestartReachedItSucceeded) {
  const std::string done = AddJob(4), cut = AddJob(100);
  for (const char* n : {"a", "b"}) {
    Beat(n, {Report(done, quilt::v1::TASK_STATE_RUNNING, 1, {1.0}),
             Report(cut, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  }
  Reopen();
  // Cancelled before the nodes report: one job had finished meanwhile,
  // the other had not.
  ASSERT_THAT(jobs_->Cancel(done, ""), IsOk());
  ASSERT_THAT(jobs_->Cancel(cut, ""), IsOk());
  for (const char* n : {"a", "b"}) {
    Beat(n, {Report(done, quilt::v1::TASK_STATE_SUCCEEDED, 2, {1.0, 1.0, 1.0}),
             Report(cut, quilt::v1::TASK_STATE_RUNNING, 2, {1.0, 1.0, 1.0})});
  }
  EXPECT_EQ(Status(done).state(), quilt::v1::JOB_STATE_SUCCEEDED);
  EXPECT_THAT(Status(done).message(), HasSubstr("before the cancel reached it"));
  EXPECT_EQ(Status(cut).state(), quilt::v1::JOB_STATE_CANCELLED);
  // Stored so.
  Reopen();
  EXPECT_EQ(Status(done).state(), quilt::v1::JOB_STATE_SUCCEEDED);
}

TEST_F(JobManagerTest, AJobWhoseLastEndWasOnItsWayWhenCancelledSucceeded) {
  const std::string id = AddJob(4);
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  // a finished; b's end is on its way when the cancel comes.
  Beat("a", {Report(id, quilt::v1::TASK_STATE_SUCCEEDED, 2, {1.0, 1.0, 1.0})});
  ASSERT_THAT(jobs_->Cancel(id, ""), IsOk());
  ASSERT_EQ(Status(id).state(), quilt::v1::JOB_STATE_CANCELLED);
  Beat("b", {Report(id, quilt::v1::TASK_STATE_SUCCEEDED, 2, {1.0, 1.0, 1.0})});
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(Status(id).message(), "4 steps (finished before the cancel reached it)");
  // A worker that forgot the job and is told again to cancel it reports it
  // stopped there: the executor's end stays what it was.
  TaskReport never = Report(id, quilt::v1::TASK_STATE_CANCELLED, 1, {});
  never.set_step(0);
  Beat("a", {never});
  absl::StatusOr<quilt::v1::JobRecord> record = jobs_->Record(id);
  ASSERT_THAT(record, IsOk());
  EXPECT_EQ(record->tasks().at("a").state(), quilt::v1::TASK_STATE_SUCCEEDED);
  EXPECT_EQ(record->tasks().at("a").step(), 4);
  // An executor the cancel reached says so: the job stays cancelled.
  const std::string cut = AddJob(4);
  Beat("a", {Report(cut, quilt::v1::TASK_STATE_SUCCEEDED, 1, {1, 1, 1, 1})});
  ASSERT_THAT(jobs_->Cancel(cut, ""), IsOk());
  Beat("b", {Report(cut, quilt::v1::TASK_STATE_CANCELLED, 1, {1.0, 1.0})});
  EXPECT_EQ(Status(cut).state(), quilt::v1::JOB_STATE_CANCELLED);
}

TEST_F(JobManagerTest, ACancelAfterARestartKeepsTheStepsItsNodesSendAgain) {
  const std::string id = AddJob(6);
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  // Steps 2-3 received, not stored, when the coordinator stops.
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 2, {1.0, 1.0})});
  Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 2, {1.0, 1.0})});
  Reopen();
  ASSERT_THAT(jobs_->Cancel(id, ""), IsOk());
  // Both executors had finished every step meanwhile. a's first report
  // carries its last steps; it keeps those from step 2: the receipt asks
  // for them and lets it forget none.
  TaskReport a_end = Report(id, quilt::v1::TASK_STATE_SUCCEEDED, 4, {1.0, 1.0, 1.0});
  a_end.set_kept_from_step(2);
  HeartbeatResponse r = Beat("a", {a_end});
  ASSERT_THAT(r.receipts(), SizeIs(1));
  EXPECT_EQ(r.receipts(0).next_step(), 2);
  EXPECT_EQ(r.receipts(0).stored_step(), 1);
  for (const std::string node : {"a", "b"}) {
    TaskReport again = Report(id, quilt::v1::TASK_STATE_SUCCEEDED, 2, {1, 1, 1, 1, 1});
    again.set_kept_from_step(2);
    Beat(node, {again});
  }
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_SUCCEEDED) << Status(id).message();
  EXPECT_THAT(*jobs_->Losses(id), ElementsAre(2.0, 2.0, 2.0, 2.0, 2.0, 2.0));
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

TEST_F(JobManagerTest, AnEndReportedWithoutStepsAfterARestartWaitsForTheKeptSteps) {
  const std::string id = AddJob(4);
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  // Steps 2-4 are received from both (not stored: the store was full, or
  // the coordinator died before its periodic write); the workers keep them.
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 2, {1.0, 1.0, 1.0})});
  Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 2, {1.0, 1.0, 1.0})});
  Reopen();
  // Both executors finished; having sent every step, their reports carry
  // none: the job waits for the steps they keep, and asks for them.
  for (const std::string node : {"a", "b"}) {
    TaskReport done = Report(id, quilt::v1::TASK_STATE_SUCCEEDED, 5, {});
    done.set_step(4);
    done.set_kept_from_step(2);
    HeartbeatResponse r = Beat(node, {done});
    ASSERT_THAT(r.receipts(), SizeIs(1));
    EXPECT_EQ(r.receipts(0).next_step(), 2);
  }
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_RUNNING);
  for (const std::string node : {"a", "b"}) {
    TaskReport again = Report(id, quilt::v1::TASK_STATE_SUCCEEDED, 2, {1.0, 1.0, 1.0});
    again.set_kept_from_step(2);
    Beat(node, {again});
  }
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_SUCCEEDED);
  EXPECT_THAT(Status(id).message(), HasSubstr("4 steps, final loss 2"));
  EXPECT_THAT(*jobs_->Losses(id), ElementsAre(2.0, 2.0, 2.0, 2.0));
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

TEST_F(JobManagerTest, AnExecutorItsWorkerForgotBeforeARestartDoesNotHoldTheJobBack) {
  const std::string id = AddJob(4);
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  // b ran every step and writes its final checkpoint; a finished: its end
  // is stored with every step it ran, the receipt says so, and a's worker
  // forgets the executor (it reports it no more).
  Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 2, {1.0, 1.0, 1.0})});
  HeartbeatResponse a = Beat("a", {Report(id, quilt::v1::TASK_STATE_SUCCEEDED, 2, {1, 1, 1})});
  ASSERT_THAT(a.receipts(), SizeIs(1));
  ASSERT_EQ(a.receipts(0).stored_step(), 4);
  Reopen();
  Beat("a");
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_RUNNING);
  TaskReport b_done = Report(id, quilt::v1::TASK_STATE_SUCCEEDED, 5, {});
  b_done.set_step(4);
  Beat("b", {b_done});
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_SUCCEEDED) << Status(id).message();
  EXPECT_THAT(Status(id).message(), HasSubstr("4 steps, final loss 2"));
  EXPECT_THAT(*jobs_->Losses(id), ElementsAre(2.0, 2.0, 2.0, 2.0));
}

TEST_F(JobManagerTest, ALateReportOfAnExecutorRunningDoesNotUndoItsEnd) {
  const std::string id = AddJob(4);
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 2, {1.0, 1.0, 1.0})});
  Beat("a", {Report(id, quilt::v1::TASK_STATE_SUCCEEDED, 2, {1, 1, 1})});
  // A heartbeat of a sent before its end, retried, lands after it; then a's
  // worker, which has the end stored, reports the executor no more.
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 2, {1.0})});
  Beat("a");
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_RUNNING) << Status(id).message();
  TaskReport b_done = Report(id, quilt::v1::TASK_STATE_SUCCEEDED, 5, {});
  b_done.set_step(4);
  Beat("b", {b_done});
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_SUCCEEDED) << Status(id).message();
}

TEST_F(JobManagerTest, TheLateStepsGraceOfAnEndedJobCountsFromARestartNotFromTheEnd) {
  const std::string id = AddJob(100);
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  // b fails after steps 2-3; a had finished them too but not sent them.
  TaskReport failed = Report(id, quilt::v1::TASK_STATE_FAILED, 2, {1.0, 1.0});
  failed.set_message("the loss is nan at step 4");
  Beat("b", {failed});
  ASSERT_EQ(Status(id).state(), quilt::v1::JOB_STATE_FAILED);
  // The coordinator stops at once and is away for longer than the grace.
  clock_.Advance(JobManager::kLateStepsGrace * 2);
  Reopen();
  jobs_->CheckNodes();
  // Both workers send the steps they kept again.
  failed.set_kept_from_step(2);
  Beat("b", {failed});
  TaskReport a_steps = Report(id, quilt::v1::TASK_STATE_RUNNING, 2, {1.0, 1.0});
  a_steps.set_kept_from_step(2);
  Beat("a", {a_steps});
  clock_.Advance(JobManager::kLateStepsGrace + absl::Seconds(1));
  jobs_->CheckNodes();
  EXPECT_EQ(Status(id).step(), 3);
  EXPECT_THAT(*jobs_->Losses(id), ElementsAre(2.0, 2.0, 2.0));
}

}  // namespace
}  // namespace quilt
