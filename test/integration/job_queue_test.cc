// Queueing on a live cluster: a worker offering 40 MiB runs one job of
// ~24 MiB; a second is refused, or with --queue waits QUEUED (through a
// coordinator restart) and starts on its own once the first is cancelled;
// a small short job backfills ahead of it; a higher --priority goes ahead;
// others queue first in, first out; a job the idle cluster cannot fit is
// refused rather than queued; a resume with --queue queues too; a batch no
// plan holds at once on the idle worker runs as micro-batches.
#include <csignal>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "test/integration/cluster_fixture.h"

namespace quilt::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class Queue : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_THAT(cluster_.StartCoordinator().status(), IsOk());
    ASSERT_THAT(cluster_.StartWorker("worker-a", {"--cpu_memory_mb", "40"}).status(), IsOk());
  }

  // The MLP fixture on synthetic data: ~24 MiB at a batch of 32768.
  std::vector<std::string> Args(int64_t batch, int64_t steps, bool queue,
                                const std::string& model = "mlp") {
    std::vector<std::string> args = {
        "submit",           RunfilePath("test/fixtures/" + model + "/model.onnx"),
        "--loss",           "softmax_cross_entropy",
        "--batch",          std::to_string(batch),
        "--steps",          std::to_string(steps),
        "--data",           "synthetic",
        "--checkpoint-dir", cluster_.dir().File("ckpt")};
    if (queue) args.push_back("--queue");
    return args;
  }

  CommandResult Run(const std::vector<std::string>& args) {
    absl::StatusOr<CommandResult> r = cluster_.Quiltctl(args);
    EXPECT_THAT(r.status(), IsOk());
    return r.ok() ? *r : CommandResult{};
  }

  std::string Submitted(const CommandResult& r) {
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return std::string(absl::StripAsciiWhitespace(r.out));
  }

  nlohmann::json Job(const std::string& id) {
    const CommandResult r = Run({"describe", "job", id, "-o", "json"});
    if (r.exit_code != 0) return nlohmann::json::object();
    return nlohmann::json::parse(r.out, nullptr, false);
  }

  std::string State(const std::string& id) { return Job(id).value("state", std::string()); }

  int64_t Step(const std::string& id) {
    const nlohmann::json j = Job(id);
    return j.contains("step") ? std::stoll(j["step"].get<std::string>()) : 0;  // int64: a string
  }

  LocalCluster cluster_;
};

TEST_F(Queue, AJobWaitsForRoomAndStartsWhenTheJobAheadEnds) {
  const std::string first = Submitted(Run(Args(32768, 1000000, false)));
  ASSERT_TRUE(Eventually([&] { return State(first) == "JOB_STATE_RUNNING"; }, absl::Seconds(60)))
      << Job(first).dump();
  // Without --queue: refused, saying what holds the memory.
  const CommandResult refused = Run(Args(32768, 3, false));
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.err, HasSubstr("the jobs running on worker-a hold part of it"));
  // With it: queued, with the reason.
  const CommandResult queued = Run(Args(32768, 3, true));
  const std::string second = Submitted(queued);
  EXPECT_THAT(queued.err, HasSubstr("queued: waiting for room"));
  nlohmann::json j = Job(second);
  EXPECT_EQ(j.value("state", ""), "JOB_STATE_QUEUED") << j.dump();
  EXPECT_TRUE(j["nodes"].empty()) << j.dump();
  const CommandResult described = Run({"describe", "job", second});
  EXPECT_THAT(described.out, HasSubstr("State:      QUEUED — waiting for room"));
  EXPECT_THAT(described.out, HasSubstr("not planned yet"));
  // A small job that fits now and is predicted to end long before the
  // running job starts ahead of the queued one (backfill) and trains to
  // its end while that one waits.
  const std::string small = Submitted(Run(Args(16, 3, true)));
  ASSERT_TRUE(Eventually([&] { return State(small) == "JOB_STATE_SUCCEEDED"; }, absl::Seconds(60)))
      << Job(small).dump() << cluster_.Log("coordinator");
  EXPECT_EQ(State(second), "JOB_STATE_QUEUED");
  EXPECT_THAT(cluster_.Log("coordinator"), HasSubstr("queued job " + small + " backfills"));
  // A job of a higher priority goes ahead of the queued one.
  std::vector<std::string> urgent_args = Args(32768, 3, true);
  urgent_args.insert(urgent_args.end(), {"--priority", "5"});
  const std::string urgent = Submitted(Run(urgent_args));
  EXPECT_EQ(State(urgent), "JOB_STATE_QUEUED");
  EXPECT_THAT(Job(urgent).value("message", ""), HasSubstr("waiting for room"));
  EXPECT_THAT(Job(second).value("message", ""), HasSubstr("behind 1 queued job(s)"));
  EXPECT_THAT(Run({"describe", "job", urgent}).out, HasSubstr("Priority:   5"));
  // --priority orders the queue only.
  std::vector<std::string> unqueued = Args(16, 3, false);
  unqueued.insert(unqueued.end(), {"--priority", "5"});
  const CommandResult no_queue = Run(unqueued);
  EXPECT_NE(no_queue.exit_code, 0);
  EXPECT_THAT(no_queue.err, HasSubstr("--priority orders the queue: it needs --queue"));
  // One the idle worker cannot hold is refused, not queued (the CNN's
  // batch norm rules out running it as micro-batches, as the MLP would).
  const CommandResult never = Run(Args(131072, 3, true, "cnn"));
  EXPECT_NE(never.exit_code, 0);
  EXPECT_THAT(never.err, HasSubstr("would not start with no other job running either: not queued"));
  // One that cannot backfill (no room) queues behind both, and can be
  // cancelled.
  const std::string late = Submitted(Run(Args(32768, 3, true)));
  EXPECT_EQ(State(late), "JOB_STATE_QUEUED");
  EXPECT_THAT(Job(late).value("message", ""), HasSubstr("behind 2 queued job(s)"));
  const CommandResult listed = Run({"jobs"});
  EXPECT_THAT(listed.out, HasSubstr("QUEUED"));
  EXPECT_EQ(Run({"cancel", late}).exit_code, 0);
  EXPECT_EQ(State(late), "JOB_STATE_CANCELLED");

  // The queue survives a coordinator restart.
  cluster_.StopCoordinator(SIGTERM);
  ASSERT_TRUE(cluster_.WaitCoordinator(absl::Seconds(10)).has_value());
  ASSERT_THAT(cluster_.StartCoordinator(cluster_.address()), IsOk()) << cluster_.Log("coordinator");
  EXPECT_EQ(State(second), "JOB_STATE_QUEUED") << Job(second).dump();
  ASSERT_TRUE(Eventually([&] { return State(first) == "JOB_STATE_RUNNING"; }, absl::Seconds(30)))
      << Job(first).dump();
  // Still no room: it waits on.
  absl::SleepFor(absl::Seconds(2));
  EXPECT_EQ(State(second), "JOB_STATE_QUEUED") << Job(second).dump();

  // Room: the urgent job starts first, then the other, each on its own,
  // and both train to the end.
  EXPECT_EQ(Run({"cancel", first}).exit_code, 0);
  ASSERT_TRUE(
      Eventually([&] { return State(second) == "JOB_STATE_SUCCEEDED"; }, absl::Seconds(120)))
      << Job(second).dump() << cluster_.Log("coordinator");
  EXPECT_EQ(State(urgent), "JOB_STATE_SUCCEEDED") << Job(urgent).dump();
  j = Job(second);
  EXPECT_EQ(j["nodes"], nlohmann::json::array({"worker-a"})) << j.dump();
  const std::string log = cluster_.Log("coordinator");
  const size_t urgent_at = log.find("queued job " + urgent + " starts");
  const size_t second_at = log.find("queued job " + second + " starts");
  ASSERT_NE(urgent_at, std::string::npos) << log;
  ASSERT_NE(second_at, std::string::npos) << log;
  EXPECT_LT(urgent_at, second_at);
}

TEST_F(Queue, AResumeQueuesAndGoesOnFromItsCheckpoint) {
  // Submitted without --queue: its resume is refused while there is no
  // room, and with --queue waits for it.
  std::vector<std::string> args = Args(32768, 1000000, false);
  args.insert(args.end(), {"--checkpoint-every", "2"});
  const std::string old = Submitted(Run(args));
  ASSERT_TRUE(Eventually([&] { return Step(old) > 4; }, absl::Seconds(60))) << Job(old).dump();
  ASSERT_EQ(Run({"cancel", old}).exit_code, 0);
  const std::string blocker = Submitted(Run(Args(32768, 1000000, false)));
  ASSERT_TRUE(Eventually([&] { return State(blocker) == "JOB_STATE_RUNNING"; }, absl::Seconds(60)))
      << Job(blocker).dump();
  const CommandResult refused = Run({"resume", old});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.err, HasSubstr("hold part of it"));
  const CommandResult queued = Run({"resume", old, "--queue"});
  const std::string resumed = Submitted(queued);
  EXPECT_THAT(queued.err, HasSubstr("queued: waiting for room"));
  nlohmann::json j = Job(resumed);
  EXPECT_EQ(j.value("state", ""), "JOB_STATE_QUEUED") << j.dump();
  EXPECT_EQ(j.value("resumed_from", ""), old);
  EXPECT_EQ(Job(old).value("resumed_as", ""), resumed);
  // Its checkpoint is still needed: the old job is not deleted with it.
  const CommandResult deleted = Run({"delete", old});
  EXPECT_NE(deleted.exit_code, 0);
  EXPECT_THAT(deleted.err, HasSubstr("goes on from this job's checkpoint and has not started"));
  // A second resume of the same job is refused: it was resumed already.
  const CommandResult again = Run({"resume", old});
  EXPECT_NE(again.exit_code, 0);
  EXPECT_THAT(again.err, HasSubstr(resumed));
  ASSERT_EQ(Run({"cancel", blocker}).exit_code, 0);
  ASSERT_TRUE(Eventually([&] { return Step(resumed) > 1; }, absl::Seconds(60)))
      << Job(resumed).dump() << cluster_.Log("coordinator");
  j = Job(resumed);
  EXPECT_GE(std::stoll(j.value("steps_before", std::string("0"))), 2) << j.dump();
  EXPECT_EQ(Run({"cancel", resumed}).exit_code, 0);
  ASSERT_TRUE(
      Eventually([&] { return State(resumed) == "JOB_STATE_CANCELLED"; }, absl::Seconds(60)))
      << Job(resumed).dump();
  // (Its executor stops after the job is cancelled, and may write a
  // checkpoint on its way out: it has ended before the checkpoints are
  // moved.)
  ASSERT_TRUE(Eventually(
      [&] {
        for (absl::string_view line : absl::StrSplit(cluster_.Log("worker-a"), '\n')) {
          if (absl::StrContains(line, "job " + resumed + ": executor pid=") &&
              absl::StrContains(line, " ended: ")) {
            return true;
          }
        }
        return false;
      },
      absl::Seconds(60)))
      << cluster_.Log("worker-a");
  // Without a checkpoint of its own, a resume of the resumed job would read
  // the old job's again: the old one is not deleted with it.
  const std::string own = cluster_.dir().File("ckpt") + "/" + resumed;
  const std::string aside = own + ".aside";
  std::filesystem::rename(own, aside);
  const CommandResult needed = Run({"delete", old});
  EXPECT_NE(needed.exit_code, 0);
  EXPECT_THAT(needed.err, HasSubstr("has written none of its own yet"));
  // With its checkpoints back, the old job goes.
  std::filesystem::rename(aside, own);
  const CommandResult gone = Run({"delete", old});
  EXPECT_EQ(gone.exit_code, 0) << gone.err;
  EXPECT_FALSE(std::filesystem::exists(cluster_.dir().File("ckpt") + "/" + old));
}

// A batch four times what the worker holds at once, on the idle worker:
// the job runs it as micro-batches, trains to its end, and the executor
// held no more than the worker offers. With --no-micro-batches the same
// job is refused, saying no plan fits.
TEST_F(Queue, ABatchNoPlanHoldsAtOnceRunsAsMicroBatches) {
  std::vector<std::string> whole = Args(131072, 2, false);
  whole.push_back("--no-micro-batches");
  const CommandResult refused = Run(whole);
  EXPECT_NE(refused.exit_code, 0) << refused.out;
  EXPECT_THAT(refused.err, HasSubstr("fits the memory of the Ready nodes' devices"));
  EXPECT_THAT(Run({"jobs"}).out, Not(HasSubstr("RUNNING")));
  const std::string id = Submitted(Run(Args(131072, 2, false)));
  ASSERT_TRUE(Eventually([&] { return State(id) == "JOB_STATE_SUCCEEDED"; }, absl::Seconds(120)))
      << Job(id).dump();
  const nlohmann::json j = Job(id);
  EXPECT_GT(j.value("micro_batches", 0), 1) << j.dump();
  ASSERT_TRUE(j.contains("measured_memory_bytes")) << j.dump();
  const int64_t held = std::stoll(j["measured_memory_bytes"].value("worker-a", std::string("0")));
  EXPECT_GT(held, 0);
  EXPECT_LE(held, int64_t{40} << 20);
  const CommandResult described = Run({"describe", "job", id});
  EXPECT_THAT(described.out, HasSubstr("micro-batches, their gradients summed"));
  EXPECT_THAT(described.out, ::testing::ContainsRegex("loss [0-9]"));
}

}  // namespace
}  // namespace quilt::testing
