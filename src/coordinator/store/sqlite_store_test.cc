#include "src/coordinator/store/sqlite_store.h"

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/testing/temp_dir.h"

namespace quilt {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

quilt::v1::NodeStatus Node(const std::string& id, uint64_t incarnation) {
  quilt::v1::NodeStatus n;
  n.mutable_info()->set_node_id(id);
  n.set_incarnation(incarnation);
  n.set_state(quilt::v1::NODE_STATE_READY);
  return n;
}

TEST(SqliteStore, NodesSurviveReopen) {
  testing::TempDir dir;
  const std::string path = dir.File("c.db");
  {
    auto store = SqliteStore::Open(path);
    ASSERT_THAT(store, IsOk());
    ASSERT_THAT((*store)->PutNode(Node("b", 2)), IsOk());
    ASSERT_THAT((*store)->PutNode(Node("a", 1)), IsOk());
    ASSERT_THAT((*store)->PutNode(Node("a", 3)), IsOk());  // replaces
  }
  auto store = SqliteStore::Open(path);
  ASSERT_THAT(store, IsOk());
  auto nodes = (*store)->ListNodes();
  ASSERT_THAT(nodes, IsOk());
  ASSERT_THAT(*nodes, SizeIs(2));
  EXPECT_EQ((*nodes)[0].info().node_id(), "a");
  EXPECT_EQ((*nodes)[0].incarnation(), 3u);
  EXPECT_EQ((*nodes)[1].info().node_id(), "b");
}

TEST(SqliteStore, EventsNewestFirstAndBounded) {
  testing::TempDir dir;
  auto store = SqliteStore::Open(dir.File("c.db"));
  ASSERT_THAT(store, IsOk());
  for (int i = 0; i < CoordinatorStore::kMaxEvents + 5; ++i) {
    quilt::v1::ClusterEvent e;
    e.set_message(std::to_string(i));
    ASSERT_THAT((*store)->AppendEvent(e), IsOk());
  }
  auto recent = (*store)->RecentEvents(3);
  ASSERT_THAT(recent, IsOk());
  ASSERT_THAT(*recent, SizeIs(3));
  EXPECT_EQ((*recent)[0].message(), std::to_string(CoordinatorStore::kMaxEvents + 4));
  auto all = (*store)->RecentEvents(100000);
  ASSERT_THAT(all, IsOk());
  EXPECT_THAT(*all, SizeIs(CoordinatorStore::kMaxEvents));
}

TEST(SqliteStore, CorruptFile_IsDataLossNotCrash) {
  testing::TempDir dir;
  const std::string path = dir.File("c.db");
  {
    std::ofstream f(path);
    f << std::string(8192, 'x');
  }
  EXPECT_THAT(SqliteStore::Open(path), StatusIs(absl::StatusCode::kDataLoss, HasSubstr(path)));
}

TEST(SqliteStore, UnwritableDirectory_IsUnavailable) {
  EXPECT_THAT(SqliteStore::Open("/nonexistent-dir/x/c.db"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("/nonexistent-dir/x/c.db")));
}

}  // namespace
}  // namespace quilt
