// JobService.PlanJob end to end: quiltctl without --cluster asks the
// coordinator, which plans on the Ready workers as they registered (their
// measured speeds), for zoo models and ONNX files alike.
#include <signal.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "test/integration/cluster_fixture.h"

namespace quilt::testing {
namespace {

using ::testing::HasSubstr;

TEST(PlanJob, NoReadyNodes_IsAFailedPrecondition) {
  LocalCluster cluster;
  ASSERT_THAT(cluster.StartCoordinator(), IsOk());
  auto r = cluster.Quiltctl({"plan", "zoo:mlp", "--batch", "64"});
  ASSERT_THAT(r, IsOk());
  EXPECT_NE(r->exit_code, 0);
  EXPECT_THAT(r->err, HasSubstr("no Ready nodes"));
}

TEST(PlanJob, PlansOnTheLiveWorkersWithTheirMeasuredSpeeds) {
  LocalCluster cluster;
  ASSERT_THAT(cluster.StartCoordinator(), IsOk());
  ASSERT_THAT(cluster.StartWorker("fast"), IsOk()) << cluster.Log("fast");
  ASSERT_THAT(cluster.StartWorker("slow", {"--compute_slowdown", "4"}), IsOk())
      << cluster.Log("slow");
  auto r =
      cluster.Quiltctl({"plan", "zoo:cnn", "--batch", "64", "-o", "json", "--time-budget", "2"});
  ASSERT_THAT(r, IsOk());
  ASSERT_EQ(r->exit_code, 0) << r->err << cluster.Log("coordinator");
  const nlohmann::json report = nlohmann::json::parse(r->out);
  EXPECT_EQ(report["model"], "cnn");
  ASSERT_EQ(report["estimates"].size(), 6u);  // five baselines and the planner's
  EXPECT_GT(report["lower_bound_s"].get<double>(), 0);
  for (const auto& e : report["estimates"]) {
    if (e["name"] == "single-device" || e["name"] == "heterog") continue;
    std::set<std::string> devices;
    for (const auto& m : e["memory"]) devices.insert(m["device"].get<std::string>());
    // The even splits use both; a proportional split may leave the slow
    // worker out (its profiled time per step outweighs what its rows save).
    if (e["name"].get<std::string>().rfind("dp-even", 0) == 0) {
      EXPECT_EQ(devices, (std::set<std::string>{"fast/cpu:0", "slow/cpu:0"})) << e["name"];
    } else {
      EXPECT_TRUE(devices.count("fast/cpu:0")) << e["name"];
    }
  }
  // The proportional split gives the fast worker more rows than the one
  // slowed four times.
  for (const auto& e : report["estimates"]) {
    if (e["name"] != "dp-proportional-ring" || !e["note"].get<std::string>().empty()) continue;
    std::map<std::string, int> rows;
    for (const auto& rep : e["strategy"]["groups"][0]["replicas"]) {
      rows[rep["device"].get<std::string>()] = rep["replicas"].get<int>();
    }
    EXPECT_GT(rows["fast/cpu:0"], rows["slow/cpu:0"]);
  }
  // The single device is the fastest one.
  EXPECT_EQ(report["estimates"][0]["memory"][0]["device"], "fast/cpu:0");

  // An ONNX file travels as bytes and plans the same way.
  auto onnx = cluster.Quiltctl({"plan", RunfilePath("test/fixtures/mlp/model.onnx"), "--batch",
                                "32", "--strategy", "dp-even-ring"});
  ASSERT_THAT(onnx, IsOk());
  ASSERT_EQ(onnx->exit_code, 0) << onnx->err;
  EXPECT_THAT(onnx->out, HasSubstr("dp-even-ring"));

  // The planner's options travel too: about as many groups as asked for,
  // far fewer than the cluster's default (the same model, above).
  int default_groups = 0;
  for (const auto& e : report["estimates"]) {
    if (e["name"] == "heterog") default_groups = e["search"]["groups"].get<int>();
  }
  ASSERT_GT(default_groups, 3);
  auto groups = cluster.Quiltctl({"plan", "zoo:cnn", "--batch", "64", "-o", "json", "--strategy",
                                  "heterog", "--groups", "2", "--time-budget", "1"});
  ASSERT_THAT(groups, IsOk());
  ASSERT_EQ(groups->exit_code, 0) << groups->err;
  const nlohmann::json grouped = nlohmann::json::parse(groups->out);
  int heterog = 0;
  for (const auto& e : grouped["estimates"]) {
    if (e["name"] != "heterog") continue;
    ++heterog;
    EXPECT_LE(e["search"]["groups"].get<int>(), 3) << groups->out;
  }
  EXPECT_EQ(heterog, 1) << groups->out;

  // Bad requests come back as clear errors.
  auto strategy = cluster.Quiltctl({"plan", "zoo:mlp", "--batch", "8", "--strategy", "dp-magic"});
  ASSERT_THAT(strategy, IsOk());
  EXPECT_NE(strategy->exit_code, 0);
  EXPECT_THAT(strategy->err, HasSubstr("unknown strategy 'dp-magic'"));

  // A worker that goes away is no longer planned for.
  cluster.KillWorker("slow", SIGKILL);
  ASSERT_TRUE(Eventually(
      [&] {
        auto nodes = cluster.Nodes();
        return nodes.ok() && (*nodes)["slow"]["state"] != "NODE_STATE_READY";
      },
      absl::Seconds(10)));
  auto after =
      cluster.Quiltctl({"plan", "zoo:mlp", "--batch", "16", "-o", "json", "--time-budget", "1"});
  ASSERT_THAT(after, IsOk());
  ASSERT_EQ(after->exit_code, 0) << after->err;
  // One device left: single-device and the planner's plan.
  EXPECT_EQ(nlohmann::json::parse(after->out)["estimates"].size(), 2u);
  // A data-parallel strategy is known, but needs two devices.
  auto dp = cluster.Quiltctl({"plan", "zoo:mlp", "--batch", "16", "--strategy", "dp-even-ps"});
  ASSERT_THAT(dp, IsOk());
  EXPECT_NE(dp->exit_code, 0);
  EXPECT_THAT(dp->err, HasSubstr("'dp-even-ps' splits the batch over at least 2 devices; the "
                                 "cluster has 1"));
}

// The planner's time budget: the coordinator's plan_time_budget_ms where
// the request names none, the request's where it does.
TEST(PlanJob, TheBudgetIsTheCoordinatorsUnlessTheRequestNamesOne) {
  LocalCluster cluster;
  ASSERT_THAT(cluster.StartCoordinator("127.0.0.1:0", {"--plan_time_budget_ms", "2500"}), IsOk());
  ASSERT_THAT(cluster.StartWorker("w0"), IsOk()) << cluster.Log("w0");
  for (const auto& [flags, budget] : std::vector<std::pair<std::vector<std::string>, double>>{
           {{}, 2.5}, {{"--time-budget", "1.5"}, 1.5}}) {
    std::vector<std::string> args = {"plan",       "zoo:mlp", "--batch", "16",
                                     "--strategy", "heterog", "-o",      "json"};
    args.insert(args.end(), flags.begin(), flags.end());
    auto r = cluster.Quiltctl(args);
    ASSERT_THAT(r, IsOk());
    ASSERT_EQ(r->exit_code, 0) << r->err << cluster.Log("coordinator");
    EXPECT_DOUBLE_EQ(nlohmann::json::parse(r->out)["time_budget_s"].get<double>(), budget)
        << r->out;
  }
}

}  // namespace
}  // namespace quilt::testing
