// Control-plane benchmark: a real coordinator gRPC server on loopback, called
// by the real client. Measures heartbeat round trips (one client; also over
// TLS with the client token, from the test certificates) and a
// cluster-status read with many registered nodes. Run from the repository
// root (the TLS case reads test/fixtures/tls/):
//   bazel-bin/bench/control_plane_bench --benchmark_format=json
#include <benchmark/benchmark.h>

#include <memory>

#include "src/common/clock.h"
#include "src/common/logging.h"
#include "src/coordinator/coordinator.h"
#include "src/rpc/coordinator_client.h"
#include "src/rpc/coordinator_server.h"
#include "src/rpc/security.h"
#include "src/testing/temp_dir.h"

namespace quilt {
namespace {

constexpr char kTls[] = "test/fixtures/tls/";

struct Fixture {
  testing::TempDir dir;
  std::unique_ptr<Coordinator> coordinator;
  std::unique_ptr<rpc::CoordinatorServer> server;

  explicit Fixture(bool tls = false) {
    CoordinatorConfig config;
    config.listen_address = "127.0.0.1:0";
    config.state_dir = dir.path();
    if (tls) {
      config.tls_cert_file = std::string(kTls) + "server.pem";
      config.tls_key_file = std::string(kTls) + "server.key";
      config.token_file = std::string(kTls) + "token";
    }
    coordinator = std::move(Coordinator::Create(config, RealClock::Get()).value());
    server = std::move(rpc::CoordinatorServer::Start(coordinator.get()).value());
  }
};

quilt::v1::RegisterRequest Node(int i) {
  quilt::v1::RegisterRequest r;
  r.set_incarnation(1000 + i);
  r.mutable_node()->set_node_id("node-" + std::to_string(i));
  for (int g = 0; g < 8; ++g) {
    auto* d = r.mutable_node()->add_devices();
    d->set_id(r.node().node_id() + "/gpu:" + std::to_string(g));
    d->set_kind(quilt::v1::DEVICE_KIND_GPU);
    d->set_index(g);
    d->set_model("NVIDIA H100");
    d->set_memory_bytes(int64_t{80} << 30);
  }
  return r;
}

// range(0): 1 = over TLS with the client token.
void BM_HeartbeatRoundTrip(benchmark::State& state) {
  const bool tls = state.range(0) == 1;
  Fixture f(tls);
  rpc::SetClientSecurity({});
  if (tls) {
    absl::StatusOr<rpc::ClientSecurity> security =
        rpc::LoadClientSecurity(std::string(kTls) + "ca.pem", std::string(kTls) + "token", "");
    if (!security.ok()) {
      state.SkipWithError("run from the repository root (test/fixtures/tls/)");
      return;
    }
    rpc::SetClientSecurity(*security);
  }
  rpc::CoordinatorClient client(f.server->address(), absl::Seconds(5));
  if (!client.Register(Node(0)).ok()) state.SkipWithError("register failed");
  quilt::v1::HeartbeatRequest hb;
  hb.set_node_id("node-0");
  hb.set_incarnation(1000);
  for (auto _ : state) {
    if (!client.Heartbeat(hb).ok()) state.SkipWithError("heartbeat failed");
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["tls"] = tls ? 1 : 0;
  rpc::SetClientSecurity({});
}
BENCHMARK(BM_HeartbeatRoundTrip)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_ClusterStatus(benchmark::State& state) {
  Fixture f;
  rpc::CoordinatorClient client(f.server->address(), absl::Seconds(5));
  for (int i = 0; i < state.range(0); ++i) {
    if (!client.Register(Node(i)).ok()) state.SkipWithError("register failed");
  }
  rpc::AdminClient admin(f.server->address(), absl::Seconds(5));
  for (auto _ : state) {
    auto s = admin.GetClusterStatus({});
    if (!s.ok()) state.SkipWithError("status failed");
    benchmark::DoNotOptimize(s);
  }
  state.counters["nodes"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_ClusterStatus)
    ->Arg(10)
    ->Arg(100)
    ->Arg(1000)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace quilt

int main(int argc, char** argv) {
  quilt::InitLogging({"control_plane_bench", "warn"}).IgnoreError();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
