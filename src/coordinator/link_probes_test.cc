#include "src/coordinator/link_probes.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/fake_clock.h"
#include "src/common/status_matchers.h"
#include "src/coordinator/store/sqlite_store.h"
#include "src/testing/node_info.h"
#include "src/testing/temp_dir.h"

namespace quilt {
namespace {

using ::testing::IsEmpty;
using ::testing::SizeIs;

quilt::v1::NodeInfo Info(const std::string& id, int devices = 1) {
  return testing::CpuNodeInfo(id, devices);
}

class LinkProbesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = SqliteStore::Open(dir_.File("c.db"));
    ASSERT_THAT(store, IsOk());
    store_ = std::move(*store);
    registry_ = std::make_unique<NodeRegistry>(&clock_, store_.get(), LivenessOptions());
    ASSERT_THAT(registry_->Load(), IsOk());
    probes_ = std::make_unique<LinkProbes>(registry_.get(), &clock_, 1 << 20);
  }

  quilt::v1::HeartbeatResponse Beat(const std::string& node,
                                    std::vector<quilt::v1::LinkProbeResult> results = {}) {
    quilt::v1::HeartbeatRequest req;
    req.set_node_id(node);
    for (auto& r : results) *req.add_probe_results() = r;
    quilt::v1::HeartbeatResponse resp;
    probes_->OnHeartbeat(req, &resp);
    return resp;
  }

  static quilt::v1::LinkProbeResult Result(const quilt::v1::LinkProbe& p, double bw) {
    quilt::v1::LinkProbeResult r;
    r.set_probe_id(p.probe_id());
    r.set_peer_node(p.peer_node());
    r.set_bandwidth_bytes_per_s(bw);
    r.set_latency_s(2e-5);
    if (bw <= 0) r.set_error("connection refused");
    return r;
  }

  testing::TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<CoordinatorStore> store_;
  std::unique_ptr<NodeRegistry> registry_;
  std::unique_ptr<LinkProbes> probes_;
};

TEST_F(LinkProbesTest, TheSmallerIdProbesOnceAndThePlanGetsPairLinks) {
  ASSERT_THAT(registry_->Register(Info("a", 2), 1), IsOk());
  ASSERT_THAT(registry_->Register(Info("b", 1), 2), IsOk());
  EXPECT_THAT(Beat("b").probes(), IsEmpty());
  quilt::v1::HeartbeatResponse r = Beat("a");
  ASSERT_THAT(r.probes(), SizeIs(1));
  EXPECT_EQ(r.probes(0).peer_node(), "b");
  EXPECT_EQ(r.probes(0).peer_address(), "b.local:4000");
  EXPECT_EQ(r.probes(0).bytes(), 1 << 20);
  EXPECT_THAT(Beat("a").probes(), IsEmpty());  // in flight
  Beat("a", {Result(r.probes(0), 5e9)});
  ASSERT_THAT(probes_->Links(), SizeIs(1));
  EXPECT_DOUBLE_EQ(probes_->Links()[0].link().bandwidth_bytes_per_s(), 5e9);
  EXPECT_THAT(Beat("a").probes(), IsEmpty());  // measured
  quilt::v1::ClusterSpec spec;
  *spec.add_nodes() = Info("a", 2);
  *spec.add_nodes() = Info("b", 1);
  probes_->AddTo(&spec);
  ASSERT_THAT(spec.pair_links(), SizeIs(4));  // 2 × 1 devices, both ways
  for (const auto& p : spec.pair_links()) {
    EXPECT_NE(p.src_device().substr(0, 1), p.dst_device().substr(0, 1));
    EXPECT_DOUBLE_EQ(p.link().bandwidth_bytes_per_s(), 5e9);
  }
}

TEST_F(LinkProbesTest, FailuresAreRetriedLaterAndRestartsMeasureAgain) {
  ASSERT_THAT(registry_->Register(Info("a"), 1), IsOk());
  ASSERT_THAT(registry_->Register(Info("b"), 2), IsOk());
  quilt::v1::HeartbeatResponse r = Beat("a");
  ASSERT_THAT(r.probes(), SizeIs(1));
  Beat("a", {Result(r.probes(0), 0)});
  EXPECT_THAT(probes_->Links(), IsEmpty());
  EXPECT_THAT(Beat("a").probes(), IsEmpty());  // not at once
  clock_.Advance(absl::Minutes(2));
  ASSERT_THAT(registry_->Heartbeat("a", 1), IsOk());
  ASSERT_THAT(registry_->Heartbeat("b", 2), IsOk());
  r = Beat("a");
  ASSERT_THAT(r.probes(), SizeIs(1));
  Beat("a", {Result(r.probes(0), 1e9)});
  ASSERT_THAT(probes_->Links(), SizeIs(1));
  // b restarts (its old process silent): the link is measured again.
  clock_.Advance(absl::Seconds(6));
  ASSERT_THAT(registry_->Heartbeat("a", 1), IsOk());
  ASSERT_THAT(registry_->Register(Info("b"), 3), IsOk());
  r = Beat("a");
  ASSERT_THAT(r.probes(), SizeIs(1));
  EXPECT_THAT(probes_->Links(), IsEmpty());
}

}  // namespace
}  // namespace quilt
