// The worker's membership loop against a real coordinator on loopback.
#include "src/worker/worker.h"

#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/clock.h"
#include "src/common/status_matchers.h"
#include "src/coordinator/coordinator.h"
#include "src/rpc/coordinator_client.h"
#include "src/rpc/coordinator_server.h"
#include "src/testing/temp_dir.h"

namespace quilt {
namespace {

using ::testing::HasSubstr;

quilt::v1::NodeInfo Info(const std::string& id) {
  quilt::v1::NodeInfo info;
  info.set_node_id(id);
  auto* d = info.add_devices();
  d->set_id(id + "/cpu:0");
  d->set_kind(quilt::v1::DEVICE_KIND_CPU);
  return info;
}

// Polls `cond` every 20 ms for up to `timeout`.
bool Eventually(const std::function<bool()>& cond, absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    if (cond()) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return cond();
}

class WorkerTest : public ::testing::Test {
 protected:
  void StartCoordinator(const std::string& address) {
    CoordinatorConfig config;
    config.listen_address = address;
    config.state_dir = dir_.path();
    config.heartbeat_period_ms = 100;
    config.not_ready_after_ms = 500;
    config.down_after_ms = 1500;
    auto c = Coordinator::Create(config, RealClock::Get());
    ASSERT_THAT(c, IsOk());
    coordinator_ = std::move(*c);
    auto s = rpc::CoordinatorServer::Start(coordinator_.get());
    ASSERT_THAT(s, IsOk());
    server_ = std::move(*s);
    coordinator_->Start();
  }
  void StopCoordinator() {
    server_->Shutdown(absl::ZeroDuration());
    server_.reset();
    coordinator_.reset();
  }
  quilt::v1::NodeState StateOf(const std::string& id) {
    for (const auto& n : coordinator_->registry()->ListNodes()) {
      if (n.info().node_id() == id) return n.state();
    }
    return quilt::v1::NODE_STATE_UNSPECIFIED;
  }

  testing::TempDir dir_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<rpc::CoordinatorServer> server_;
};

TEST_F(WorkerTest, RegistersAndStaysReady) {
  StartCoordinator("127.0.0.1:0");
  rpc::CoordinatorClient client(server_->address(), absl::Seconds(2));
  Worker worker(Info("w1"), 42, &client, {});
  worker.Start();
  ASSERT_TRUE(Eventually([&] { return worker.registered(); }));
  // Several heartbeat periods later, still Ready: heartbeats arrive.
  absl::SleepFor(absl::Milliseconds(800));
  EXPECT_EQ(StateOf("w1"), quilt::v1::NODE_STATE_READY);
  // A stopped worker says so: its node is Down at once, not after the
  // down timeout (1.5 s here).
  const absl::Time stopped = absl::Now();
  worker.Stop();
  EXPECT_EQ(StateOf("w1"), quilt::v1::NODE_STATE_DOWN);
  EXPECT_LT(absl::Now() - stopped, absl::Milliseconds(1000));
  EXPECT_EQ(coordinator_->registry()->ListNodes()[0].reason(), "its worker stopped");
  // A new process for the node is Ready again.
  Worker again(Info("w1"), 43, &client, {});
  again.Start();
  ASSERT_TRUE(Eventually([&] { return StateOf("w1") == quilt::v1::NODE_STATE_READY; }));
}

TEST_F(WorkerTest, ADrainingCoordinatorDoesNotJudgeTheNodesItNoLongerHears) {
  StartCoordinator("127.0.0.1:0");
  rpc::CoordinatorClient client(server_->address(), absl::Milliseconds(200));
  Worker worker(Info("w1"), 42, &client, {});
  worker.Start();
  ASSERT_TRUE(Eventually([&] { return worker.registered(); }));
  // Stopping: the server answers no more heartbeats, for longer than the
  // down timeout (1.5 s), while the coordinator still runs.
  coordinator_->BeginDrain();
  server_->Shutdown(absl::ZeroDuration());
  absl::SleepFor(absl::Milliseconds(2500));
  EXPECT_EQ(StateOf("w1"), quilt::v1::NODE_STATE_READY);
  EXPECT_EQ(coordinator_->registry()->RecentEvents(10).size(), 1u);  // registered only
}

TEST_F(WorkerTest, CoordinatorStartsLate_WorkerRetriesUntilRegistered) {
  // Reserve a port: start and stop a coordinator, then bring it back there.
  StartCoordinator("127.0.0.1:0");
  const std::string address = server_->address();
  StopCoordinator();
  rpc::CoordinatorClient client(address, absl::Milliseconds(500));
  WorkerOptions options;
  options.max_backoff = absl::Milliseconds(200);
  Worker worker(Info("w1"), 42, &client, options);
  worker.Start();
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_FALSE(worker.registered());
  StartCoordinator(address);
  ASSERT_TRUE(Eventually([&] { return StateOf("w1") == quilt::v1::NODE_STATE_READY; }));
}

TEST_F(WorkerTest, SecondProcessUnderALiveId_RefusedAndTheWorkerKeepsIt) {
  StartCoordinator("127.0.0.1:0");
  rpc::CoordinatorClient client(server_->address(), absl::Seconds(2));
  Worker worker(Info("w1"), 42, &client, {});
  worker.Start();
  ASSERT_TRUE(Eventually([&] { return worker.registered(); }));
  // Another process claims the node while this one heartbeats.
  EXPECT_THAT(coordinator_->registry()->Register(Info("w1"), 43),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("in use")));
  absl::SleepFor(absl::Milliseconds(1500));
  EXPECT_EQ(worker.registrations(), 1);
  auto nodes = coordinator_->registry()->ListNodes();
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].incarnation(), 42u);
  EXPECT_EQ(nodes[0].state(), quilt::v1::NODE_STATE_READY);
}

}  // namespace
}  // namespace quilt
