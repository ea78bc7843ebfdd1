// Jobs that stop and go on, through the whole service with the real
// binaries on loopback: a cancelled or failed job resumes from its last
// checkpoint as a new job with each step's loss the uninterrupted run's; a
// job with restarts left trains on without a node that died; a running
// job outlives a coordinator restart and a killed coordinator loses no
// step's loss; a stalled or stopped executor fails its job saying so.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "src/common/files.h"
#include "src/common/status.h"
#include "src/common/status_matchers.h"
#include "src/coordinator/job_model.h"
#include "src/runtime/data/dataset.h"
#include "src/runtime/local_trainer.h"
#include "src/runtime/parallel.h"
#include "test/integration/jobs_fixture.h"

namespace quilt::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A cancelled job trains on from its last checkpoint as a new job: the
// steps left, from the checkpoint's weights and momentum and the data where
// the old job was (each step's loss is the uninterrupted run's), to
// SUCCEEDED. A running job and an ended job with nothing left are refused
// with the reason.
TEST_F(Jobs, ACancelledJobResumesFromItsLastCheckpointAsANewJob) {
  constexpr int64_t kTotal = 200;
  const std::string id = Submit(SubmitArgs(cluster_.dir().File("ckpt"), kTotal, "dp-even-ring"));
  ASSERT_TRUE(Eventually([&] { return Step(id) > 13; }, absl::Seconds(60))) << Job(id).dump();
  absl::StatusOr<CommandResult> running = cluster_.Quiltctl({"resume", id});
  ASSERT_THAT(running.status(), IsOk());
  EXPECT_NE(running->exit_code, 0);
  EXPECT_THAT(running->err, HasSubstr("only a failed or cancelled job can be resumed"));
  ASSERT_NO_FATAL_FAILURE(CancelAfter(id, 13));
  // (Its executors ran on until the cancel reached them: its checkpoint
  // can be of a later step than its last loss.)
  const std::vector<double> old_losses = Losses(cluster_, id);

  std::string said;
  const std::string resumed = Resume(id, &said);
  ASSERT_FALSE(resumed.empty());
  ASSERT_NE(resumed, id);
  // Checkpoints every 4 steps: the last one the cancel left.
  const nlohmann::json job = Job(resumed);
  const int64_t steps = std::stoll(job.value("steps", std::string("0")));
  const int64_t from = kTotal - steps;
  EXPECT_GE(from, 12);
  EXPECT_EQ(from % 4, 0);
  EXPECT_THAT(said, HasSubstr("from step " + std::to_string(from) + "'s checkpoint"));
  EXPECT_THAT(job.value("name", std::string()),
              HasSubstr("(resumed from " + id + " at step " + std::to_string(from) + ")"));
  ASSERT_TRUE(
      Eventually([&] { return State(resumed) == "JOB_STATE_SUCCEEDED"; }, absl::Seconds(120)))
      << Job(resumed).dump();
  const std::vector<double> new_losses = Losses(cluster_, resumed);
  ASSERT_EQ(static_cast<int64_t>(new_losses.size()), steps);
  ASSERT_GE(old_losses.size(), 2u);
  // It trains on as the job would have without the cancel: its step k is
  // the uninterrupted run's step from + k, on the same samples, from the
  // same parameters and momentum.
  SingleDeviceRun single;
  ASSERT_THAT(single.Train(kTotal), IsOk());
  const std::vector<float>& want = single.result.losses;
  for (int64_t k = 0; k < steps; ++k) {
    const double w = want[static_cast<size_t>(from + k)];
    ASSERT_NEAR(new_losses[static_cast<size_t>(k)], w, 1e-3 * (1 + std::abs(w)))
        << "the resumed job's step " << k + 1 << ", the run's step " << from + k + 1;
  }
  // It has nothing left once it succeeded: refused, naming export.
  absl::StatusOr<CommandResult> again = cluster_.Quiltctl({"resume", resumed});
  ASSERT_THAT(again.status(), IsOk());
  EXPECT_NE(again->exit_code, 0);
  EXPECT_THAT(again->err, HasSubstr("only a failed or cancelled job can be resumed"));
  absl::StatusOr<CommandResult> unknown = cluster_.Quiltctl({"resume", "job-00000000"});
  ASSERT_THAT(unknown.status(), IsOk());
  EXPECT_NE(unknown->exit_code, 0);
  EXPECT_THAT(unknown->err, HasSubstr("job-00000000"));
}

// Resumes chain: a resumed job resumed in turn goes on from its own
// checkpoint, the steps before it counted over both jobs; one without a
// checkpoint of its own (lost here) goes on from where it started. Each
// trains as the uninterrupted run at its steps.
TEST_F(Jobs, AResumedJobResumesFromItsOwnCheckpointOrWhereItStarted) {
  constexpr int64_t kTotal = 1000000;  // (cancelled long before)
  const std::string ckpt = cluster_.dir().File("ckpt");
  auto steps_of = [&](const std::string& id) {
    return std::stoll(Job(id).value("steps", std::string("0")));
  };
  const std::string a = Submit(SubmitArgs(ckpt, kTotal, "dp-even-ring"));
  ASSERT_FALSE(a.empty());
  ASSERT_NO_FATAL_FAILURE(CancelAfter(a, 13));
  std::string err;
  const std::string b = Resume(a, &err);
  const int64_t from_a = kTotal - steps_of(b);
  ASSERT_NO_FATAL_FAILURE(CancelAfter(b, 9));
  const std::string c = Resume(b, &err);
  const int64_t from_b = steps_of(b) - steps_of(c);
  EXPECT_GE(from_b, 8);
  EXPECT_THAT(Job(c).value("name", std::string()),
              HasSubstr("(resumed from " + b + " at step " + std::to_string(from_b) + ")"));
  // Its status counts the steps before it, over both jobs (int64: a JSON
  // string), and describe says so.
  EXPECT_EQ(Job(c).value("steps_before", std::string()), std::to_string(from_a + from_b));
  absl::StatusOr<CommandResult> described = cluster_.Quiltctl({"describe", "job", c});
  ASSERT_THAT(described.status(), IsOk());
  EXPECT_THAT(described->out, HasSubstr("Resumed from: " + b));
  EXPECT_THAT(described->out,
              HasSubstr("Trained before: " + std::to_string(from_a + from_b) + " steps"));
  ASSERT_TRUE(Eventually([&] { return Losses(cluster_, c).size() >= 20; }, absl::Seconds(60)));
  ASSERT_NO_FATAL_FAILURE(CancelAfter(c, 2));
  std::filesystem::remove_all(ckpt + "/" + c);
  const std::string d = Resume(c, &err);
  EXPECT_THAT(err, HasSubstr("no checkpoint of its own"));
  EXPECT_EQ(steps_of(d), steps_of(c));
  EXPECT_THAT(Job(d).value("name", std::string()), HasSubstr("(resumed from " + c + " at step 0)"));
  ASSERT_TRUE(Eventually([&] { return Losses(cluster_, d).size() >= 20; }, absl::Seconds(60)));
  ASSERT_NO_FATAL_FAILURE(CancelAfter(d, 20));

  SingleDeviceRun single;
  ASSERT_THAT(single.Train(from_a + from_b + 20), IsOk());
  const std::vector<float>& want = single.result.losses;
  for (const auto& [job, before] : std::vector<std::pair<std::string, int64_t>>{
           {b, from_a}, {c, from_a + from_b}, {d, from_a + from_b}}) {
    const std::vector<double> got = Losses(cluster_, job);
    ASSERT_GE(got.size(), 8u) << job;
    for (size_t k = 0; k < std::min<size_t>(got.size(), 20); ++k) {
      const double w = want[static_cast<size_t>(before) + k];
      ASSERT_NEAR(got[k], w, 1e-3 * (1 + std::abs(w)))
          << job << "'s step " << k + 1 << ", the run's step " << before + k + 1;
    }
  }
}

// A zoo model (no ONNX file to write the weights into) resumes too: its
// executors restore the checkpoint, so the new job trains as the
// uninterrupted run would have, on the same synthetic samples, with
// Adam's moments and step count.
TEST_F(Jobs, AZooJobResumesFromItsCheckpointAndRepeatsTheStepsAfterIt) {
  const std::string ckpt = cluster_.dir().File("ckpt");
  const std::string id =
      Submit({"submit", "zoo:mlp", "--batch", "16", "--steps", "1000000", "--optimizer", "adam",
              "--strategy", "dp-even-ring", "--data", "synthetic:7", "--checkpoint-dir", ckpt,
              "--checkpoint-every", "5"});
  ASSERT_FALSE(id.empty());
  ASSERT_NO_FATAL_FAILURE(CancelAfter(id, 23));
  const std::vector<double> old_losses = Losses(cluster_, id);
  const std::string resumed = Resume(id);
  ASSERT_FALSE(resumed.empty());
  const int64_t from = 1000000 - std::stoll(Job(resumed).value("steps", std::string("0")));
  EXPECT_EQ(from % 5, 0);
  ASSERT_TRUE(
      Eventually([&] { return Losses(cluster_, resumed).size() >= 10; }, absl::Seconds(60)));
  const std::vector<double> new_losses = Losses(cluster_, resumed);
  absl::StatusOr<CommandResult> stop = cluster_.Quiltctl({"cancel", resumed});
  ASSERT_THAT(stop.status(), IsOk());
  // The same model trained on one device without a break.
  quilt::v1::JobSpec spec;
  spec.set_zoo("mlp");
  spec.set_global_batch(16);
  spec.mutable_optimizer()->mutable_adam()->set_learning_rate(1e-3);
  absl::StatusOr<Graph> g = TrainingGraphForJob(spec);
  ASSERT_THAT(g.status(), IsOk());
  absl::StatusOr<DataSignature> sig = DataSignatureOf(*g);
  ASSERT_THAT(sig.status(), IsOk());
  absl::StatusOr<std::unique_ptr<Dataset>> data = MakeSyntheticDataset(*g, *sig, 7);
  ASSERT_THAT(data.status(), IsOk());
  SetComputeThreads(1);
  LocalTrainOptions lo;
  lo.batch = 16;
  lo.steps = from + 10;
  absl::StatusOr<LocalTrainResult> ref = TrainLocal(*g, data->get(), lo);
  ASSERT_THAT(ref.status(), IsOk());
  ASSERT_GE(old_losses.size(), 20u);
  for (size_t k = 0; k < 20; ++k) {
    EXPECT_NEAR(old_losses[k], ref->losses[k], 1e-4 * (1 + std::abs(ref->losses[k])))
        << "the old job's step " << k + 1;
  }
  for (size_t k = 0; k < 10; ++k) {
    const double w = ref->losses[static_cast<size_t>(from) + k];
    EXPECT_NEAR(new_losses[k], w, 1e-4 * (1 + std::abs(w)))
        << "the new job's step " << k + 1 << ", the run's " << from + k + 1;
  }
}

// With a restart left, a job that fails because a node died trains on by
// itself: once the node is no longer Ready, a new job from its last
// checkpoint on the nodes left, named on the old one.
TEST_F(Jobs, AJobWithARestartLeftTrainsOnWithoutTheNodeThatDied) {
  ASSERT_NO_FATAL_FAILURE(StartReadyWorker("worker-c"));
  std::vector<std::string> args = SubmitArgs(cluster_.dir().File("ckpt"), 1000000, "dp-even-ring");
  args.insert(args.end(), {"--max-restarts", "1"});
  const std::string id = Submit(args);
  ASSERT_TRUE(Eventually([&] { return Step(id) > 6; }, absl::Seconds(60))) << Job(id).dump();
  ASSERT_EQ(Job(id)["nodes"].size(), 3u) << Job(id).dump();
  cluster_.KillWorker("worker-b", SIGKILL);
  const std::string next = ResumedAs(id);
  ASSERT_FALSE(next.empty()) << Job(id).dump() << cluster_.Log("coordinator");
  EXPECT_EQ(State(id), "JOB_STATE_FAILED");
  ASSERT_TRUE(Eventually([&] { return Step(next) > 2; }, absl::Seconds(60))) << Job(next).dump();
  EXPECT_EQ(Job(next)["nodes"], nlohmann::json::array({"worker-a", "worker-c"}))
      << Job(next).dump();
  // From a checkpoint past the start, with the steps left; its checkpoints
  // beside the old job's.
  const std::string name = Job(next).value("name", std::string());
  EXPECT_THAT(name, HasSubstr("(resumed from " + id + " at step "));
  EXPECT_THAT(name, Not(HasSubstr(" at step 0)")));
  EXPECT_LT(std::stoll(Job(next).value("steps", std::string("0"))), 1000000);
  EXPECT_TRUE(
      Eventually([&] { return std::filesystem::exists(cluster_.dir().File("ckpt") + "/" + next); },
                 absl::Seconds(30)));
  absl::StatusOr<CommandResult> d = cluster_.Quiltctl({"describe", "job", id});
  ASSERT_THAT(d.status(), IsOk());
  EXPECT_THAT(d->out, HasSubstr("Resumed as: " + next));
  // Resumed once: by hand it is refused, naming the job that trains on.
  absl::StatusOr<CommandResult> again = cluster_.Quiltctl({"resume", id});
  ASSERT_THAT(again.status(), IsOk());
  EXPECT_NE(again->exit_code, 0);
  EXPECT_THAT(again->err, HasSubstr("was resumed already, as " + next));
  // Its one restart used: the new job fails with worker-c and stays failed.
  cluster_.KillWorker("worker-c", SIGKILL);
  ASSERT_TRUE(Eventually([&] { return State(next) == "JOB_STATE_FAILED"; }, absl::Seconds(60)))
      << Job(next).dump();
  absl::SleepFor(kNotReadyAfter + absl::Seconds(2));
  EXPECT_EQ(Job(next).value("resumed_as", std::string()), "") << Job(next).dump();
}

// A job with a restart left that fails before its first checkpoint is
// restarted from its first step (there is no checkpoint to go on from).
TEST_F(Jobs, AJobThatFailsBeforeItsFirstCheckpointRestartsFromItsFirstStep) {
  ASSERT_NO_FATAL_FAILURE(StartReadyWorker("worker-c"));
  const int64_t steps = 1000000;
  std::vector<std::string> args = SubmitArgs(cluster_.dir().File("ckpt"), steps, "dp-even-ring");
  *std::next(std::find(args.begin(), args.end(), "--checkpoint-every")) = "500000";
  args.insert(args.end(), {"--max-restarts", "1"});
  const std::string id = Submit(args);
  ASSERT_TRUE(Eventually([&] { return Step(id) > 2; }, absl::Seconds(60))) << Job(id).dump();
  cluster_.KillWorker("worker-b", SIGKILL);
  const std::string next = ResumedAs(id);
  ASSERT_FALSE(next.empty()) << Job(id).dump() << cluster_.Log("coordinator");
  EXPECT_EQ(Job(id).value("restart_error", std::string()), "") << Job(id).dump();
  EXPECT_THAT(Job(next).value("name", std::string()),
              HasSubstr("(resumed from " + id + " at step 0)"));
  EXPECT_EQ(std::stoll(Job(next).value("steps", std::string("0"))), steps) << Job(next).dump();
  ASSERT_TRUE(Eventually([&] { return Step(next) > 2; }, absl::Seconds(60))) << Job(next).dump();
  EXPECT_EQ(Job(next)["nodes"], nlohmann::json::array({"worker-a", "worker-c"}))
      << Job(next).dump();
  EXPECT_THAT(cluster_.Log("coordinator"), HasSubstr("it starts again from its first step"));
  absl::StatusOr<CommandResult> cancel = cluster_.Quiltctl({"cancel", next});
  ASSERT_THAT(cancel.status(), IsOk());
}

TEST_F(Jobs, ARunningJobOutlivesACoordinatorRestart) {
  constexpr int64_t kLongSteps = 600;
  const std::string id =
      Submit(SubmitArgs(cluster_.dir().File("ckpt"), kLongSteps, "dp-even-ring"));
  ASSERT_TRUE(Eventually([&] { return Step(id) > 2; }, absl::Seconds(60))) << Job(id).dump();
  const std::string address = cluster_.address();
  // A watch across the restart waits for the coordinator and goes on.
  absl::StatusOr<Subprocess> watch =
      Subprocess::Start({RunfilePath("src/cli/quiltctl"), "--coordinator", address, "watch", id},
                        cluster_.dir().File("watch.log"));
  ASSERT_THAT(watch.status(), IsOk());
  // (Watching before the stop: a watch that cannot reach the coordinator
  // at its start says so at once.)
  ASSERT_TRUE(Eventually(
      [&] {
        std::error_code ec;
        return std::filesystem::file_size(cluster_.dir().File("watch.log"), ec) > 0;
      },
      absl::Seconds(30)));
  const int64_t before = Step(id);
  cluster_.StopCoordinator(SIGTERM);
  ASSERT_TRUE(cluster_.WaitCoordinator(absl::Seconds(10)).has_value());
  absl::SleepFor(absl::Seconds(2));  // the executors train on meanwhile
  std::cerr << "step " << before << " of " << kLongSteps << " when the coordinator stopped\n";
  ASSERT_THAT(cluster_.StartCoordinator(address), IsOk()) << cluster_.Log("coordinator");
  absl::StatusOr<CommandResult> watched = cluster_.Quiltctl({"watch", id});
  ASSERT_THAT(watched.status(), IsOk());
  EXPECT_EQ(watched->exit_code, 0) << watched->out << watched->err << Job(id).dump();
  EXPECT_EQ(State(id), "JOB_STATE_SUCCEEDED") << Job(id).dump();
  EXPECT_EQ(Step(id), kLongSteps);
  std::optional<int> watch_exit = watch->Wait(absl::Seconds(30));
  ASSERT_TRUE(watch_exit.has_value());
  std::ifstream watch_log(cluster_.dir().File("watch.log"));
  const std::string watch_text((std::istreambuf_iterator<char>(watch_log)),
                               std::istreambuf_iterator<char>());
  EXPECT_EQ(*watch_exit, 0) << watch_text;
  EXPECT_THAT(watch_text, HasSubstr("watching again when the coordinator is back"));
  // Its final checkpoint is complete: it exports.
  absl::StatusOr<CommandResult> exported =
      cluster_.Quiltctl({"export", id, "-o", cluster_.dir().File("after-restart.onnx")});
  ASSERT_THAT(exported.status(), IsOk());
  EXPECT_EQ(exported->exit_code, 0) << exported->err;
}

TEST_F(Jobs, ACoordinatorKilledMidJobLosesNoStepsLoss) {
  constexpr int64_t kSteps = 400;
  const std::string id = Submit(SubmitArgs(cluster_.dir().File("ckpt"), kSteps, "dp-even-ring"));
  ASSERT_TRUE(Eventually([&] { return Step(id) > 2; }, absl::Seconds(60))) << Job(id).dump();
  const std::string address = cluster_.address();
  // Killed: nothing stored since its last write (every few seconds) but
  // what the workers kept.
  cluster_.StopCoordinator(SIGKILL);
  ASSERT_TRUE(cluster_.WaitCoordinator(absl::Seconds(10)).has_value());
  absl::SleepFor(absl::Seconds(1));
  ASSERT_THAT(cluster_.StartCoordinator(address), IsOk()) << cluster_.Log("coordinator");
  absl::StatusOr<CommandResult> watched = cluster_.Quiltctl({"watch", id});
  ASSERT_THAT(watched.status(), IsOk());
  EXPECT_EQ(State(id), "JOB_STATE_SUCCEEDED") << Job(id).dump();
  absl::StatusOr<CommandResult> losses = cluster_.Quiltctl({"losses", id, "-o", "json"});
  ASSERT_THAT(losses.status(), IsOk());
  ASSERT_EQ(losses->exit_code, 0) << losses->err;
  const nlohmann::json j = nlohmann::json::parse(losses->out, nullptr, false);
  ASSERT_TRUE(j.contains("losses")) << losses->out;
  ASSERT_EQ(j["losses"].size(), kSteps);
  int lost = 0;
  for (const nlohmann::json& l : j["losses"]) lost += l.is_number() ? 0 : 1;
  EXPECT_EQ(lost, 0) << losses->out;
  // The loss shown is the last step's.
  EXPECT_DOUBLE_EQ(j["losses"].back().get<double>(), Job(id).value("last_loss", 0.0));
  // The table form: a header and one line per step from --from on.
  absl::StatusOr<CommandResult> table = cluster_.Quiltctl({"losses", id, "--from", "391"});
  ASSERT_THAT(table.status(), IsOk());
  const std::vector<std::string> lines = absl::StrSplit(table->out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 11) << table->out;
  EXPECT_EQ(lines[0], "step\tloss");
  EXPECT_THAT(lines[1], ::testing::StartsWith("391\t"));
  EXPECT_THAT(lines[10], ::testing::StartsWith("400\t"));
}

TEST_F(Jobs, AStallShowsInDescribeAndGoesWhenTheJobGoesOn) {
  const std::string id = Submit(SubmitArgs(cluster_.dir().File("ckpt"), 1000000, "single-device"));
  ASSERT_TRUE(Eventually([&] { return Step(id) > 2; }, absl::Seconds(60))) << Job(id).dump();
  auto describe = [&] {
    absl::StatusOr<CommandResult> d = cluster_.Quiltctl({"describe", "job", id});
    return d.ok() ? d->out : std::string();
  };
  EXPECT_THAT(describe(), HasSubstr(", last step "));
  EXPECT_THAT(describe(), Not(HasSubstr("no step for")));
  // The executor hangs (stopped; the worker's stall timeout is minutes).
  absl::StatusOr<CommandResult> stop = RunCommand({"/usr/bin/pkill", "-STOP", "-f", id});
  ASSERT_THAT(stop.status(), IsOk());
  ASSERT_EQ(stop->exit_code, 0);
  ASSERT_TRUE(
      Eventually([&] { return absl::StrContains(describe(), "no step for"); }, absl::Seconds(30)))
      << describe();
  EXPECT_GT(Job(id).value("since_progress_s", 0.0), 10.0) << Job(id).dump();
  EXPECT_EQ(State(id), "JOB_STATE_RUNNING");
  // It goes on: the warning goes.
  const int64_t stalled_at = Step(id);
  absl::StatusOr<CommandResult> cont = RunCommand({"/usr/bin/pkill", "-CONT", "-f", id});
  ASSERT_THAT(cont.status(), IsOk());
  ASSERT_TRUE(Eventually([&] { return Step(id) > stalled_at; }, absl::Seconds(30)));
  EXPECT_THAT(describe(), Not(HasSubstr("no step for")));
  EXPECT_LT(Job(id).value("since_progress_s", 0.0), 10.0) << Job(id).dump();
  ASSERT_THAT(cluster_.Quiltctl({"cancel", id}).status(), IsOk());
}

TEST_F(Jobs, AWorkerStoppedMidJobFailsItSayingSo) {
  const std::string id = Submit(SubmitArgs(cluster_.dir().File("ckpt"), 1000000, "dp-even-ring"));
  ASSERT_TRUE(Eventually([&] { return Step(id) > 2; }, absl::Seconds(60))) << Job(id).dump();
  cluster_.KillWorker("worker-b", SIGTERM);
  ASSERT_TRUE(Eventually([&] { return State(id) == "JOB_STATE_FAILED"; }, absl::Seconds(30)))
      << Job(id).dump();
  // The stopped worker is named, not its peer's lost connection.
  EXPECT_THAT(Job(id).value("message", std::string()),
              HasSubstr("the worker on worker-b was stopped"));
  EXPECT_TRUE(Eventually([&] { return Executors(id) == 0; }, absl::Seconds(10)));
}

TEST(StalledExecutor, IsStoppedAndTheJobFailsSayingSo) {
  LocalCluster cluster;
  ASSERT_THAT(cluster.StartCoordinator().status(), IsOk());
  ASSERT_THAT(cluster.StartWorker("solo", {"--stall_timeout_ms", "3000"}).status(), IsOk());
  absl::StatusOr<CommandResult> r =
      cluster.Quiltctl(SubmitArgs(cluster.dir().File("ckpt"), 1000000, "single-device"));
  ASSERT_THAT(r.status(), IsOk());
  ASSERT_EQ(r->exit_code, 0) << r->err;
  std::string id = r->out;
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  auto job = [&] {
    absl::StatusOr<CommandResult> d = cluster.Quiltctl({"describe", "job", id, "-o", "json"});
    return d.ok() ? nlohmann::json::parse(d->out, nullptr, false) : nlohmann::json();
  };
  ASSERT_TRUE(Eventually(
      [&] {
        const nlohmann::json j = job();
        return j.is_object() && j.contains("step") && std::stoll(j["step"].get<std::string>()) > 2;
      },
      absl::Seconds(60)))
      << job().dump();
  // The executor hangs (as on a dead file server): stopped, not killed.
  absl::StatusOr<CommandResult> stop = RunCommand({"/usr/bin/pkill", "-STOP", "-f", id});
  ASSERT_THAT(stop.status(), IsOk());
  ASSERT_EQ(stop->exit_code, 0);
  ASSERT_TRUE(
      Eventually([&] { return job().value("state", "") == "JOB_STATE_FAILED"; }, absl::Seconds(30)))
      << job().dump();
  EXPECT_THAT(job().value("message", std::string()), HasSubstr("stopped as stalled"));
}

}  // namespace
}  // namespace quilt::testing
