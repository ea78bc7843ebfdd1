#include "src/coordinator/node_registry.h"

#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/fake_clock.h"
#include "src/common/status_matchers.h"
#include "src/coordinator/store/sqlite_store.h"
#include "src/testing/node_info.h"
#include "src/testing/temp_dir.h"

namespace quilt {
namespace {

using quilt::v1::ClusterEvent;
using quilt::v1::NodeState;
using ::testing::HasSubstr;
using ::testing::SizeIs;

quilt::v1::NodeInfo Info(const std::string& id, int cpus = 1) {
  return testing::CpuNodeInfo(id, cpus);
}

class NodeRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override { Reopen(); }

  void Reopen() {
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
  }

  NodeState StateOf(const std::string& id) {
    for (const auto& n : registry_->ListNodes()) {
      if (n.info().node_id() == id) return n.state();
    }
    return quilt::v1::NODE_STATE_UNSPECIFIED;
  }

  testing::TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<NodeRegistry> registry_;
};

TEST_F(NodeRegistryTest, RegisterThenHeartbeat_IsReady) {
  ASSERT_THAT(registry_->Register(Info("a", 2), 11), IsOk());
  EXPECT_EQ(StateOf("a"), quilt::v1::NODE_STATE_READY);
  clock_.Advance(absl::Seconds(1));
  EXPECT_THAT(registry_->Heartbeat("a", 11), IsOk());
  auto nodes = registry_->ListNodes();
  ASSERT_THAT(nodes, SizeIs(1));
  EXPECT_EQ(nodes[0].info().devices_size(), 2);
  EXPECT_EQ(nodes[0].incarnation(), 11u);
}

TEST_F(NodeRegistryTest, CoordinatorPaused_NotCountedAsSilence) {
  ASSERT_THAT(registry_->Register(Info("a"), 11), IsOk());
  clock_.Advance(absl::Seconds(40));
  registry_->ExcuseSilence(absl::Seconds(39));
  registry_->CheckLiveness();
  EXPECT_EQ(StateOf("a"), quilt::v1::NODE_STATE_READY);
  // Silence after the pause still counts.
  clock_.Advance(absl::Seconds(30));
  registry_->CheckLiveness();
  EXPECT_EQ(StateOf("a"), quilt::v1::NODE_STATE_DOWN);
}

TEST_F(NodeRegistryTest, MissedHeartbeats_NotReadyThenDownThenRecovered) {
  ASSERT_THAT(registry_->Register(Info("a"), 11), IsOk());
  clock_.Advance(absl::Seconds(4.9));
  registry_->CheckLiveness();
  EXPECT_EQ(StateOf("a"), quilt::v1::NODE_STATE_READY);
  clock_.Advance(absl::Seconds(0.2));
  registry_->CheckLiveness();
  EXPECT_EQ(StateOf("a"), quilt::v1::NODE_STATE_NOT_READY);
  EXPECT_FALSE(registry_->IsReady("a"));
  EXPECT_FALSE(registry_->IsReady("unknown"));
  clock_.Advance(absl::Seconds(25));
  registry_->CheckLiveness();
  EXPECT_EQ(StateOf("a"), quilt::v1::NODE_STATE_DOWN);
  EXPECT_THAT(registry_->ListNodes()[0].reason(), HasSubstr("no heartbeat for 30.1 s"));
  ASSERT_THAT(registry_->Heartbeat("a", 11), IsOk());
  EXPECT_EQ(StateOf("a"), quilt::v1::NODE_STATE_READY);
  EXPECT_TRUE(registry_->IsReady("a"));
  auto events = registry_->RecentEvents(10);
  ASSERT_THAT(events, SizeIs(4));
  EXPECT_EQ(events[0].kind(), ClusterEvent::KIND_NODE_RECOVERED);
  EXPECT_EQ(events[1].kind(), ClusterEvent::KIND_NODE_DOWN);
  EXPECT_EQ(events[2].kind(), ClusterEvent::KIND_NODE_NOT_READY);
  EXPECT_EQ(events[3].kind(), ClusterEvent::KIND_NODE_REGISTERED);
}

TEST_F(NodeRegistryTest, AStoppingWorkersNodeIsDownAtOnceAndMayBeForgotten) {
  ASSERT_THAT(registry_->Register(Info("a"), 11), IsOk());
  ASSERT_THAT(registry_->Register(Info("b"), 12), IsOk());
  // Only the registered incarnation may take its node down.
  EXPECT_THAT(registry_->Leave("a", 99), StatusIs(absl::StatusCode::kAborted));
  EXPECT_THAT(registry_->Leave("c", 1), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(StateOf("a"), quilt::v1::NODE_STATE_READY);
  ASSERT_THAT(registry_->Leave("a", 11), IsOk());
  EXPECT_EQ(StateOf("a"), quilt::v1::NODE_STATE_DOWN);
  EXPECT_EQ(StateOf("b"), quilt::v1::NODE_STATE_READY);
  EXPECT_EQ(registry_->ListNodes()[0].reason(), "its worker stopped");
  EXPECT_EQ(registry_->RecentEvents(1)[0].kind(), ClusterEvent::KIND_NODE_DOWN);
  // A new worker process for a stopped worker's node registers at once
  // (while the old one heartbeats, it is refused).
  ASSERT_THAT(registry_->Register(Info("b"), 13), StatusIs(absl::StatusCode::kAlreadyExists));
  ASSERT_THAT(registry_->Leave("b", 12), IsOk());
  ASSERT_THAT(registry_->Register(Info("b"), 13), IsOk());
  EXPECT_EQ(StateOf("b"), quilt::v1::NODE_STATE_READY);
  // Stored: a restarted coordinator keeps it Down, and it may be forgotten.
  Reopen();
  EXPECT_EQ(StateOf("a"), quilt::v1::NODE_STATE_DOWN);
  EXPECT_THAT(registry_->Forget("a"), IsOk());
}

TEST_F(NodeRegistryTest, StaleIncarnationHeartbeat_IsAborted) {
  ASSERT_THAT(registry_->Register(Info("a"), 11), IsOk());
  // A second live worker under the same id is refused.
  EXPECT_THAT(registry_->Register(Info("a"), 12),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("node id a is in use by another running worker")));
  EXPECT_THAT(registry_->Heartbeat("a", 11), IsOk());
  // Silent past not-ready: the worker restarted.
  clock_.Advance(absl::Seconds(5.1));
  ASSERT_THAT(registry_->Register(Info("a"), 12), IsOk());
  EXPECT_THAT(registry_->Heartbeat("a", 11),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("stale")));
  EXPECT_THAT(registry_->Heartbeat("a", 12), IsOk());
  EXPECT_EQ(registry_->RecentEvents(1)[0].kind(), ClusterEvent::KIND_NODE_RESTARTED);
}

TEST_F(NodeRegistryTest, UnknownNodeHeartbeat_IsNotFound) {
  EXPECT_THAT(registry_->Heartbeat("ghost", 1), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(NodeRegistryTest, MalformedRegistrations_AreInvalidArgument) {
  EXPECT_THAT(registry_->Register(Info(""), 1), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(registry_->Register(Info("a b"), 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("node_id")));
  EXPECT_THAT(registry_->Register(Info("a"), 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("incarnation")));
  auto dup = Info("a", 1);
  *dup.add_devices() = dup.devices(0);
  EXPECT_THAT(registry_->Register(dup, 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("listed twice")));
  auto foreign = Info("a", 1);
  foreign.mutable_devices(0)->set_id("b/cpu:0");
  EXPECT_THAT(registry_->Register(foreign, 1), StatusIs(absl::StatusCode::kInvalidArgument));
  auto nan = Info("a", 1);
  nan.mutable_devices(0)->set_measured_gemm_flops_per_s(-1);
  EXPECT_THAT(registry_->Register(nan, 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("measured_gemm")));
  EXPECT_THAT(registry_->ListNodes(), SizeIs(0));
}

TEST_F(NodeRegistryTest, CoordinatorRestart_KeepsNodesAsNotReadyUntilHeartbeat) {
  ASSERT_THAT(registry_->Register(Info("a"), 11), IsOk());
  ASSERT_THAT(registry_->Register(Info("b"), 22), IsOk());
  Reopen();
  auto nodes = registry_->ListNodes();
  ASSERT_THAT(nodes, SizeIs(2));
  EXPECT_EQ(nodes[0].state(), quilt::v1::NODE_STATE_NOT_READY);
  EXPECT_THAT(nodes[0].reason(), HasSubstr("coordinator restarted"));
  // The same worker process heartbeats again: accepted, Ready.
  ASSERT_THAT(registry_->Heartbeat("a", 11), IsOk());
  EXPECT_EQ(StateOf("a"), quilt::v1::NODE_STATE_READY);
  // b stays silent: Down after down_after, counted from the restart.
  clock_.Advance(absl::Seconds(31));
  registry_->CheckLiveness();
  EXPECT_EQ(StateOf("b"), quilt::v1::NODE_STATE_DOWN);
  // Events survived too.
  EXPECT_GE(registry_->RecentEvents(100).size(), 3u);
}

TEST_F(NodeRegistryTest, OnlyADownNodeIsForgottenAndItStaysForgotten) {
  ASSERT_THAT(registry_->Register(Info("a"), 11), IsOk());
  ASSERT_THAT(registry_->Register(Info("b"), 22), IsOk());
  EXPECT_THAT(registry_->Forget("a"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("node a is Ready")));
  EXPECT_THAT(registry_->Forget("zz"), StatusIs(absl::StatusCode::kNotFound));
  clock_.Advance(absl::Seconds(31));
  ASSERT_THAT(registry_->Heartbeat("a", 11), IsOk());
  registry_->CheckLiveness();
  ASSERT_EQ(StateOf("b"), quilt::v1::NODE_STATE_DOWN);
  ASSERT_THAT(registry_->Forget("b"), IsOk());
  ASSERT_THAT(registry_->ListNodes(), SizeIs(1));
  EXPECT_EQ(registry_->RecentEvents(1)[0].kind(), quilt::v1::ClusterEvent::KIND_NODE_FORGOTTEN);
  Reopen();
  ASSERT_THAT(registry_->ListNodes(), SizeIs(1));
  EXPECT_EQ(registry_->ListNodes()[0].info().node_id(), "a");
  // Its worker, back, registers anew.
  ASSERT_THAT(registry_->Register(Info("b"), 23), IsOk());
  EXPECT_EQ(StateOf("b"), quilt::v1::NODE_STATE_READY);
}

TEST_F(NodeRegistryTest, ADrainedNodeStaysDrainedAcrossRestartsUntilTakenBack) {
  ASSERT_THAT(registry_->Register(Info("a"), 11), IsOk());
  ASSERT_THAT(registry_->Register(Info("b"), 22), IsOk());
  EXPECT_THAT(registry_->SetDraining("zz", true), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_THAT(registry_->SetDraining("b", true), IsOkAndHolds(true));
  EXPECT_THAT(registry_->SetDraining("b", true), IsOkAndHolds(false));  // already
  EXPECT_EQ(registry_->RecentEvents(1)[0].kind(), ClusterEvent::KIND_NODE_DRAINING);
  auto draining = [&](const std::string& id) {
    for (const auto& n : registry_->ListNodes()) {
      if (n.info().node_id() == id) return n.draining();
    }
    return false;
  };
  EXPECT_FALSE(draining("a"));
  // The coordinator restarts, then the node's worker (a new incarnation).
  Reopen();
  EXPECT_TRUE(draining("b"));
  clock_.Advance(absl::Seconds(6));
  registry_->CheckLiveness();
  ASSERT_THAT(registry_->Register(Info("b"), 23), IsOk());
  EXPECT_EQ(StateOf("b"), quilt::v1::NODE_STATE_READY);
  EXPECT_TRUE(draining("b"));
  ASSERT_THAT(registry_->SetDraining("b", false), IsOkAndHolds(true));
  EXPECT_EQ(registry_->RecentEvents(1)[0].kind(), ClusterEvent::KIND_NODE_UNDRAINED);
  Reopen();
  EXPECT_FALSE(draining("b"));
}

}  // namespace
}  // namespace quilt
