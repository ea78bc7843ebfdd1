// Profiles of submitted models: asked of each node with its heartbeat,
// fitted into its devices' figures when the results come back, kept for the
// same model until the node's worker restarts; nodes that do not answer,
// fail, or have no CPU device keep their start-up figures, and say so.
#include "src/coordinator/model_profiles.h"

#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/planner/calibration.h"
#include "src/testing/zoo_training.h"

namespace quilt {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

Graph Mlp() { return testing::ZooTrainingGraph("mlp"); }

quilt::v1::ClusterSpec Cluster(const std::vector<std::string>& cpu_nodes, bool with_gpu_node) {
  quilt::v1::ClusterSpec spec;
  for (const std::string& id : cpu_nodes) {
    auto* node = spec.add_nodes();
    node->set_node_id(id);
    auto* d = node->add_devices();
    d->set_id(id + "/cpu:0");
    d->set_kind(quilt::v1::DEVICE_KIND_CPU);
    d->set_measured_gemm_flops_per_s(8e10);
    d->set_memory_bytes(int64_t{8} << 30);
    auto* r = d->add_measured_op_type_rates();
    r->set_op_type("MatMul");
    r->set_flops_per_s(7e10);
  }
  if (with_gpu_node) {
    auto* node = spec.add_nodes();
    node->set_node_id("g0");
    auto* d = node->add_devices();
    d->set_id("g0/gpu:0");
    d->set_kind(quilt::v1::DEVICE_KIND_GPU);
    d->set_peak_fp32_flops_per_s(1.4e13);
    d->set_efficiency(0.3);
    d->set_memory_bytes(int64_t{16} << 30);
  }
  return spec;
}

quilt::v1::HeartbeatResponse Beat(ModelProfiles* p, const std::string& node, uint64_t incarnation,
                                  std::vector<quilt::v1::ModelProfileResult> results = {}) {
  quilt::v1::HeartbeatRequest req;
  req.set_node_id(node);
  req.set_incarnation(incarnation);
  for (auto& r : results) *req.add_profile_results() = r;
  quilt::v1::HeartbeatResponse resp;
  p->OnHeartbeat(req, &resp);
  return resp;
}

// The results a device calibrated as `truth` would measure for `profile`.
quilt::v1::ModelProfileResult Measured(const Graph& g, const quilt::v1::ModelProfile& profile,
                                       const quilt::v1::Device& device,
                                       const DeviceCalibration& truth) {
  quilt::v1::ModelProfileResult r;
  r.set_profile_id(profile.profile_id());
  DeviceCalibration kernels = truth;
  kernels.step_overhead_s = 0;
  for (const auto& run : profile.runs()) {
    absl::StatusOr<OneDevicePrediction> t =
        PredictOneDevice(g, Calibrated(device, kernels), run.rows());
    EXPECT_THAT(t.status(), IsOk());
    auto* out = r.add_runs();
    out->set_rows(run.rows());
    out->set_compute_time_s(t->step_s);
    out->set_step_time_s(t->step_s + truth.step_overhead_s);
  }
  return r;
}

// Waits until the node is handed a profile (the caller's Calibrate runs on
// another thread).
quilt::v1::ModelProfile AskedOf(ModelProfiles* p, const std::string& node, uint64_t incarnation) {
  for (int i = 0; i < 2000; ++i) {
    quilt::v1::HeartbeatResponse resp = Beat(p, node, incarnation);
    if (resp.profiles_size() > 0) {
      EXPECT_EQ(resp.profiles_size(), 1);
      return resp.profiles(0);
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  ADD_FAILURE() << node << " was asked nothing";
  return {};
}

TEST(ModelProfiles, CalibratesEachNodeFromItsProfileAndKeepsTheResult) {
  const Graph g = Mlp();
  ModelProfiles profiles;
  Beat(&profiles, "n0", 7);
  quilt::v1::ClusterSpec cluster = Cluster({"n0"}, /*with_gpu_node=*/true);
  const quilt::v1::Device device = cluster.nodes(0).devices(0);
  std::vector<std::string> lines;
  std::thread submit([&] { lines = profiles.Calibrate(g, 64, absl::Seconds(60), &cluster); });
  const quilt::v1::ModelProfile asked = AskedOf(&profiles, "n0", 7);
  EXPECT_EQ(asked.device(), "n0/cpu:0");
  // 64 rows over two devices: 32 a device, and half of that.
  ASSERT_EQ(asked.runs_size(), 2);
  EXPECT_EQ(asked.runs(0).rows(), 32);
  EXPECT_EQ(asked.runs(1).rows(), 16);
  EXPECT_GT(asked.steps(), asked.warmup_steps());
  quilt::v1::DistributedProgram program;
  ASSERT_TRUE(program.ParseFromString(asked.runs(0).program()));
  EXPECT_EQ(program.global_batch(), 32);
  EXPECT_TRUE(Beat(&profiles, "g0", 1).profiles().empty());  // nothing to run there
  const DeviceCalibration truth{2e10, 30e-6, 500e-6};
  Beat(&profiles, "n0", 7, {Measured(g, asked, device, truth)});
  submit.join();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_THAT(lines[0], StartsWith("n0: profiled on n0/cpu:0 (32 and 16 rows"));
  EXPECT_THAT(lines[1], HasSubstr("g0: start-up figures (no CPU device"));
  const quilt::v1::Device& calibrated = cluster.nodes(0).devices(0);
  EXPECT_NEAR(calibrated.measured_gemm_flops_per_s() / truth.flops_per_s, 1, 0.02);
  EXPECT_NEAR(calibrated.measured_step_overhead_s(), truth.step_overhead_s, 1e-9);
  EXPECT_EQ(calibrated.measured_op_type_rates_size(), 0);
  EXPECT_EQ(cluster.nodes(1).devices(0).efficiency(), 0.3);  // the GPU as it was
  // The same model again: planned at once from the kept result.
  quilt::v1::ClusterSpec again = Cluster({"n0"}, true);
  const absl::Time start = absl::Now();
  EXPECT_THAT(profiles.Calibrate(g, 64, absl::Seconds(60), &again)[0], StartsWith("n0: profiled"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_TRUE(Beat(&profiles, "n0", 7).profiles().empty());
  // A restarted worker is profiled again.
  Beat(&profiles, "n0", 8);
  quilt::v1::ClusterSpec third = Cluster({"n0"}, true);
  std::thread resubmit([&] { lines = profiles.Calibrate(g, 64, absl::Seconds(60), &third); });
  const quilt::v1::ModelProfile asked_again = AskedOf(&profiles, "n0", 8);
  quilt::v1::ModelProfileResult failed;
  failed.set_profile_id(asked_again.profile_id());
  failed.set_error("the executor at 32 rows failed: out of memory");
  Beat(&profiles, "n0", 8, {failed});
  resubmit.join();
  EXPECT_THAT(lines[0], HasSubstr("n0: start-up figures (its profile failed: the executor at 32 "
                                  "rows failed: out of memory)"));
  EXPECT_EQ(third.nodes(0).devices(0).measured_gemm_flops_per_s(), 8e10);
}

// A profile's programs carry no weights: each float32 parameter with a
// value (an ONNX model's) goes as a seeded uniform initializer over that
// value's range, which takes a step as long; the model is the same one
// (its key), and the graph planned keeps its values.
TEST(ModelProfiles, AProfileCarriesNoWeightsButTheirRange) {
  Graph g = Mlp();
  ASSERT_FALSE(g.parameters.empty());
  ParameterSpec& w = g.parameters[0];
  const TensorInfo* info = g.FindTensor(w.tensor);
  ASSERT_NE(info, nullptr);
  absl::StatusOr<Tensor> value = Tensor::Empty(DType::kF32, info->shape.Concrete(1));
  ASSERT_THAT(value.status(), IsOk());
  for (int64_t i = 0; i < value->numel(); ++i) {
    value->f32()[i] = -0.25f + 0.75f * static_cast<float>(i) / static_cast<float>(value->numel());
  }
  const float high = value->f32()[value->numel() - 1];
  w.value = *value;
  ModelProfiles profiles;
  Beat(&profiles, "n0", 1);
  quilt::v1::ClusterSpec cluster = Cluster({"n0"}, /*with_gpu_node=*/false);
  std::thread submit([&] { profiles.Calibrate(g, 64, absl::Seconds(60), &cluster); });
  const quilt::v1::ModelProfile asked = AskedOf(&profiles, "n0", 1);
  ASSERT_EQ(asked.runs_size(), 2);
  for (const auto& run : asked.runs()) {
    quilt::v1::DistributedProgram program;
    ASSERT_TRUE(program.ParseFromString(run.program()));
    ASSERT_EQ(program.graph().parameters_size(), static_cast<int>(g.parameters.size()));
    for (const quilt::v1::Parameter& p : program.graph().parameters()) {
      EXPECT_FALSE(p.has_value()) << p.tensor();
      if (p.tensor() != w.tensor) continue;
      ASSERT_TRUE(p.has_initializer());
      EXPECT_EQ(p.initializer().kind(), quilt::v1::Initializer::KIND_UNIFORM);
      EXPECT_FLOAT_EQ(p.initializer().low(), -0.25f);
      EXPECT_FLOAT_EQ(p.initializer().high(), high);
    }
    // Far smaller than the weight it leaves out.
    EXPECT_LT(run.program().size(), static_cast<size_t>(value->numel()) * sizeof(float));
  }
  EXPECT_TRUE(g.parameters[0].value.has_value());
  profiles.Shutdown();
  submit.join();
}

TEST(ModelProfiles, AHugeBatchIsProfiledAtTheRowsOfAShortStep) {
  const Graph g = Mlp();
  quilt::v1::ClusterSpec cluster = Cluster({"n0"}, /*with_gpu_node=*/false);
  const quilt::v1::Device device = cluster.nodes(0).devices(0);
  const int64_t batch = 1 << 16;
  absl::StatusOr<OneDevicePrediction> whole = PredictOneDevice(g, device, batch);
  ASSERT_THAT(whole.status(), IsOk());
  ASSERT_LT(whole->peak_bytes, device.memory_bytes());  // it fits: it is profiled
  ProfileOptions o;
  o.max_step_s = whole->step_s / 50;
  ModelProfiles profiles(o);
  Beat(&profiles, "n0", 7);
  std::vector<std::string> lines;
  std::thread submit([&] { lines = profiles.Calibrate(g, batch, absl::Seconds(60), &cluster); });
  const quilt::v1::ModelProfile asked = AskedOf(&profiles, "n0", 7);
  ASSERT_EQ(asked.runs_size(), 2);
  const int64_t rows = asked.runs(0).rows();
  EXPECT_LT(rows, batch / 8);
  absl::StatusOr<OneDevicePrediction> step = PredictOneDevice(g, device, rows);
  ASSERT_THAT(step.status(), IsOk());
  EXPECT_LE(step->step_s, 1.5 * o.max_step_s);
  EXPECT_EQ(asked.runs(1).rows(), rows / 2);
  Beat(&profiles, "n0", 7, {Measured(g, asked, device, DeviceCalibration{2e10, 30e-6, 500e-6})});
  submit.join();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], StartsWith(absl::StrCat("n0: profiled on n0/cpu:0 (", rows, " and ")));
}

TEST(ModelProfiles, AProfileTakenWhileJobsRanIsUsedOnceAndNotKept) {
  const Graph g = Mlp();
  ModelProfiles profiles;
  Beat(&profiles, "n0", 7);
  quilt::v1::ClusterSpec cluster = Cluster({"n0"}, false);
  const quilt::v1::Device device = cluster.nodes(0).devices(0);
  std::vector<std::string> lines;
  std::thread submit([&] { lines = profiles.Calibrate(g, 64, absl::Seconds(60), &cluster); });
  const quilt::v1::ModelProfile asked = AskedOf(&profiles, "n0", 7);
  quilt::v1::ModelProfileResult loaded = Measured(g, asked, device, {1e10, 30e-6, 500e-6});
  loaded.set_jobs_running(2);
  Beat(&profiles, "n0", 7, {loaded});
  submit.join();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], StartsWith("n0: profiled on n0/cpu:0"));
  EXPECT_THAT(lines[0], HasSubstr("(measured while 2 job(s) ran there; not kept)"));
  // The next plan of the model asks again.
  quilt::v1::ClusterSpec again = Cluster({"n0"}, false);
  std::thread resubmit([&] { lines = profiles.Calibrate(g, 64, absl::Seconds(60), &again); });
  const quilt::v1::ModelProfile asked_again = AskedOf(&profiles, "n0", 7);
  EXPECT_EQ(asked_again.profile_id(), asked.profile_id());
  Beat(&profiles, "n0", 7, {Measured(g, asked_again, device, {2e10, 30e-6, 500e-6})});
  resubmit.join();
  EXPECT_THAT(lines[0], Not(HasSubstr("not kept")));
}

TEST(ModelProfiles, ANodeThatDoesNotAnswerKeepsItsStartUpFigures) {
  const Graph g = Mlp();
  ModelProfiles profiles;
  quilt::v1::ClusterSpec cluster = Cluster({"n0", "n1"}, false);
  const std::vector<std::string> lines =
      profiles.Calibrate(g, 16, absl::Milliseconds(200), &cluster);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_THAT(lines[0], HasSubstr("n0: start-up figures (no profile within 200ms)"));
  EXPECT_EQ(cluster.nodes(0).devices(0).measured_gemm_flops_per_s(), 8e10);
  EXPECT_EQ(cluster.nodes(0).devices(0).measured_op_type_rates_size(), 1);
}

TEST(ModelProfiles, AModelThatDoesNotFitOneDeviceIsNotProfiled) {
  const Graph g = Mlp();
  ModelProfiles profiles;
  Beat(&profiles, "n0", 1);
  quilt::v1::ClusterSpec cluster = Cluster({"n0"}, false);
  cluster.mutable_nodes(0)->mutable_devices(0)->set_memory_bytes(1 << 16);
  const std::vector<std::string> lines =
      profiles.Calibrate(g, 64, absl::Milliseconds(100), &cluster);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], HasSubstr("n0: start-up figures (the model at 64 rows needs"));
  EXPECT_TRUE(Beat(&profiles, "n0", 1).profiles().empty());
}

TEST(ModelProfiles, ANodeThatStopsBeingReadyIsNotWaitedFor) {
  const Graph g = testing::ZooTrainingGraph("mlp");
  std::atomic<bool> ready{true};
  ModelProfiles profiles({}, [&ready](const std::string&) { return ready.load(); });
  quilt::v1::ClusterSpec cluster = Cluster({"n0"}, false);
  std::vector<std::string> lines;
  const absl::Time start = absl::Now();
  std::thread submit([&] { lines = profiles.Calibrate(g, 16, absl::Seconds(60), &cluster); });
  AskedOf(&profiles, "n0", 1);  // handed out, never answered
  ready = false;
  submit.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], HasSubstr("n0: start-up figures (it stopped being Ready while profiling)"));
}

TEST(ModelProfiles, ShutdownEndsTheWaitsAtOnce) {
  const Graph g = testing::ZooTrainingGraph("mlp");
  ModelProfiles profiles;
  quilt::v1::ClusterSpec cluster = Cluster({"n0"}, false);
  std::vector<std::string> lines;
  const absl::Time start = absl::Now();
  std::thread submit([&] { lines = profiles.Calibrate(g, 16, absl::Seconds(60), &cluster); });
  AskedOf(&profiles, "n0", 1);
  profiles.Shutdown();
  submit.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], HasSubstr("n0: start-up figures (the coordinator is stopping)"));
}

TEST(ModelProfiles, AClientThatLeavesEndsItsWaitSayingSo) {
  const Graph g = testing::ZooTrainingGraph("mlp");
  ModelProfiles profiles;
  quilt::v1::ClusterSpec cluster = Cluster({"n0"}, false);
  std::atomic<bool> left{false};
  std::vector<std::string> lines;
  std::thread submit([&] {
    lines = profiles.Calibrate(g, 16, absl::Seconds(60), &cluster, [&] { return left.load(); });
  });
  AskedOf(&profiles, "n0", 1);
  left = true;
  submit.join();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0],
              HasSubstr("n0: start-up figures (the client that asked for the plan left)"));
}

}  // namespace
}  // namespace quilt
