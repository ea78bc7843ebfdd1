#include "src/cli/format.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/cli/cluster_view.h"

namespace quilt::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(Format, HumanUnits) {
  EXPECT_EQ(HumanSi(0), "0");
  EXPECT_EQ(HumanSi(1.5e12), "1.50T");
  EXPECT_EQ(HumanSi(52.34e9), "52.3G");
  EXPECT_EQ(HumanSi(999), "999");
  EXPECT_EQ(HumanBytes(512), "512B");
  EXPECT_EQ(HumanBytes(int64_t{16} << 30), "16.0GiB");
  EXPECT_EQ(HumanDuration(0.42), "0.4s");
  EXPECT_EQ(HumanDuration(75), "1m15s");
  EXPECT_EQ(HumanDuration(7300), "2h1m");
  EXPECT_EQ(HumanDuration(-1), "-");
}

TEST(Format, TableAlignsColumns) {
  Table t({"A", "LONGER"});
  t.AddRow({"xxxxx", "y"});
  EXPECT_EQ(t.Render(), "A       LONGER\nxxxxx   y\n");
}

quilt::v1::ClusterStatus TwoNodes() {
  quilt::v1::ClusterStatus s;
  for (int i = 0; i < 2; ++i) {
    auto* n = s.add_nodes();
    n->mutable_info()->set_node_id(i == 0 ? "a" : "b");
    n->set_state(i == 0 ? quilt::v1::NODE_STATE_READY : quilt::v1::NODE_STATE_DOWN);
    n->set_reason(i == 0 ? "" : "no heartbeat for 31.0 s");
    auto* d = n->mutable_info()->add_devices();
    d->set_kind(quilt::v1::DEVICE_KIND_GPU);
    d->set_model("V100");
    d->set_memory_bytes(int64_t{16} << 30);
    d->set_measured_gemm_flops_per_s(14e12);
  }
  auto* e = s.add_recent_events();
  e->set_node_id("b");
  e->set_kind(quilt::v1::ClusterEvent::KIND_NODE_DOWN);
  e->set_message("no heartbeat for 31.0 s");
  e->mutable_time()->set_seconds(1000000000);
  return s;
}

TEST(ClusterView, NodesTableShowsStateDevicesAndFlops) {
  std::string out = RenderNodes(TwoNodes(), "table");
  EXPECT_THAT(out, HasSubstr("NODE"));
  EXPECT_THAT(out, HasSubstr("HEARTBEAT_AGE"));
  EXPECT_THAT(out, HasSubstr("a      Ready"));
  EXPECT_THAT(out, HasSubstr("1 gpu"));
  EXPECT_THAT(out, HasSubstr("14.0T"));
  EXPECT_THAT(out, HasSubstr("0B/16.0GiB"));
  EXPECT_THAT(out, Not(HasSubstr("REASON")));
  EXPECT_THAT(RenderNodes(TwoNodes(), "wide"), HasSubstr("no heartbeat for 31.0 s"));
}

TEST(ClusterView, StatusCountsReadyNodesAndListsFailures) {
  std::string out = RenderStatus(TwoNodes(), "127.0.0.1:7070", absl::FromUnixSeconds(1000000005));
  EXPECT_THAT(out, HasSubstr("Nodes: 1/2 Ready (0 NotReady, 1 Down)"));
  EXPECT_THAT(out, HasSubstr("0/1 gpu  V100"));
  EXPECT_THAT(out, HasSubstr("5.0s ago  b  Down: no heartbeat for 31.0 s"));
  // (b's links, measured or not, are not listed while it is not Ready.)
  EXPECT_THAT(out, HasSubstr("Links (measured, between Ready nodes): none (fewer than two Ready"));
}

TEST(ClusterView, StatusWithNoReadyNodeSaysSo) {
  quilt::v1::ClusterStatus status = TwoNodes();
  for (auto& n : *status.mutable_nodes()) n.set_state(quilt::v1::NODE_STATE_DOWN);
  std::string out = RenderStatus(status, "127.0.0.1:7070", absl::FromUnixSeconds(1000000005));
  EXPECT_THAT(out, HasSubstr("Compute (Ready nodes): none\n"));
  EXPECT_THAT(out, HasSubstr("Devices (used/total on Ready nodes):\n  (none)\n"));
  EXPECT_THAT(out, Not(HasSubstr("0/0")));
}

TEST(ClusterView, NodesJsonUsesProtoFieldNames) {
  std::string out = RenderNodes(TwoNodes(), "json");
  EXPECT_THAT(out, HasSubstr("\"nodes\""));
  EXPECT_THAT(out, HasSubstr("\"node_id\": \"a\""));
  EXPECT_THAT(out, HasSubstr("\"state\": \"NODE_STATE_DOWN\""));
}

TEST(ClusterView, DescribeNodeShowsItsStateDevicesLinksJobsAndOwnEvents) {
  quilt::v1::ClusterStatus status = TwoNodes();
  auto* a = status.mutable_nodes(0);
  a->set_draining(true);
  a->add_running_jobs("job-1");
  a->mutable_info()->mutable_devices(0)->set_id("a/gpu:0");
  auto* l = status.add_links();
  l->set_src_node("a");
  l->set_dst_node("b");
  l->mutable_link()->set_bandwidth_bytes_per_s(1.25e9);
  l->mutable_link()->set_latency_s(20e-6);
  auto* e = status.add_recent_events();
  e->set_node_id("a");
  e->set_kind(quilt::v1::ClusterEvent::KIND_NODE_DRAINING);
  e->set_message("drained: no new jobs");
  e->mutable_time()->set_seconds(1000000002);
  const absl::Time now = absl::FromUnixSeconds(1000000005);
  absl::StatusOr<std::string> out = RenderNodeDetails(status, "a", "table", now);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(*out, HasSubstr("Node:        a  Ready,Draining (draining: no new jobs)"));
  EXPECT_THAT(*out, HasSubstr("  a/gpu:0  gpu  V100  16.0GiB  14.0TFLOP/s measured"));
  EXPECT_THAT(*out, HasSubstr("  a <-> b  1.25GB/s"));
  EXPECT_THAT(*out, HasSubstr("Jobs:        job-1"));
  EXPECT_THAT(*out, HasSubstr("  3.0s ago  Draining: drained: no new jobs"));
  EXPECT_THAT(*out, Not(HasSubstr("no heartbeat")));  // b's event
  absl::StatusOr<std::string> b = RenderNodeDetails(status, "b", "table", now);
  ASSERT_TRUE(b.ok());
  EXPECT_THAT(*b, HasSubstr("Reason:      no heartbeat for 31.0 s"));
  EXPECT_THAT(*b, HasSubstr("Jobs:        none"));
  EXPECT_THAT(*b, HasSubstr("5.0s ago  Down: no heartbeat for 31.0 s"));
  EXPECT_THAT(*RenderNodeDetails(status, "a", "json", now), HasSubstr("\"draining\": true"));
  EXPECT_EQ(RenderNodeDetails(status, "zz", "table", now).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace quilt::cli
