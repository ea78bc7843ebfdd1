// JobManager: assignments by rank, losses summed over ranks, failures and
// their causes, cancel, rendezvous, storage of jobs, models and losses.
#include "src/coordinator/job_manager.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "src/coordinator/job_manager_test_fixture.h"

namespace quilt {
namespace {

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

// A job's initial weights are kept with its model, not in its record
// (rewritten as the job runs): the record read back lacks them, the record
// with its model has them, after a coordinator restart too.
TEST_F(JobManagerTest, InitialWeightsAreKeptWithTheModelNotInTheRecord) {
  NewJob n = OnAB(3);
  n.spec.set_initial_weights(std::string(4096, 'w'));
  absl::StatusOr<std::string> id = jobs_->Add(std::move(n));
  ASSERT_THAT(id, IsOk());
  for (int pass = 0; pass < 2; ++pass) {
    absl::StatusOr<quilt::v1::JobRecord> plain = jobs_->Record(*id);
    ASSERT_THAT(plain, IsOk());
    EXPECT_TRUE(plain->spec().initial_weights().empty()) << "pass " << pass;
    absl::StatusOr<quilt::v1::JobRecord> with = jobs_->RecordWithModel(*id);
    ASSERT_THAT(with, IsOk());
    EXPECT_EQ(with->spec().initial_weights(), std::string(4096, 'w')) << "pass " << pass;
    Reopen();
  }
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

// Each node's most memory held in a step, as its executor measured it:
// the largest reported, never lowered by a later report.
TEST_F(JobManagerTest, EachNodesMeasuredPeakMemoryIsTheMostItReported) {
  const std::string id = AddJob(3);
  EXPECT_TRUE(Status(id).measured_memory_bytes().empty());
  TaskReport a = Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0});
  a.set_peak_bytes(5000);
  Beat("a", {a});
  TaskReport b = Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0});
  b.set_peak_bytes(7000);
  Beat("b", {b});
  TaskReport later = Report(id, quilt::v1::TASK_STATE_RUNNING, 2, {1.0});
  later.set_peak_bytes(4000);
  Beat("a", {later});
  const quilt::v1::JobStatus s = Status(id);
  EXPECT_EQ(s.measured_memory_bytes().at("a"), 5000);
  EXPECT_EQ(s.measured_memory_bytes().at("b"), 7000);
}

TEST_F(JobManagerTest, TheMeasuredStepTimeIsAMeanOverSecondsNotTheLast20Steps) {
  // 2000 steps of 1 ms, then 20 of 10 ms (a pause): over the last 10 s,
  // not the last 20 steps (which would say 10 ms).
  const std::string id = AddJob(5000);
  std::vector<double> times(2001, 1e-3);
  times.insert(times.end(), 20, 1e-2);
  for (const std::string node : {"a", "b"}) {
    TaskReport r =
        Report(id, quilt::v1::TASK_STATE_RUNNING, 1, std::vector<double>(times.size(), 1.0));
    r.clear_step_times_s();
    for (double t : times) r.add_step_times_s(t);
    Beat(node, {r});
  }
  const double expected = (2000 * 1e-3 + 20 * 1e-2) / 2020;  // after the warm-up step
  EXPECT_NEAR(Status(id).measured_step_time_s(), expected, 1e-12);
  EXPECT_NEAR(Status(id).samples_per_s(), 8 / expected, 1e-6);
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

// A failed job with restarts left is due `after` its failure, again only
// `after` it was last returned; resumed, or with a restart error, never;
// a coordinator that starts again counts from its start.
TEST_F(JobManagerTest, AFailedJobWithRestartsLeftIsDueAfterTheWait) {
  const std::string id = AddJob(100, /*max_restarts=*/2);
  const std::string none = AddJob(100);
  const std::string broken = AddJob(100, /*max_restarts=*/1);
  const std::string later = AddJob(100, /*max_restarts=*/1);
  for (const std::string& j : {id, none, broken, later}) {
    TaskReport failed = Report(j, quilt::v1::TASK_STATE_FAILED, 1, {});
    failed.set_message("lost");
    Beat("b", {failed});
    ASSERT_EQ(Status(j).state(), quilt::v1::JOB_STATE_FAILED);
  }
  const absl::Duration after = absl::Seconds(6);
  EXPECT_THAT(jobs_->RestartsDue(after), ::testing::IsEmpty());
  clock_.Advance(after);
  EXPECT_THAT(jobs_->RestartsDue(after), ElementsAre(id, broken, later));
  EXPECT_THAT(jobs_->RestartsDue(after), ::testing::IsEmpty());  // just tried
  jobs_->MarkRestartFailed(broken, "no checkpoint");
  EXPECT_EQ(Status(broken).restart_error(), "no checkpoint");
  ASSERT_THAT(jobs_->CheckNotResumed(id), IsOk());
  ASSERT_THAT(jobs_->MarkResumed(id, "job-next"), IsOk());
  EXPECT_EQ(Status(id).resumed_as(), "job-next");
  EXPECT_THAT(jobs_->MarkResumed(id, "job-other"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("as job-next")));
  EXPECT_THAT(jobs_->CheckNotResumed(id), StatusIs(absl::StatusCode::kFailedPrecondition));
  jobs_->MarkRestartFailed(id, "late");  // resumed: kept as it is
  EXPECT_EQ(Status(id).restart_error(), "");
  // `later` failed its restart for a passing reason: tried again.
  clock_.Advance(after);
  EXPECT_THAT(jobs_->RestartsDue(after), ElementsAre(later));
  // Stored: a coordinator that starts again has both marks, and waits
  // `after` from its start.
  JobManager again(store_.get(), registry_.get(), &clock_, "");
  ASSERT_THAT(again.Load(), IsOk());
  EXPECT_EQ(again.Get(id)->resumed_as(), "job-next");
  EXPECT_EQ(again.Get(broken)->restart_error(), "no checkpoint");
  EXPECT_THAT(again.RestartsDue(after), ::testing::IsEmpty());
  clock_.Advance(after);
  EXPECT_THAT(again.RestartsDue(after), ElementsAre(later));
  // A job added as `later`'s continuation whose coordinator stopped before
  // marking `later`: marked when the next one starts.
  NewJob n;
  n.spec.set_steps(10);
  n.program = "program-bytes";
  n.world = {"a"};
  n.resumed_from = later;
  absl::StatusOr<std::string> cont = again.Add(std::move(n));
  ASSERT_THAT(cont, IsOk());
  EXPECT_EQ(again.Get(*cont)->resumed_from(), later);
  EXPECT_EQ(again.Get(later)->resumed_as(), "");
  JobManager third(store_.get(), registry_.get(), &clock_, "");
  ASSERT_THAT(third.Load(), IsOk());
  EXPECT_EQ(third.Get(later)->resumed_as(), *cont);
  clock_.Advance(2 * after);
  EXPECT_THAT(third.RestartsDue(after), ::testing::IsEmpty());
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
  // The peer a names, silent since, is taken for the cause.
  EXPECT_EQ(Status(other).message(),
            "node b sent no report of its own (its executor stopped without one); the executor "
            "on a failed: " +
                knock_on);
  const std::vector<quilt::v1::ClusterEvent> events = registry_->RecentEvents(10);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].node_id(), "b");
}

TEST_F(JobManagerTest, AFailureCausedByAPeerNamesANodeThatStoppedHeartbeating) {
  ASSERT_NO_FATAL_FAILURE(RegisterABC());
  const std::string id = AddJobOnABC();
  // c's worker died with its executor; a and b blame each other.
  AAndBBlameEachOther(id);
  clock_.Advance(absl::Seconds(6));  // past not_ready_after for c
  ASSERT_THAT(registry_->Heartbeat("a", 1), IsOk());
  ASSERT_THAT(registry_->Heartbeat("b", 2), IsOk());
  registry_->CheckLiveness();
  jobs_->CheckNodes();
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_FAILED);
  EXPECT_THAT(Status(id).message(), ::testing::StartsWith("node c stopped heartbeating"));
}

// Before the registry calls it not ready (not_ready_after, 5 s): a node of
// the job that sent no heartbeat since the failure is named once the
// others have sent two.
TEST_F(JobManagerTest, AFailureCausedByAPeerNamesANodeSilentSinceTheFailure) {
  ASSERT_NO_FATAL_FAILURE(RegisterABC());
  const std::string id = AddJobOnABC();
  clock_.Advance(absl::Milliseconds(200));
  AAndBBlameEachOther(id);
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_THAT(registry_->Heartbeat("a", 1), IsOk());
    ASSERT_THAT(registry_->Heartbeat("b", 2), IsOk());
    registry_->CheckLiveness();
    jobs_->CheckNodes();
  }
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_FAILED);
  EXPECT_THAT(Status(id).message(),
              ::testing::StartsWith("node c stopped heartbeating (none since the failure, 3.0 s "
                                    "ago); the executor on "));
  const std::vector<quilt::v1::ClusterEvent> events = registry_->RecentEvents(10);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].node_id(), "c");
}

// A coordinator that heard no node since the failure (it stalled) blames
// none for silence.
TEST_F(JobManagerTest, AFailureCausedByAPeerBlamesNoSilenceWhenNoNodeWasHeardSince) {
  ASSERT_NO_FATAL_FAILURE(RegisterABC());
  const std::string id = AddJobOnABC();
  clock_.Advance(absl::Milliseconds(200));
  TaskReport r = Report(id, quilt::v1::TASK_STATE_FAILED, 2, {});
  r.set_message("receive from rank 1 (b) (tag 0x5, 64 bytes): the peer failed");
  Beat("a", {r});
  clock_.Advance(absl::Seconds(3));
  jobs_->CheckNodes();
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_FAILED);
  EXPECT_THAT(Status(id).message(), ::testing::StartsWith("node b sent no report of its own"));
}

TEST_F(JobManagerTest, AFailureCausedByAPeerNamesANodeWhoseWorkerRestartedSinceTheJobStarted) {
  ASSERT_NO_FATAL_FAILURE(RegisterABC());
  const std::string id = AddJobOnABC();
  for (const char* n : {"a", "b", "c"}) {
    Beat(n, {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0})});
  }
  // c's worker died with its executor and came back at once (Ready again
  // before the others' failures are judged); a and b blame each other.
  AAndBBlameEachOther(id);
  clock_.Advance(absl::Seconds(6));
  ASSERT_THAT(registry_->Register(Info("c"), 33), IsOk());
  for (const auto& [n, inc] : {std::pair{"a", 1}, std::pair{"b", 2}, std::pair{"c", 33}}) {
    ASSERT_THAT(registry_->Heartbeat(n, inc), IsOk());
  }
  registry_->CheckLiveness();
  jobs_->CheckNodes();
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_FAILED);
  EXPECT_THAT(Status(id).message(), ::testing::StartsWith("the worker on c restarted; "));
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
      if (c_alive) {
        ASSERT_THAT(registry_->Heartbeat("c", grace * 3 + 3), IsOk());
      }
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
  // A reason that would forge a line of a table or a log is refused.
  EXPECT_THAT(jobs_->Cancel(id, "x\nFAKE: job succeeded"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("control character")));
  EXPECT_THAT(jobs_->Cancel(id, "\x1b[32mgreen"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_RUNNING);
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

TEST_F(JobManagerTest, FlushStoresProgressAndAnEndedJobTakesNoMoreReports) {
  const std::string id = AddJob(100);
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0, 1.0, 1.0})});
  Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 1, {1.0, 1.0, 1.0})});
  ASSERT_EQ(Status(id).step(), 3);
  jobs_->Flush();  // progress is otherwise stored at most every few seconds
  Reopen();
  EXPECT_EQ(Status(id).step(), 3);
  ASSERT_THAT(jobs_->Cancel(id, ""), IsOk());
  // Cancelled before the nodes reported to this coordinator: the steps
  // their executors had reached came before they could know, and count.
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 4, {1.0, 1.0})});
  Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 4, {1.0, 1.0})});
  EXPECT_EQ(Status(id).step(), 5);
  // Executors that kept running once they were told report more steps:
  // the ended job keeps its.
  Beat("a", {Report(id, quilt::v1::TASK_STATE_RUNNING, 6, {1.0})});
  Beat("b", {Report(id, quilt::v1::TASK_STATE_RUNNING, 6, {1.0})});
  EXPECT_EQ(Status(id).step(), 5);
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_CANCELLED);
  EXPECT_THAT(*jobs_->Losses(id), ElementsAre(2.0, 2.0, 2.0, 2.0, 2.0));
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
  absl::Status StartJob(const quilt::v1::JobRecord& job, const std::string& program) override {
    if (full) return absl::ResourceExhaustedError("database or disk is full");
    ++job_writes;
    return store_->StartJob(job, program);
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
  EXPECT_THAT(jobs.Add(n), StatusIs(absl::StatusCode::kResourceExhausted,
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

TEST_F(JobManagerTest, ACancelThatCannotBeStoredSaysSoAndIsStoredWhenTheDiskHasRoom) {
  FullDiskStore disk(store_.get());
  {
    JobManager jobs(&disk, registry_.get(), &clock_, "/ckpt");
    ASSERT_THAT(jobs.Load(), IsOk());
    absl::StatusOr<std::string> id = jobs.Add(OnAB(100));
    ASSERT_THAT(id, IsOk());
    disk.full = true;
    EXPECT_THAT(jobs.Cancel(*id, ""),
                StatusIs(absl::StatusCode::kResourceExhausted,
                         AllOf(HasSubstr("is cancelled, but the coordinator cannot store that yet"),
                               HasSubstr("database or disk is full"))));
    EXPECT_EQ(jobs.Get(*id)->state(), quilt::v1::JOB_STATE_CANCELLED);
    disk.full = false;
    jobs.Flush();
  }
  JobManager again(&disk, registry_.get(), &clock_, "/ckpt");
  ASSERT_THAT(again.Load(), IsOk());
  ASSERT_THAT(again.List(), SizeIs(1));
  EXPECT_EQ(again.List()[0].state(), quilt::v1::JOB_STATE_CANCELLED);
}

TEST_F(JobManagerTest, AnUnstoredCancelIsTakenFromTheExecutorsItStoppedAfterARestart) {
  FullDiskStore disk(store_.get());
  std::string id;
  {
    JobManager jobs(&disk, registry_.get(), &clock_, "/ckpt");
    ASSERT_THAT(jobs.Load(), IsOk());
    absl::StatusOr<std::string> added = jobs.Add(OnAB(100));
    ASSERT_THAT(added, IsOk());
    id = *added;
    disk.full = true;
    EXPECT_THAT(jobs.Cancel(id, ""), Not(IsOk()));
  }
  // Restarted before the disk had room: the job is running as stored; its
  // executors, stopped by the cancel, say so.
  JobManager again(&disk, registry_.get(), &clock_, "/ckpt");
  ASSERT_THAT(again.Load(), IsOk());
  auto beat = [&](JobManager& jobs, const std::string& node, const TaskReport& r) {
    HeartbeatRequest hb;
    hb.set_node_id(node);
    *hb.add_tasks() = r;
    HeartbeatResponse out;
    jobs.OnHeartbeat(hb, &out);
  };
  beat(again, "a", Report(id, quilt::v1::TASK_STATE_CANCELLED, 1, {}));
  // (A failure another executor reports first would win: below.)
  EXPECT_NE(again.Get(id)->state(), quilt::v1::JOB_STATE_CANCELLED);
  clock_.Advance(absl::Seconds(4));
  again.CheckNodes();
  absl::StatusOr<quilt::v1::JobStatus> st = again.Get(id);
  ASSERT_THAT(st, IsOk());
  EXPECT_EQ(st->state(), quilt::v1::JOB_STATE_CANCELLED);
  EXPECT_THAT(st->message(), HasSubstr("stopped by a cancel this coordinator could not store"));

  // A job that failed with its end unstored: its other executor, stopped
  // because it failed, reports first; the failure, reported next, names
  // the cause.
  disk.full = false;
  absl::StatusOr<std::string> failed = again.Add(OnAB(100));
  ASSERT_THAT(failed, IsOk());
  beat(again, "a", Report(*failed, quilt::v1::TASK_STATE_CANCELLED, 1, {}));
  TaskReport broke = Report(*failed, quilt::v1::TASK_STATE_FAILED, 1, {});
  broke.set_message("out of memory at step 3");
  beat(again, "b", broke);
  clock_.Advance(absl::Seconds(4));
  again.CheckNodes();
  EXPECT_EQ(again.Get(*failed)->state(), quilt::v1::JOB_STATE_FAILED);
  EXPECT_THAT(again.Get(*failed)->message(), HasSubstr("out of memory at step 3"));
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
