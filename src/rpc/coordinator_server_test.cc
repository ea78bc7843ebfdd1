// The coordinator's gRPC API on a real server on 127.0.0.1:0, called by the
// real clients (and by a generic stub for wire-level garbage).
#include "src/rpc/coordinator_server.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <fstream>
#include <future>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/quilt/v1/services.grpc.pb.h"
#include "src/common/clock.h"
#include "src/common/status_matchers.h"
#include "src/rpc/channel.h"
#include "src/rpc/coordinator_client.h"
#include "src/testing/temp_dir.h"

namespace quilt::rpc {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

quilt::v1::RegisterRequest RegisterReq(const std::string& id, uint64_t incarnation) {
  quilt::v1::RegisterRequest r;
  r.set_incarnation(incarnation);
  r.mutable_node()->set_node_id(id);
  auto* d = r.mutable_node()->add_devices();
  d->set_id(id + "/cpu:0");
  d->set_kind(quilt::v1::DEVICE_KIND_CPU);
  d->set_measured_gemm_flops_per_s(5e10);
  d->set_memory_bytes(int64_t{8} << 30);
  return r;
}

class CoordinatorServerTest : public ::testing::Test {
 protected:
  void SetUp() override { StartCoordinator("127.0.0.1:0"); }
  void TearDown() override { StopCoordinator(); }

  void StartCoordinator(const std::string& address, int64_t profile_timeout_ms = 60000) {
    CoordinatorConfig config;
    config.listen_address = address;
    config.profile_timeout_ms = profile_timeout_ms;
    config.state_dir = dir_.path();
    auto c = Coordinator::Create(config, RealClock::Get());
    ASSERT_THAT(c, IsOk());
    coordinator_ = std::move(*c);
    auto s = CoordinatorServer::Start(coordinator_.get());
    ASSERT_THAT(s, IsOk());
    server_ = std::move(*s);
    coordinator_->Start();
    client_ = std::make_unique<CoordinatorClient>(server_->address(), absl::Seconds(5));
    admin_ = std::make_unique<AdminClient>(server_->address(), absl::Seconds(5));
  }

  void StopCoordinator() {
    client_.reset();
    admin_.reset();
    if (server_) server_->Shutdown(absl::Seconds(1));
    server_.reset();
    coordinator_.reset();
  }

  // A coordinator waiting `profile_timeout_ms` for profiles, with node n1
  // (incarnation 7) Ready.
  void RestartWithReadyNode(int64_t profile_timeout_ms) {
    StopCoordinator();
    StartCoordinator("127.0.0.1:0", profile_timeout_ms);
    ASSERT_THAT(client_->Register(RegisterReq("n1", 7)), IsOk());
    quilt::v1::HeartbeatRequest hb;
    hb.set_node_id("n1");
    hb.set_incarnation(7);
    ASSERT_THAT(client_->Heartbeat(hb), IsOk());
  }

  // n1 answers the profiles `ids` with failures.
  absl::Status FailProfiles(const std::vector<std::string>& ids) {
    quilt::v1::HeartbeatRequest hb;
    hb.set_node_id("n1");
    hb.set_incarnation(7);
    for (const std::string& id : ids) {
      auto* r = hb.add_profile_results();
      r->set_profile_id(id);
      r->set_error("no data");
    }
    return client_->Heartbeat(hb).status();
  }

  testing::TempDir dir_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<CoordinatorServer> server_;
  std::unique_ptr<CoordinatorClient> client_;
  std::unique_ptr<AdminClient> admin_;
};

TEST_F(CoordinatorServerTest, RegisterAndHeartbeat_NodeListedReady) {
  auto reg = client_->Register(RegisterReq("n1", 7));
  ASSERT_THAT(reg, IsOk());
  EXPECT_DOUBLE_EQ(reg->heartbeat_period_s(), 1.0);
  quilt::v1::HeartbeatRequest hb;
  hb.set_node_id("n1");
  hb.set_incarnation(7);
  ASSERT_THAT(client_->Heartbeat(hb), IsOk());
  auto status = admin_->GetClusterStatus({});
  ASSERT_THAT(status, IsOk());
  ASSERT_THAT(status->nodes(), SizeIs(1));
  EXPECT_EQ(status->nodes(0).state(), quilt::v1::NODE_STATE_READY);
  EXPECT_EQ(status->nodes(0).info().devices(0).measured_gemm_flops_per_s(), 5e10);
  EXPECT_LT(status->nodes(0).heartbeat_age_s(), 5.0);
}

TEST_F(CoordinatorServerTest, StaleIncarnation_Aborted) {
  ASSERT_THAT(client_->Register(RegisterReq("n1", 7)), IsOk());
  // A second worker under a live id is refused; the first keeps it.
  EXPECT_THAT(client_->Register(RegisterReq("n1", 8)),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("in use")));
  quilt::v1::HeartbeatRequest hb;
  hb.set_node_id("n1");
  hb.set_incarnation(7);
  EXPECT_THAT(client_->Heartbeat(hb), IsOk());
  hb.set_incarnation(8);
  EXPECT_THAT(client_->Heartbeat(hb), StatusIs(absl::StatusCode::kAborted, HasSubstr("stale")));
}

TEST_F(CoordinatorServerTest, UnknownNodeHeartbeat_NotFound) {
  quilt::v1::HeartbeatRequest hb;
  hb.set_node_id("ghost");
  hb.set_incarnation(1);
  EXPECT_THAT(client_->Heartbeat(hb), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(CoordinatorServerTest, MalformedRegister_InvalidArgument) {
  EXPECT_THAT(client_->Register(RegisterReq("", 7)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("node_id")));
  EXPECT_THAT(client_->Register(RegisterReq("n1", 0)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("incarnation")));
}

TEST_F(CoordinatorServerTest, OversizedRegister_InvalidArgumentAndServerKeepsServing) {
  auto req = RegisterReq("n1", 7);
  (*req.mutable_node()->mutable_labels())["junk"] = std::string(5 << 20, 'x');
  EXPECT_THAT(client_->Register(req),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("limit")));
  EXPECT_THAT(client_->Register(RegisterReq("n1", 7)), IsOk());
}

TEST_F(CoordinatorServerTest, GarbageBytes_InvalidArgumentAndServerKeepsServing) {
  grpc::GenericStub stub(MakeChannel(server_->address()));
  const std::string garbage = "\xff\xff\xff\xff\x0f not a protobuf";
  grpc::Slice slice(garbage);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::ClientContext ctx;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/quilt.v1.ClusterService/Register", grpc::StubOptions(), &request,
                 &response, [&](grpc::Status s) { done.set_value(s); });
  grpc::Status s = done.get_future().get();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(client_->Register(RegisterReq("n1", 7)), IsOk());
}

TEST_F(CoordinatorServerTest, HealthService_Serving) {
  auto channel = MakeChannel(server_->address());
  grpc::GenericStub stub(channel);
  // grpc.health.v1.HealthCheckRequest{service=""} is the empty message.
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1), response;
  grpc::ClientContext ctx;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) { done.set_value(s); });
  ASSERT_TRUE(done.get_future().get().ok());
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (auto& sl : slices)
    bytes += std::string(reinterpret_cast<const char*>(sl.begin()), sl.size());
  // HealthCheckResponse{status = SERVING (1)}: field 1, varint 1.
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
}

TEST_F(CoordinatorServerTest, CoordinatorRestart_KeepsNodeList) {
  ASSERT_THAT(client_->Register(RegisterReq("n1", 7)), IsOk());
  ASSERT_THAT(client_->Register(RegisterReq("n2", 9)), IsOk());
  StopCoordinator();
  StartCoordinator("127.0.0.1:0");
  auto status = admin_->GetClusterStatus({});
  ASSERT_THAT(status, IsOk());
  ASSERT_THAT(status->nodes(), SizeIs(2));
  EXPECT_EQ(status->nodes(0).state(), quilt::v1::NODE_STATE_NOT_READY);
  quilt::v1::HeartbeatRequest hb;
  hb.set_node_id("n1");
  hb.set_incarnation(7);
  ASSERT_THAT(client_->Heartbeat(hb), IsOk());
  status = admin_->GetClusterStatus({});
  ASSERT_THAT(status, IsOk());
  EXPECT_EQ(status->nodes(0).state(), quilt::v1::NODE_STATE_READY);
  EXPECT_EQ(status->nodes(1).state(), quilt::v1::NODE_STATE_NOT_READY);
}

// Heartbeats as node `id` until `n` profile questions have come (or
// `within` passes); returns their ids.
std::vector<std::string> AwaitProfileQuestions(CoordinatorClient* client, const std::string& id,
                                               uint64_t incarnation, size_t n,
                                               absl::Duration within = absl::Seconds(20)) {
  std::vector<std::string> ids;
  const absl::Time deadline = absl::Now() + within;
  do {
    quilt::v1::HeartbeatRequest hb;
    hb.set_node_id(id);
    hb.set_incarnation(incarnation);
    absl::StatusOr<quilt::v1::HeartbeatResponse> r = client->Heartbeat(hb);
    if (!r.ok()) break;
    for (const auto& p : r->profiles()) ids.push_back(p.profile_id());
    absl::SleepFor(absl::Milliseconds(50));
  } while (ids.size() < n && absl::Now() < deadline);
  return ids;
}

quilt::v1::JobSpec ZooJob(const std::string& model, int64_t batch) {
  quilt::v1::JobSpec spec;
  spec.set_zoo(model);
  spec.set_global_batch(batch);
  spec.set_steps(1);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.05);
  return spec;
}

// A submission waiting for a node's profile holds no other request: an
// export and a second submission are served meanwhile.
TEST_F(CoordinatorServerTest, SubmissionWaitingForProfiles_OtherRequestsServed) {
  RestartWithReadyNode(60000);
  JobClient jobs(server_->address(), absl::Seconds(90));
  auto first = std::async(std::launch::async, [&] { return jobs.SubmitJob(ZooJob("mlp", 8)); });
  std::vector<std::string> asked = AwaitProfileQuestions(client_.get(), "n1", 7, 1);
  ASSERT_THAT(asked, SizeIs(1)) << (first.wait_for(std::chrono::seconds(0)) ==
                                            std::future_status::ready
                                        ? first.get().status().ToString()
                                        : "still submitting");

  JobClient quick(server_->address(), absl::Seconds(10));
  EXPECT_THAT(quick.ExportJob("no-such-job"), StatusIs(absl::StatusCode::kNotFound));
  auto second = std::async(std::launch::async, [&] { return jobs.SubmitJob(ZooJob("mlp", 16)); });
  std::vector<std::string> more = AwaitProfileQuestions(client_.get(), "n1", 7, 1);
  ASSERT_THAT(more, SizeIs(1)) << "the second submission waited behind the first";
  EXPECT_NE(more[0], asked[0]);

  // Answered (failed): both jobs are accepted on start-up figures at once.
  ASSERT_THAT(FailProfiles({asked[0], more[0]}), IsOk());
  ASSERT_EQ(first.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  ASSERT_EQ(second.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  absl::StatusOr<std::string> a = first.get(), b = second.get();
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  // The one placed second shares n1 with the other, and says so.
  int shared = 0;
  for (const std::string& job : {*a, *b}) {
    absl::StatusOr<quilt::v1::JobStatus> st = quick.GetJob(job);
    ASSERT_THAT(st, IsOk());
    ASSERT_GE(st->calibration_size(), 1);
    EXPECT_THAT(st->calibration(0), HasSubstr("its profile failed: no data"));
    if (st->calibration_size() == 2) {
      EXPECT_THAT(st->calibration(1), HasSubstr("n1: shared with 1 running job(s)"));
      ++shared;
    }
  }
  EXPECT_EQ(shared, 1);
}

// A client that gives up while its job is planned gets no job started,
// and its profile is no longer waited for.
TEST_F(CoordinatorServerTest, SubmissionTheClientGaveUpOn_NotStarted) {
  RestartWithReadyNode(60000);
  JobClient impatient(server_->address(), absl::Seconds(2));
  auto submitted =
      std::async(std::launch::async, [&] { return impatient.SubmitJob(ZooJob("mlp", 8)); });
  std::vector<std::string> asked = AwaitProfileQuestions(client_.get(), "n1", 7, 1);
  ASSERT_THAT(asked, SizeIs(1));
  EXPECT_THAT(submitted.get(), StatusIs(absl::StatusCode::kDeadlineExceeded));
  // Nobody waits for that profile any more: a plan of the same model asks
  // for it again.
  absl::SleepFor(absl::Seconds(1));
  JobClient jobs(server_->address(), absl::Seconds(30));
  quilt::v1::PlanJobRequest plan;
  *plan.mutable_spec() = ZooJob("mlp", 8);
  plan.set_strategy("single-device");
  auto planned = std::async(std::launch::async, [&] { return jobs.PlanJob(plan); });
  std::vector<std::string> again = AwaitProfileQuestions(client_.get(), "n1", 7, 1);
  ASSERT_THAT(again, SizeIs(1));
  EXPECT_EQ(again[0], asked[0]);
  ASSERT_THAT(FailProfiles({again[0]}), IsOk());
  ASSERT_EQ(planned.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_THAT(planned.get(), IsOk());
  absl::StatusOr<std::vector<quilt::v1::JobStatus>> listed = jobs.ListJobs();
  ASSERT_THAT(listed, IsOk());
  EXPECT_THAT(*listed, ::testing::IsEmpty());
}

// A stopping coordinator ends open watches instead of waiting out its
// drain time for them.
TEST_F(CoordinatorServerTest, Shutdown_EndsOpenWatchesAtOnce) {
  RestartWithReadyNode(0);
  JobClient jobs(server_->address(), absl::Seconds(30));
  absl::StatusOr<std::string> id = jobs.SubmitJob(ZooJob("mlp", 8));
  ASSERT_THAT(id, IsOk());  // pending: no worker runs it
  std::atomic<int> updates{0};
  auto watched = std::async(std::launch::async, [&] {
    return jobs.WatchJob(*id, [&](const quilt::v1::JobStatus&) { ++updates; });
  });
  ASSERT_TRUE([&] {
    for (int i = 0; i < 100 && updates.load() == 0; ++i) absl::SleepFor(absl::Milliseconds(50));
    return updates.load() > 0;
  }());
  const absl::Time start = absl::Now();
  server_->Shutdown(absl::Seconds(20));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  ASSERT_EQ(watched.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_THAT(watched.get(), StatusIs(absl::StatusCode::kUnavailable));
}

// Two plans of the same model wait for the one question asked; its answer
// reaches both, even though the first to see it is done with it.
TEST_F(CoordinatorServerTest, TwoPlansOfOneModel_ShareTheProfile) {
  RestartWithReadyNode(60000);
  JobClient jobs(server_->address(), absl::Seconds(90));
  auto submitted = std::async(std::launch::async, [&] { return jobs.SubmitJob(ZooJob("mlp", 8)); });
  std::vector<std::string> asked = AwaitProfileQuestions(client_.get(), "n1", 7, 1);
  ASSERT_THAT(asked, SizeIs(1));
  quilt::v1::PlanJobRequest plan;
  *plan.mutable_spec() = ZooJob("mlp", 8);
  plan.set_strategy("single-device");
  auto planned = std::async(std::launch::async, [&] { return jobs.PlanJob(plan); });
  // The plan's profile is the one already asked: no second question.
  EXPECT_THAT(AwaitProfileQuestions(client_.get(), "n1", 7, 1, absl::Seconds(2)),
              ::testing::IsEmpty());
  ASSERT_THAT(FailProfiles({asked[0]}), IsOk());
  ASSERT_EQ(submitted.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  ASSERT_EQ(planned.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  ASSERT_THAT(submitted.get(), IsOk());
  absl::StatusOr<quilt::v1::PlanReport> report = planned.get();
  ASSERT_THAT(report, IsOk());
  // One line of n1's figures; and, when the submitted job is running on
  // n1 by the time the plan is made (the two race), one saying the plan
  // shares the node with it.
  std::vector<std::string> figures;
  for (const std::string& line : report->calibration()) {
    if (!absl::StartsWith(line, "n1: shared with 1 running job")) figures.push_back(line);
  }
  EXPECT_LE(report->calibration_size() - static_cast<int>(figures.size()), 1);
  ASSERT_THAT(figures, SizeIs(1));
  EXPECT_THAT(figures[0], HasSubstr("its profile failed: no data"));
}

TEST(Coordinator, UnusableStateDir_AnErrorNotACrash) {
  testing::TempDir dir;
  CoordinatorConfig config;
  config.state_dir = dir.path() + "/file";
  ASSERT_TRUE(std::ofstream(config.state_dir).good());
  EXPECT_THAT(Coordinator::Create(config, RealClock::Get()).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("state_dir")));
  config.state_dir = dir.path() + "/state";
  std::filesystem::create_directories(config.state_dir);
  std::ofstream(config.state_dir + "/coordinator.db") << "not a database, long enough to be read";
  absl::StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::Create(config, RealClock::Get());
  EXPECT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("coordinator.db"));
}

TEST(Coordinator, StateDirInUse_RefusedBeforeTouchingItsJobs) {
  testing::TempDir dir;
  CoordinatorConfig config;
  config.state_dir = dir.path() + "/state";
  absl::StatusOr<std::unique_ptr<Coordinator>> first =
      Coordinator::Create(config, RealClock::Get());
  ASSERT_THAT(first, IsOk());
  NewJob n;
  n.spec.set_steps(10);
  n.program = "program";
  n.world = {"a"};
  absl::StatusOr<std::string> id = (*first)->jobs()->Add(n);
  ASSERT_THAT(id, IsOk());
  // A second coordinator on the same state dir would fail the first's
  // running jobs as it loaded them.
  EXPECT_THAT(Coordinator::Create(config, RealClock::Get()).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("is in use by a coordinator (pid ")));
  first->reset();
  absl::StatusOr<std::unique_ptr<Coordinator>> second =
      Coordinator::Create(config, RealClock::Get());
  ASSERT_THAT(second, IsOk());
  EXPECT_EQ((*second)->jobs()->Get(*id)->state(), quilt::v1::JOB_STATE_PENDING);
}

TEST(Coordinator, RelativeStateDir_MadeAbsolute) {
  testing::TempDir dir;
  const std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  CoordinatorConfig config;
  config.state_dir = "st/";
  absl::StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::Create(config, RealClock::Get());
  std::filesystem::current_path(cwd);
  ASSERT_THAT(c, IsOk());
  // Workers run elsewhere: the default checkpoint dir under it must not be
  // relative.
  EXPECT_EQ((*c)->config().state_dir, (std::filesystem::path(dir.path()) / "st").string());
  NewJob n;
  n.spec.set_steps(10);
  n.program = "program";
  n.world = {"a"};
  absl::StatusOr<std::string> id = (*c)->jobs()->Add(n);
  ASSERT_THAT(id, IsOk());
  EXPECT_EQ((*c)->jobs()->Record(*id)->spec().checkpoint_dir(),
            (std::filesystem::path(dir.path()) / "st" / "checkpoints" / *id).string());
}

TEST(AdminClient, UnreachableCoordinator_UnavailableNamingAddress) {
  AdminClient admin("127.0.0.1:1", absl::Seconds(2));
  EXPECT_THAT(admin.GetClusterStatus({}),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("127.0.0.1:1")));
}

}  // namespace
}  // namespace quilt::rpc
