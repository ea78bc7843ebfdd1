// The JobManager's queue: a queued job has no nodes and is handed to no
// worker, keeps its place and its model across a coordinator restart,
// starts PENDING with its plan (stored), and can be cancelled or failed
// while it waits, after which it cannot start.
#include "src/coordinator/job_manager_test_fixture.h"

namespace quilt {
namespace {

quilt::v1::JobSpec QueuedSpec(const std::string& name) {
  quilt::v1::JobSpec spec;
  spec.set_name(name);
  spec.set_steps(5);
  spec.set_global_batch(8);
  spec.set_onnx("onnx-bytes-of-" + name);
  spec.set_queue(true);
  return spec;
}

TEST_F(JobManagerTest, AQueuedJobWaitsWithoutNodesAndIsAssignedToNoWorker) {
  const std::string running = AddJob();
  absl::StatusOr<std::string> q = jobs_->AddQueued(QueuedSpec("q"), "waiting for room: a is full");
  ASSERT_THAT(q, IsOk());
  const quilt::v1::JobStatus st = Status(*q);
  EXPECT_EQ(st.state(), quilt::v1::JOB_STATE_QUEUED);
  EXPECT_EQ(st.message(), "waiting for room: a is full");
  EXPECT_THAT(st.nodes(), IsEmpty());
  EXPECT_FALSE(JobManager::Ended(st.state()));
  EXPECT_THAT(jobs_->Queued(), ElementsAre(*q));
  EXPECT_THAT(jobs_->Holding(), ElementsAre(running));
  // Only the planned job reaches the workers, and only it holds nodes.
  HeartbeatResponse a = Beat("a");
  ASSERT_THAT(a.assignments(), SizeIs(1));
  EXPECT_EQ(a.assignments(0).job_id(), running);
  const auto by_node = JobManager::ActiveJobsByNode(jobs_->List());
  EXPECT_THAT(by_node.at("a"), ElementsAre(running));
}

TEST_F(JobManagerTest, QueuedJobsKeepTheirOrderAndModelAcrossARestart) {
  const std::string first = *jobs_->AddQueued(QueuedSpec("first"), "waiting for room");
  const std::string second = *jobs_->AddQueued(QueuedSpec("second"), "behind 1 queued job(s)");
  Reopen();
  EXPECT_THAT(jobs_->Queued(), ElementsAre(first, second));
  const quilt::v1::JobStatus st = Status(first);
  EXPECT_EQ(st.state(), quilt::v1::JOB_STATE_QUEUED);
  EXPECT_EQ(st.message(), "waiting for room");  // not "waiting for the job's nodes"
  absl::StatusOr<quilt::v1::JobRecord> r = jobs_->RecordWithModel(second);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->spec().onnx(), "onnx-bytes-of-second");
  EXPECT_TRUE(r->spec().queue());
  EXPECT_EQ(r->spec().checkpoint_dir(), "/ckpt/" + second);
}

TEST_F(JobManagerTest, AStartedQueuedJobRunsItsPlanAndKeepsItAcrossARestart) {
  const std::string id = *jobs_->AddQueued(QueuedSpec("q"), "waiting for room");
  const int64_t submitted = Status(id).submitted_at().seconds();
  clock_.Advance(absl::Minutes(5));  // it waited
  NewJob plan = OnAB(5);
  plan.strategy = "dp-even-ring";
  plan.micro_batches = 4;
  plan.micro_batches_in_flight = 2;
  plan.predicted_step_time_s = 0.5;
  plan.predicted_memory_bytes = {{"a", 100}, {"b", 200}};
  EXPECT_THAT(jobs_->Holding(), IsEmpty());
  ASSERT_THAT(jobs_->StartQueued(id, std::move(plan)), IsOk());
  EXPECT_THAT(jobs_->Queued(), IsEmpty());
  EXPECT_THAT(jobs_->Holding(), ElementsAre(id));
  Reopen();  // the start is stored: plan, nodes and program
  const quilt::v1::JobStatus st = Status(id);
  EXPECT_EQ(st.state(), quilt::v1::JOB_STATE_PENDING);
  EXPECT_EQ(st.strategy(), "dp-even-ring");
  EXPECT_EQ(st.micro_batches(), 4);
  EXPECT_EQ(st.micro_batches_in_flight(), 2);
  EXPECT_THAT(st.nodes(), ElementsAre("a", "b"));
  EXPECT_EQ(st.predicted_memory_bytes().at("b"), 200);
  EXPECT_EQ(st.submitted_at().seconds(), submitted);  // still when it was submitted
  HeartbeatResponse b = Beat("b");
  ASSERT_THAT(b.assignments(), SizeIs(1));
  EXPECT_EQ(b.assignments(0).rank(), 1);
  EXPECT_EQ(b.assignments(0).program(), "program-bytes");
  EXPECT_EQ(b.assignments(0).checkpoint_dir(), "/ckpt/" + id);
  absl::StatusOr<quilt::v1::JobRecord> r = jobs_->RecordWithModel(id);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->spec().onnx(), "onnx-bytes-of-q");  // the model stays
  // Started once: a second plan is refused.
  EXPECT_THAT(jobs_->StartQueued(id, OnAB(5)), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(JobManagerTest, ACancelledQueuedJobEndsAndCannotStart) {
  const std::string id = *jobs_->AddQueued(QueuedSpec("q"), "waiting for room");
  ASSERT_THAT(jobs_->Cancel(id, "not needed"), IsOk());
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_CANCELLED);
  EXPECT_THAT(jobs_->Queued(), IsEmpty());
  EXPECT_THAT(jobs_->Holding(), IsEmpty());
  EXPECT_THAT(jobs_->StartQueued(id, OnAB(5)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no longer queued")));
  jobs_->KeepQueued(id, "waiting for room again");  // no effect on an ended job
  EXPECT_THAT(Status(id).message(), HasSubstr("not needed"));
  EXPECT_THAT(jobs_->Deletable(id), IsOk());
}

TEST_F(JobManagerTest, QueuedJobsSayHowManyWaitBeforeThemAsTheQueueMoves) {
  const std::string first = *jobs_->AddQueued(QueuedSpec("first"), "waiting for room");
  const std::string second = *jobs_->AddQueued(QueuedSpec("second"), "behind 1 queued job(s)");
  const std::string third = *jobs_->AddQueued(QueuedSpec("third"), "behind 2 queued job(s)");
  const std::string fourth = *jobs_->AddQueued(QueuedSpec("fourth"), "behind 3 queued job(s)");
  ASSERT_THAT(jobs_->Cancel(second, ""), IsOk());
  EXPECT_EQ(Status(first).message(), "waiting for room");  // the head's own
  EXPECT_EQ(Status(third).message(), "behind 1 queued job(s)");
  EXPECT_EQ(Status(fourth).message(), "behind 2 queued job(s)");
  ASSERT_THAT(jobs_->StartQueued(first, OnAB(5)), IsOk());
  // The new head no longer says a job is ahead of it.
  EXPECT_EQ(Status(third).message(), "first in the queue: checking whether it fits now");
  EXPECT_EQ(Status(fourth).message(), "behind 1 queued job(s)");
  jobs_->KeepQueued(third, "waiting for room: a is full");  // the dispatcher's word
  EXPECT_EQ(Status(third).message(), "waiting for room: a is full");
  jobs_->FailQueued(third, "its dataset is gone");
  EXPECT_THAT(jobs_->Queued(), ElementsAre(fourth));
}

TEST_F(JobManagerTest, HigherPrioritiesGoFirstAndTheOthersSayHowManyAreAhead) {
  const std::string low = *jobs_->AddQueued(QueuedSpec("low"), "waiting for room");
  const std::string mid = *jobs_->AddQueued(QueuedSpec("mid"), "behind 1 queued job(s)");
  quilt::v1::JobSpec urgent_spec = QueuedSpec("urgent");
  urgent_spec.set_priority(5);
  EXPECT_EQ(jobs_->QueuedAhead(5), 0);
  EXPECT_EQ(jobs_->QueuedAhead(0), 2);
  const std::string urgent = *jobs_->AddQueued(urgent_spec, "waiting for room: a is full");
  EXPECT_THAT(jobs_->Queued(), ElementsAre(urgent, low, mid));
  EXPECT_EQ(Status(urgent).priority(), 5);
  EXPECT_EQ(Status(urgent).message(), "waiting for room: a is full");
  EXPECT_EQ(Status(low).message(), "behind 1 queued job(s)");
  EXPECT_EQ(Status(mid).message(), "behind 2 queued job(s)");
  EXPECT_EQ(jobs_->QueuedAhead(5), 1);
  EXPECT_EQ(jobs_->QueuedAhead(-1), 3);
  // A round that planned the old head before the urgent job came keeps
  // its place's message.
  jobs_->KeepQueued(low, "waiting for room: a is full");
  EXPECT_EQ(Status(low).message(), "behind 1 queued job(s)");
  // The order is kept across a restart, and moves up as jobs leave.
  Reopen();
  EXPECT_THAT(jobs_->Queued(), ElementsAre(urgent, low, mid));
  ASSERT_THAT(jobs_->StartQueued(urgent, OnAB(5)), IsOk());
  EXPECT_THAT(jobs_->Queued(), ElementsAre(low, mid));
  EXPECT_EQ(Status(mid).message(), "behind 1 queued job(s)");
}

TEST_F(JobManagerTest, AQueuedResumeNamesTheJobItGoesOnFrom) {
  const std::string old = AddJob();
  quilt::v1::JobSpec spec = QueuedSpec("again");
  spec.mutable_resume_from()->set_steps_before(40);
  const std::string id = *jobs_->AddQueued(spec, "waiting for room", old);
  ASSERT_THAT(jobs_->MarkResumed(old, id), IsOk());
  Reopen();
  EXPECT_EQ(Status(id).resumed_from(), old);
  EXPECT_EQ(Status(id).steps_before(), 40);
  EXPECT_EQ(Status(old).resumed_as(), id);
  EXPECT_EQ(Status(id).state(), quilt::v1::JOB_STATE_QUEUED);
}

TEST_F(JobManagerTest, AQueuedJobsReasonIsUpdatedAndAFailureEndsIt) {
  const std::string id = *jobs_->AddQueued(QueuedSpec("q"), "waiting for room");
  jobs_->KeepQueued(id, "waiting for room: b holds 9 GiB");
  Reopen();
  EXPECT_EQ(Status(id).message(), "waiting for room: b holds 9 GiB");
  jobs_->FailQueued(id, "the dataset x.npy is gone");
  const quilt::v1::JobStatus st = Status(id);
  EXPECT_EQ(st.state(), quilt::v1::JOB_STATE_FAILED);
  EXPECT_THAT(st.message(), HasSubstr("the dataset x.npy is gone"));
  EXPECT_THAT(jobs_->Queued(), IsEmpty());
}

}  // namespace
}  // namespace quilt
