// Cluster membership end to end with the real binaries: a coordinator, two
// workers and quiltctl on loopback.
#include <signal.h>

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "src/common/status_matchers.h"
#include "src/testing/temp_dir.h"
#include "test/integration/cluster_fixture.h"

namespace quilt::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;

std::string StateOf(LocalCluster& cluster, const std::string& node) {
  auto nodes = cluster.Nodes();
  if (!nodes.ok() || !nodes->count(node)) return "";
  return (*nodes)[node]["state"].get<std::string>();
}

class ClusterMembershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_THAT(cluster_.StartCoordinator(), IsOk());
    auto w1 = cluster_.StartWorker("w1");
    ASSERT_THAT(w1, IsOk()) << cluster_.Log("w1");
    // (Ten times slower: other tests running beside this one can make one
    // worker's measurement a few times slower than the other's.)
    auto w2 = cluster_.StartWorker("w2", {"--compute_slowdown", "10"});
    ASSERT_THAT(w2, IsOk()) << cluster_.Log("w2");
    incarnation_w2_ = *w2;
  }

  LocalCluster cluster_;
  std::string incarnation_w2_;
};

TEST_F(ClusterMembershipTest, TwoWorkers_ListedReadyWithMeasuredDevices) {
  auto nodes = cluster_.Nodes();
  ASSERT_THAT(nodes, IsOk());
  ASSERT_THAT(*nodes, SizeIs(2));
  for (const char* id : {"w1", "w2"}) {
    const auto& n = (*nodes)[id];
    EXPECT_EQ(n["state"], "NODE_STATE_READY") << id;
    ASSERT_EQ(n["info"]["devices"].size(), 1u) << id;
    const auto& d = n["info"]["devices"][0];
    EXPECT_EQ(d["id"], std::string(id) + "/cpu:0");
    EXPECT_EQ(d["kind"], "DEVICE_KIND_CPU");
    EXPECT_GT(d["measured_gemm_flops_per_s"].get<double>(), 1e8);
    EXPECT_GT(d["memory_bytes"].get<std::string>().size(), 0u);  // int64 → JSON string
  }
  // The emulated slow worker reports a lower speed.
  EXPECT_LT((*nodes)["w2"]["info"]["devices"][0]["measured_gemm_flops_per_s"].get<double>(),
            (*nodes)["w1"]["info"]["devices"][0]["measured_gemm_flops_per_s"].get<double>());
  auto status = cluster_.Quiltctl({"status"});
  ASSERT_THAT(status, IsOk());
  EXPECT_EQ(status->exit_code, 0) << status->err;
  EXPECT_THAT(status->out, HasSubstr("Nodes: 2/2 Ready"));
  auto table = cluster_.Quiltctl({"nodes"});
  ASSERT_THAT(table, IsOk());
  EXPECT_THAT(table->out, HasSubstr("HEARTBEAT_AGE"));
  EXPECT_THAT(table->out, HasSubstr("w2     Ready"));
}

TEST_F(ClusterMembershipTest, TheWorkersMeasureTheLinkBetweenThem) {
  // Each worker serves link probes; the coordinator has w1 probe w2.
  nlohmann::json link;
  ASSERT_TRUE(Eventually(
      [&] {
        auto r = cluster_.Quiltctl({"status", "-o", "json"});
        if (!r.ok() || r->exit_code != 0) return false;
        const nlohmann::json s = nlohmann::json::parse(r->out, nullptr, false);
        if (s.is_discarded() || s.value("links", nlohmann::json::array()).empty()) return false;
        link = s["links"][0];
        return true;
      },
      absl::Seconds(20)))
      << cluster_.Log("coordinator");
  EXPECT_EQ(link["src_node"], "w1");
  EXPECT_EQ(link["dst_node"], "w2");
  // Loopback: far above a slow network, and a round trip well under a
  // millisecond... on a loaded 2-core machine, under 10 ms.
  EXPECT_GT(link["link"]["bandwidth_bytes_per_s"].get<double>(), 1e8);
  EXPECT_GT(link["link"]["latency_s"].get<double>(), 0);
  EXPECT_LT(link["link"]["latency_s"].get<double>(), 0.01);
  auto status = cluster_.Quiltctl({"status"});
  ASSERT_THAT(status, IsOk());
  EXPECT_THAT(status->out, HasSubstr("w1 <-> w2"));
  // A link to a node that is no longer Ready is not listed.
  cluster_.KillWorker("w2", SIGTERM);
  ASSERT_TRUE(
      Eventually([&] { return StateOf(cluster_, "w2") == "NODE_STATE_DOWN"; }, absl::Seconds(10)));
  status = cluster_.Quiltctl({"status"});
  ASSERT_THAT(status, IsOk());
  EXPECT_THAT(status->out, Not(HasSubstr("w1 <-> w2")));
}

TEST_F(ClusterMembershipTest, KilledWorker_NotReadyThenDown_ThenBackWithNewIncarnation) {
  const absl::Time killed = absl::Now();
  cluster_.KillWorker("w2", SIGKILL);
  ASSERT_TRUE(Eventually([&] { return StateOf(cluster_, "w2") == "NODE_STATE_NOT_READY"; },
                         kNotReadyAfter + absl::Seconds(3)));
  const absl::Duration to_not_ready = absl::Now() - killed;
  EXPECT_GE(to_not_ready, kNotReadyAfter - kHeartbeatPeriod);
  ASSERT_TRUE(Eventually([&] { return StateOf(cluster_, "w2") == "NODE_STATE_DOWN"; },
                         kDownAfter + absl::Seconds(3)));
  EXPECT_EQ(StateOf(cluster_, "w1"), "NODE_STATE_READY");
  auto status = cluster_.Quiltctl({"status"});
  ASSERT_THAT(status, IsOk());
  EXPECT_THAT(status->out, HasSubstr("w2  Down: no heartbeat"));
  // A Ready node is not forgotten; a Down one is, until its worker is back.
  auto refused = cluster_.Quiltctl({"forget", "w1"});
  ASSERT_THAT(refused, IsOk());
  EXPECT_EQ(refused->exit_code, 1);
  EXPECT_THAT(refused->err, HasSubstr("only a Down node is forgotten"));
  auto forgot = cluster_.Quiltctl({"forget", "w2"});
  ASSERT_THAT(forgot, IsOk());
  EXPECT_EQ(forgot->exit_code, 0) << forgot->err;
  auto listed = cluster_.Nodes();
  ASSERT_THAT(listed, IsOk());
  EXPECT_EQ(listed->count("w2"), 0u);

  auto again = cluster_.StartWorker("w2");
  ASSERT_THAT(again, IsOk());
  EXPECT_NE(*again, incarnation_w2_);
  ASSERT_TRUE(
      Eventually([&] { return StateOf(cluster_, "w2") == "NODE_STATE_READY"; }, absl::Seconds(5)));
  auto nodes = cluster_.Nodes();
  ASSERT_THAT(nodes, IsOk());
  EXPECT_EQ((*nodes)["w2"]["incarnation"].get<std::string>().size() > 0, true);
}

TEST_F(ClusterMembershipTest, StoppedWorker_DownAtOnceSayingSo_ThenForgotten) {
  cluster_.KillWorker("w2", SIGTERM);
  ASSERT_TRUE(
      Eventually([&] { return StateOf(cluster_, "w2") == "NODE_STATE_DOWN"; }, absl::Seconds(10)))
      << cluster_.Log("w2");
  // Not after the not-ready and down timeouts: the worker's last heartbeat
  // said it was stopping (a silent node would be "no heartbeat for …").
  EXPECT_EQ(StateOf(cluster_, "w1"), "NODE_STATE_READY");
  auto status = cluster_.Quiltctl({"status"});
  ASSERT_THAT(status, IsOk());
  EXPECT_THAT(status->out, HasSubstr("w2  Down: its worker stopped"));
  auto forgot = cluster_.Quiltctl({"forget", "w2"});
  ASSERT_THAT(forgot, IsOk());
  EXPECT_EQ(forgot->exit_code, 0) << forgot->err;
}

TEST_F(ClusterMembershipTest, CoordinatorRestart_KeepsNodesAndWorkersReconnect) {
  const std::string address = cluster_.address();
  cluster_.StopCoordinator(SIGTERM);
  std::optional<int> exit = cluster_.WaitCoordinator(absl::Seconds(10));
  ASSERT_TRUE(exit.has_value()) << "coordinator did not stop on SIGTERM";
  EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0) << cluster_.Log("coordinator");

  auto down = cluster_.Quiltctl({"status"});
  ASSERT_THAT(down, IsOk());
  EXPECT_NE(down->exit_code, 0);
  EXPECT_THAT(down->err, HasSubstr(address));

  ASSERT_THAT(cluster_.StartCoordinator(address), IsOk()) << cluster_.Log("coordinator");
  auto nodes = cluster_.Nodes();
  ASSERT_THAT(nodes, IsOk());
  EXPECT_THAT(*nodes, SizeIs(2));
  ASSERT_TRUE(Eventually(
      [&] {
        return StateOf(cluster_, "w1") == "NODE_STATE_READY" &&
               StateOf(cluster_, "w2") == "NODE_STATE_READY";
      },
      absl::Seconds(10)))
      << cluster_.Log("w1");
}

TEST(Quiltctl, UnreachableCoordinator_NonZeroExitNamingAddress) {
  auto r = RunCommand(
      {RunfilePath("src/cli/quiltctl"), "--coordinator", "127.0.0.1:1", "--timeout", "2", "nodes"});
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->err, HasSubstr("127.0.0.1:1"));
}

TEST(Quiltctl, UsageErrors_NamedWithExitCode2) {
  const std::string q = RunfilePath("src/cli/quiltctl");
  TempDir dir;
  for (const auto& [argv, reason] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{q, "--timeout", "2", "stauts"}, "unknown command 'stauts'"},
           {{q, "describe", "jbo", "job-x"},
            "unknown command 'describe jbo' (commands of describe: job"},
           {{q, "status", "--nope"}, "--nope"},
           {{q, "train-local", "zoo:mlp", "--data", "synthetic", "--batch", "8", "--steps", "1",
             "--seed", "-1"},
            "--seed"},
           {{"/usr/bin/env", "QUILT_COORDINATOR=garbage", q, "status"},
            "$QUILT_COORDINATOR bad address 'garbage'"},
           // Beyond 64 bits (would be clamped), and an empty output path.
           {{q, "train-local", "zoo:mlp", "--data", "synthetic", "--batch", "8", "--steps",
             "99999999999999999999"},
            "--steps"},
           {{q, "plan", "zoo:mlp", "--batch", "8", "--cluster",
             RunfilePath("config/clusters/heterog_testbed.textproto"), "--trace", ""},
            "--trace"},
           // Text the coordinator would receive that is not UTF-8 (its
           // requests could not carry it).
           {{q, "--timeout", "2", "submit", "zoo:mlp", "--batch", "8", "--steps", "1", "--name",
             "bad\xff"},
            "--name: is not valid UTF-8"},
           {{q, "--timeout", "2", "submit", "zoo:mlp", "--batch", "8", "--steps", "1", "--frozen",
             "a,\xc3"},
            "--frozen: is not valid UTF-8"},
           {{q, "--timeout", "2", "cancel", "job-1", "--reason", "\xed\xa0\x80"},
            "--reason: is not valid UTF-8"},
           {{q, "--timeout", "2", "drain", "node\xff"}, "node: is not valid UTF-8"}}) {
    auto r = RunCommand(argv);
    ASSERT_THAT(r, IsOk());
    EXPECT_EQ(r->exit_code, 2) << reason << ": " << r->err;
    EXPECT_THAT(r->err, HasSubstr(reason));
  }
  // Refused before any work: momentum for adam; an output that cannot be
  // written, or is neither .onnx nor .npz (export contacts no coordinator;
  // plan plans nothing).
  for (const auto& [argv, reason] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{q, "train-local", "zoo:mlp", "--data", "synthetic", "--batch", "8", "--steps", "1",
             "--optimizer", "adam", "--momentum", "0.5"},
            "--momentum is SGD's"},
           {{q, "--coordinator", "127.0.0.1:1", "export", "job-x", "-o", dir.path()},
            dir.path() + " is a directory"},
           {{q, "--coordinator", "127.0.0.1:1", "export", "job-x", "-o", dir.File("w.txt")},
            "name a .onnx file (the model) or a .npz file"},
           {{q, "plan", "zoo:mlp", "--batch", "8", "--cluster",
             RunfilePath("config/clusters/heterog_testbed.textproto"), "--trace",
             "/nonexistent-dir/t.json"},
            "cannot write /nonexistent-dir/t.json"}}) {
    auto r = RunCommand(argv);
    ASSERT_THAT(r, IsOk());
    EXPECT_EQ(r->exit_code, 1) << reason << ": " << r->err;
    EXPECT_THAT(r->err, HasSubstr(reason));
    EXPECT_THAT(r->err, ::testing::Not(HasSubstr("Planning took")));
  }
}

}  // namespace
}  // namespace quilt::testing
