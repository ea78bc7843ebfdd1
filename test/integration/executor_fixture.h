// The fixture of the executor tests (executor_oracle_test,
// executor_process_test): fixture models planned on a cluster of CPU
// devices beside their single-device reference run (Prepare), a job's
// program written for quilt-executor (WriteJob), one executor process per
// node run to the end with their summed losses and metrics (RunExecutors),
// and the check that a run ends with the reference's tensors and losses
// (ExpectMatchesReference).
#ifndef QUILT_TEST_INTEGRATION_EXECUTOR_FIXTURE_H_
#define QUILT_TEST_INTEGRATION_EXECUTOR_FIXTURE_H_

#include <sys/wait.h>

#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "src/common/status.h"
#include "src/common/status_matchers.h"
#include "src/graph/autodiff.h"
#include "src/graph/model_loader.h"
#include "src/planner/lower.h"
#include "src/planner/planner_test_util.h"
#include "src/runtime/data/dataset.h"
#include "src/runtime/data/npy.h"
#include "src/runtime/local_trainer.h"
#include "src/runtime/parallel.h"
#include "src/testing/subprocess.h"
#include "src/testing/temp_dir.h"

namespace quilt::testing {

constexpr int64_t kSteps = 10;

struct Model {
  std::string name;  // fixture directory
  std::string optimizer;
  int64_t batch;
};

// `nodes` nodes of `per_node` CPU devices each, speeds falling by node;
// the first node's NIC twice as fast as the others' (groups over three or
// more nodes carry their NICs to the executors).
inline quilt::v1::ClusterSpec Cluster(int nodes, int per_node) {
  quilt::v1::ClusterSpec spec;
  spec.set_name("loopback");
  for (int n = 0; n < nodes; ++n) {
    auto* node = spec.add_nodes();
    node->set_node_id(absl::StrCat("w", n));
    for (int d = 0; d < per_node; ++d) {
      auto* dev = node->add_devices();
      dev->set_id(absl::StrCat("w", n, "/cpu:", d));
      dev->set_kind(quilt::v1::DEVICE_KIND_CPU);
      dev->set_index(d);
      dev->set_measured_gemm_flops_per_s(9e10 / (1 + n));
      dev->set_memory_bytes(int64_t{4} << 30);
    }
    node->mutable_nic()->set_bandwidth_bytes_per_s(n == 0 ? 2.5e9 : 1.25e9);
  }
  return spec;
}

struct Setup {
  Graph graph;
  Topology topo;
  std::unique_ptr<CostModel> cost;
  std::string data;  // --data of the executors
  std::vector<float> losses;
  std::map<std::string, Tensor> reference;  // final parameters and state
};

inline std::unique_ptr<Setup> Prepare(const Model& m, const quilt::v1::ClusterSpec& spec) {
  auto s = std::make_unique<Setup>();
  const std::string dir = RunfilePath("test/fixtures/" + m.name);
  absl::StatusOr<Graph> g = LoadModel(dir + "/model.onnx", m.batch);
  EXPECT_THAT(g.status(), IsOk());
  TrainingOptions to;
  if (g->loss.type == LossType::kNone) to.loss = LossType::kSoftmaxCrossEntropy;
  to.optimizer.kind =
      m.optimizer == "adam" ? OptimizerSpec::Kind::kAdam : OptimizerSpec::Kind::kSgd;
  to.optimizer.learning_rate = m.optimizer == "adam" ? 1e-3 : 0.05;
  to.optimizer.momentum = m.optimizer == "adam" ? 0 : 0.9;
  EXPECT_THAT(BuildTrainingGraph(&*g, to), IsOk());
  s->graph = std::move(*g);
  s->data = dir + "/x.npy," + dir + "/y.npy";
  // The single-device reference.
  absl::StatusOr<DataSignature> sig = DataSignatureOf(s->graph);
  EXPECT_THAT(sig.status(), IsOk());
  absl::StatusOr<std::unique_ptr<Dataset>> data =
      OpenNumpyDataset({dir + "/x.npy"}, dir + "/y.npy", *sig);
  EXPECT_THAT(data.status(), IsOk());
  SetComputeThreads(1);
  LocalTrainOptions lo;
  lo.batch = m.batch;
  lo.steps = kSteps;
  absl::StatusOr<LocalTrainResult> ref = TrainLocal(s->graph, data->get(), lo);
  EXPECT_THAT(ref.status(), IsOk());
  s->losses = ref->losses;
  for (const std::string& name : ref->runner->PersistentNames()) {
    s->reference[name] = *ref->runner->Persistent(name);
  }
  TopologyAndCost(spec, s->graph, &s->topo, &s->cost);
  return s;
}

// A job's directory: the program and the rendezvous directory, and the
// command line of its executors.
struct JobDir {
  std::string base;
  // quilt-executor for `rank` of `world`, `steps` steps on `data`, then
  // `extra` flags.
  std::vector<std::string> Argv(const std::string& world, int rank, int64_t steps,
                                const std::string& data,
                                const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> argv = {RunfilePath("src/runtime/quilt-executor"),
                                     "--program",
                                     base + "/program.pb",
                                     "--world",
                                     world,
                                     "--rank",
                                     std::to_string(rank),
                                     "--rendezvous",
                                     base + "/rdv",
                                     "--steps",
                                     std::to_string(steps),
                                     "--data",
                                     data};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }
};

inline JobDir WriteJob(const TempDir& dir, const std::string& tag,
                       const quilt::v1::DistributedProgram& program) {
  JobDir job{dir.File(tag)};
  std::filesystem::create_directories(job.base + "/rdv");
  std::ofstream(job.base + "/program.pb", std::ios::binary) << program.SerializeAsString();
  return job;
}

struct RunResult {
  std::vector<double> losses;  // summed over processes
  std::vector<nlohmann::json> metrics;
  std::string out_dir;
};

// Runs one executor per node; returns their summed losses and metrics.
// `steps` steps each, with `extra` flags. Any executor that fails (one
// killed by a signal included) fails the run.
inline absl::StatusOr<RunResult> RunExecutors(const quilt::v1::DistributedProgram& program,
                                              const Setup& s, const TempDir& dir,
                                              const std::string& tag, int64_t steps = kSteps,
                                              const std::vector<std::string>& extra = {}) {
  const JobDir job = WriteJob(dir, tag, program);
  const std::string& base = job.base;
  std::vector<std::string> world;
  for (int n = 0; n < s.topo.num_nodes(); ++n) world.push_back(s.topo.node_id(n));
  std::vector<Subprocess> procs;
  for (size_t r = 0; r < world.size(); ++r) {
    std::vector<std::string> flags = {"--out", absl::StrCat(base, "/out", r), "--step-timeout",
                                      "60"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    absl::StatusOr<Subprocess> p = Subprocess::Start(
        job.Argv(absl::StrJoin(world, ","), static_cast<int>(r), steps, s.data, flags),
        absl::StrCat(base, "/log", r));
    if (!p.ok()) return p.status();
    procs.push_back(std::move(*p));
  }
  RunResult result;
  result.out_dir = base;
  result.losses.assign(steps, 0);
  // Every executor's end, so that a failure names all that failed (one
  // that died early shows as the others' missing peer).
  std::string failures;
  for (size_t r = 0; r < procs.size(); ++r) {
    std::optional<int> st = procs[r].Wait(absl::Seconds(120));
    if (st.has_value() && *st == 0) continue;
    std::ifstream log(absl::StrCat(base, "/log", r));
    std::stringstream text;
    text << log.rdbuf();
    const std::string how = !st.has_value() ? "did not exit within 120 s"
                            : WIFSIGNALED(*st)
                                ? absl::StrCat("was killed by signal ", WTERMSIG(*st))
                                : absl::StrCat("exited ", WEXITSTATUS(*st));
    absl::StrAppend(&failures, failures.empty() ? "" : "\n", "executor ", r, " ", how, ": ",
                    text.str());
  }
  if (!failures.empty()) return absl::InternalError(failures);
  for (size_t r = 0; r < procs.size(); ++r) {
    std::ifstream m(absl::StrCat(base, "/out", r, "/metrics.json"));
    nlohmann::json metrics = nlohmann::json::parse(m);
    for (int64_t k = 0; k < steps; ++k) {
      const nlohmann::json& part = metrics["loss_parts"][static_cast<size_t>(k)];
      if (!part.is_null()) result.losses[k] += part.get<double>();
    }
    result.metrics.push_back(metrics);
  }
  return result;
}

// Every tensor every process holds equals the reference (rows of it, for
// shards), and each step's loss the reference's (the run's first step is
// the reference's step `first` + 1).
inline void ExpectMatchesReference(const Setup& s, const RunResult& r, int64_t first = 0) {
  std::set<std::string> seen;
  for (size_t rank = 0; rank < r.metrics.size(); ++rank) {
    // A process whose devices the plan leaves idle holds nothing.
    for (const auto& t : r.metrics[rank].value("tensors", nlohmann::json::array())) {
      const std::string name = t["tensor"];
      auto ref = s.reference.find(name);
      if (ref == s.reference.end()) continue;  // not a persistent tensor of the reference
      absl::StatusOr<Tensor> got =
          ReadNpy(absl::StrCat(r.out_dir, "/out", rank, "/", t["file"].get<std::string>()));
      ASSERT_THAT(got.status(), IsOk());
      const int64_t b = t["begin"], e = t["end"];
      const Tensor& want = ref->second;
      const int64_t row = want.rank() == 0 ? 1 : want.numel() / std::max<int64_t>(1, want.dim(0));
      const int64_t offset = (b == 0 && e == 0) ? 0 : b * row;
      ASSERT_EQ(got->numel(), (b == 0 && e == 0) ? want.numel() : (e - b) * row) << name;
      if (want.dtype() != DType::kF32) continue;
      double worst = 0;
      for (int64_t i = 0; i < got->numel(); ++i) {
        const double w = want.f32()[offset + i], g = got->f32()[i];
        // float32 after 10 steps (sums in another order): 1e-4 absolute
        // plus 1e-3 relative.
        worst = std::max(worst, std::abs(w - g) / (1e-4 + 1e-3 * std::abs(w)));
      }
      EXPECT_LT(worst, 1.0) << name << " on " << t["device"]
                            << " differs from the single-device run";
      seen.insert(name);
    }
  }
  // Every trainable parameter is held somewhere.
  for (const ParameterSpec& p : s.graph.parameters) {
    if (!p.frozen) {
      EXPECT_TRUE(seen.count(p.tensor)) << p.tensor << " is held by no process";
    }
  }
  ASSERT_EQ(first + static_cast<int64_t>(r.losses.size()), kSteps);
  for (size_t k = 0; k < r.losses.size(); ++k) {
    const double want = s.losses[first + k];
    EXPECT_NEAR(r.losses[k], want, 1e-4 * (1 + std::abs(want))) << "step " << first + k + 1;
  }
}

inline absl::StatusOr<quilt::v1::DistributedProgram> Program(const Setup& s,
                                                             const quilt::v1::Strategy& strategy,
                                                             int64_t batch) {
  ASSIGN_OR_RETURN(quilt::v1::DistributedProgram p,
                   Lower(s.graph, strategy, s.topo, s.cost.get(), batch));
  RETURN_IF_ERROR(ValidateProgram(p, s.graph, s.topo));
  return p;
}

}  // namespace quilt::testing

#endif  // QUILT_TEST_INTEGRATION_EXECUTOR_FIXTURE_H_
