#include "src/coordinator/live_cluster.h"

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

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;

TEST(LiveCluster, ReadyNodesOnlyAndAFailedPlanNamesTheOthers) {
  testing::TempDir dir;
  auto store = SqliteStore::Open(dir.File("c.db"));
  ASSERT_THAT(store, IsOk());
  FakeClock clock;
  LivenessOptions o;
  o.heartbeat_period = absl::Seconds(1);
  o.not_ready_after = absl::Seconds(5);
  o.down_after = absl::Seconds(30);
  auto registry = std::make_unique<NodeRegistry>(&clock, store->get(), o);
  ASSERT_THAT(registry->Load(), IsOk());
  ASSERT_THAT(registry->Register(testing::CpuNodeInfo("a"), 1), IsOk());
  ASSERT_THAT(registry->Register(testing::CpuNodeInfo("b"), 2), IsOk());
  const absl::Status failed = absl::FailedPreconditionError("needs 2 devices; the cluster has 1");
  EXPECT_EQ(WithNotReadyNodes(failed, *registry), failed);  // every node Ready
  // A restarted coordinator: both NotReady until they heartbeat; a does.
  registry = std::make_unique<NodeRegistry>(&clock, store->get(), o);
  ASSERT_THAT(registry->Load(), IsOk());
  ASSERT_THAT(registry->Heartbeat("a", 1), IsOk());
  absl::StatusOr<quilt::v1::ClusterSpec> spec = LiveClusterSpec(*registry);
  ASSERT_THAT(spec, IsOk());
  ASSERT_THAT(spec->nodes(), SizeIs(1));
  EXPECT_EQ(spec->nodes(0).node_id(), "a");
  EXPECT_THAT(WithNotReadyNodes(failed, *registry),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("the cluster has 1"), HasSubstr("not Ready: b"),
                             Not(HasSubstr("a,")))));
  EXPECT_THAT(WithNotReadyNodes(absl::OkStatus(), *registry), IsOk());
}

TEST(LiveCluster, ADrainingNodeIsLeftOutAndAllDrainingIsRefusedSayingSo) {
  testing::TempDir dir;
  auto store = SqliteStore::Open(dir.File("c.db"));
  ASSERT_THAT(store, IsOk());
  FakeClock clock;
  NodeRegistry registry(&clock, store->get(), LivenessOptions{});
  ASSERT_THAT(registry.Load(), IsOk());
  ASSERT_THAT(registry.Register(testing::CpuNodeInfo("a"), 1), IsOk());
  ASSERT_THAT(registry.Register(testing::CpuNodeInfo("b"), 2), IsOk());
  ASSERT_THAT(registry.SetDraining("a", true), IsOk());
  absl::StatusOr<quilt::v1::ClusterSpec> spec = LiveClusterSpec(registry);
  ASSERT_THAT(spec, IsOk());
  ASSERT_THAT(spec->nodes(), SizeIs(1));
  EXPECT_EQ(spec->nodes(0).node_id(), "b");
  ASSERT_THAT(registry.SetDraining("b", true), IsOk());
  EXPECT_THAT(LiveClusterSpec(registry),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("2 draining")));
  ASSERT_THAT(registry.SetDraining("a", false), IsOk());
  spec = LiveClusterSpec(registry);
  ASSERT_THAT(spec, IsOk());
  ASSERT_THAT(spec->nodes(), SizeIs(1));
  EXPECT_EQ(spec->nodes(0).node_id(), "a");
}

}  // namespace
}  // namespace quilt
