// quiltctl logs against a real cluster: the end of a job's executor log on
// each node, fetched through the workers' heartbeats — while the job runs
// (and followed until it ends) and after it ended, the last N lines, one
// node's, one run's; a node whose worker
// stopped is named with the reason and the others still shown; a node not
// in the job's world, or no such job, refused.
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/rpc/coordinator_client.h"
#include "test/integration/jobs_fixture.h"

namespace quilt::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(JobLogs, TheEndOfEachNodesExecutorLog) {
  LocalCluster cluster;
  ASSERT_THAT(cluster.StartCoordinator().status(), IsOk());
  ASSERT_THAT(cluster.StartWorker("worker-a").status(), IsOk()) << cluster.Log("worker-a");
  ASSERT_THAT(cluster.StartWorker("worker-b").status(), IsOk()) << cluster.Log("worker-b");
  auto run = [&](const std::vector<std::string>& args) {
    absl::StatusOr<CommandResult> r = cluster.Quiltctl(args);
    EXPECT_THAT(r.status(), IsOk());
    return r.ok() ? *r : CommandResult{};
  };

  // A job that runs until cancelled: its log while it runs.
  std::vector<std::string> args = SubmitArgs(cluster.dir().File("ckpt"), 1000000, "dp-even-ring");
  const CommandResult submitted = run(args);
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const std::string id = submitted.out.substr(0, submitted.out.find('\n'));
  CommandResult live;
  EXPECT_TRUE(Eventually(
      [&] {
        live = run({"logs", id});
        return live.exit_code == 0 && absl::StrContains(live.out, "connected to 1 other rank") &&
               absl::StrContains(live.out, "checkpoint of step 4 written");
      },
      absl::Seconds(60)))
      << live.out << live.err << cluster.Log("worker-a");
  EXPECT_THAT(live.out, HasSubstr("==> worker-a (rank 0): "));
  EXPECT_THAT(live.out, HasSubstr("rank 0 of 2 on worker-a: 1000000 steps"));
  EXPECT_THAT(live.out, HasSubstr("==> worker-b (rank 1): "));
  EXPECT_THAT(live.out, HasSubstr("rank 1 of 2 on worker-b: 1000000 steps"));
  // Following: the lines the nodes write (checkpoints every 4 steps), each
  // with its node, until the job ends (cancelled).
  CommandResult followed;
  std::thread follow([&] { followed = run({"logs", id, "-n", "1", "--follow"}); });
  absl::SleepFor(absl::Seconds(4));
  EXPECT_EQ(run({"cancel", id}).exit_code, 0);
  follow.join();
  EXPECT_EQ(followed.exit_code, 0) << followed.err;
  EXPECT_THAT(followed.out, HasSubstr("worker-a | info "));
  EXPECT_THAT(followed.out, HasSubstr("worker-b | info "));
  EXPECT_THAT(followed.out, HasSubstr("checkpoint of step"));

  // A job that ended: its last line, one node's.
  args = SubmitArgs(cluster.dir().File("ckpt"), 6, "dp-even-ring");
  args.push_back("--watch");
  const CommandResult done = run(args);
  ASSERT_EQ(done.exit_code, 0) << done.err << cluster.Log("worker-a");
  const std::string finished = done.out.substr(0, done.out.find('\n'));
  const CommandResult last = run({"logs", finished, "-n", "1", "--node", "worker-b"});
  EXPECT_EQ(last.exit_code, 0) << last.err;
  const std::vector<std::string> lines = absl::StrSplit(last.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << last.out;
  EXPECT_THAT(lines[0], HasSubstr("==> worker-b (rank 1): "));
  EXPECT_THAT(lines[1], HasSubstr("finished 6 steps in"));
  EXPECT_THAT(last.out, Not(HasSubstr("worker-a")));

  // As JSON: every node, its ranks, the whole log (fewer lines than asked).
  const CommandResult json = run({"logs", finished, "-o", "json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(j.is_object()) << json.out;
  ASSERT_EQ(j["nodes"].size(), 2u);
  EXPECT_EQ(j["nodes"][1]["node"], "worker-b");
  EXPECT_EQ(j["nodes"][1]["ranks"], nlohmann::json::array({1}));
  EXPECT_EQ(j["nodes"][1]["truncated"], false);
  EXPECT_THAT(j["nodes"][0]["text"].get<std::string>(),
              HasSubstr("rank 0 of 2 on worker-a: 6 steps"));
  EXPECT_EQ(j["nodes"][0]["error"], "");

  // One run of the job's executor on each node: here its first and only,
  // from the worker's line that begins it; a run a log does not hold is
  // named in that node's place; a run of 0 is refused.
  const CommandResult first = run({"logs", finished, "--run", "1", "--node", "worker-a"});
  EXPECT_EQ(first.exit_code, 0) << first.err;
  EXPECT_THAT(first.out,
              HasSubstr(", run 1 of 1 <==\n=== quilt-worker: run 1 (rank 0 of 2), started "));
  EXPECT_THAT(first.out, HasSubstr("finished 6 steps in"));
  const CommandResult none = run({"logs", finished, "--run", "2"});
  EXPECT_EQ(none.exit_code, 1) << none.err;
  EXPECT_THAT(none.out, HasSubstr("==> worker-b (rank 1): the log holds 1 run; there is no run 2"));
  const CommandResult zero = run({"logs", finished, "--run", "0"});
  EXPECT_NE(zero.exit_code, 0);
  EXPECT_THAT(zero.err, HasSubstr("--run takes 1 or more"));

  // The service itself refuses a run below -1 and a run with a follow's
  // offsets, naming the problem.
  rpc::JobClient client(cluster.address(), absl::Seconds(10));
  absl::StatusOr<quilt::v1::GetJobLogsResponse> bad = client.GetJobLogs(finished, 5, "", {}, -2);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("run must be 1 or more (-1: the last), not -2"));
  bad = client.GetJobLogs(finished, 5, "", {{"worker-a", 0}}, 1);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("it takes no run"));

  const CommandResult stranger = run({"logs", finished, "--node", "worker-z"});
  EXPECT_NE(stranger.exit_code, 0);
  EXPECT_THAT(stranger.err, HasSubstr("node worker-z is not in job " + finished +
                                      "'s world (worker-a, worker-b)"));
  const CommandResult nope = run({"logs", "job-nope"});
  EXPECT_NE(nope.exit_code, 0);
  EXPECT_THAT(nope.err, HasSubstr("job-nope"));

  // worker-b stops: its entry says why, worker-a's log is still shown.
  cluster.KillWorker("worker-b", SIGTERM);
  CommandResult partial;
  EXPECT_TRUE(Eventually(
      [&] {
        partial = run({"logs", finished});
        return absl::StrContains(partial.out, "node worker-b is not Ready");
      },
      absl::Seconds(30)))
      << partial.out << partial.err;
  EXPECT_EQ(partial.exit_code, 1);
  EXPECT_THAT(partial.out, HasSubstr("finished 6 steps in"));
}

}  // namespace
}  // namespace quilt::testing
