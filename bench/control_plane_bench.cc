// Control-plane benchmark: a real coordinator gRPC server on loopback, called
// by the real client. Measures heartbeat round trips (one client) and a
// cluster-status read with many registered nodes. Run with
//   bazel run -c opt //bench:control_plane_bench -- --benchmark_format=json
#include <benchmark/benchmark.h>

#include <memory>

#include "src/common/clock.h"
#include "src/common/logging.h"
#include "src/coordinator/coordinator.h"
#include "src/rpc/coordinator_client.h"
#include "src/rpc/coordinator_server.h"
#include "src/testing/temp_dir.h"

namespace quilt {
namespace {

struct Fixture {
  testing::TempDir dir;
  std::unique_ptr<Coordinator> coordinator;
  std::unique_ptr<rpc::CoordinatorServer> server;

  Fixture() {
    CoordinatorConfig config;
    config.listen_address = "127.0.0.1:0";
    config.state_dir = dir.path();
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
    d->set_model("NVIDIA H100");
    d->set_memory_bytes(int64_t{80} << 30);
  }
  return r;
}

void BM_HeartbeatRoundTrip(benchmark::State& state) {
  Fixture f;
  rpc::CoordinatorClient client(f.server->address(), absl::Seconds(5));
  if (!client.Register(Node(0)).ok()) state.SkipWithError("register failed");
  quilt::v1::HeartbeatRequest hb;
  hb.set_node_id("node-0");
  hb.set_incarnation(1000);
  for (auto _ : state) {
    if (!client.Heartbeat(hb).ok()) state.SkipWithError("heartbeat failed");
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_HeartbeatRoundTrip)->Unit(benchmark::kMicrosecond)->UseRealTime();

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
