// The correctness oracle (DESIGN §6): runs of 2–4 quilt-executor processes
// over UCX on loopback end a training run with the parameters the
// single-device run ends with, for the fixture MLP, CNN, transformer and
// language model with tied embeddings, and
// for every kind of strategy — data parallel with even and proportional
// splits and each all-reduce (ring, tree, hierarchical), parameter servers
// (sharded), embedding tables' gradients gathered (sparse lookup), the
// planner's hybrid plan, and seeded random strategies — and
// the per-process loss
// parts sum to the single-device losses. A killed executor makes the others
// fail with a clear error, soon.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "src/common/cpu_affinity.h"
#include "src/common/status.h"
#include "src/common/status_matchers.h"
#include "src/graph/autodiff.h"
#include "src/graph/model_loader.h"
#include "src/graph/op_registry.h"
#include "src/planner/baselines.h"
#include "src/planner/heterog.h"
#include "src/planner/lookups.h"
#include "src/planner/lower.h"
#include "src/planner/planner_test_util.h"
#include "src/planner/program_validator.h"
#include "src/runtime/data/dataset.h"
#include "src/runtime/data/npy.h"
#include "src/runtime/executor.h"
#include "src/runtime/local_trainer.h"
#include "src/runtime/parallel.h"
#include "src/testing/subprocess.h"
#include "src/testing/temp_dir.h"

namespace quilt::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kSteps = 10;

struct Model {
  std::string name;  // fixture directory
  std::string optimizer;
  int64_t batch;
};

// `nodes` nodes of `per_node` CPU devices each, speeds falling by node;
// the first node's NIC twice as fast as the others' (groups over three or
// more nodes carry their NICs to the executors).
quilt::v1::ClusterSpec Cluster(int nodes, int per_node) {
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

std::unique_ptr<Setup> Prepare(const Model& m, const quilt::v1::ClusterSpec& spec) {
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

JobDir WriteJob(const TempDir& dir, const std::string& tag,
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
absl::StatusOr<RunResult> RunExecutors(const quilt::v1::DistributedProgram& program, const Setup& s,
                                       const TempDir& dir, const std::string& tag,
                                       int64_t steps = kSteps,
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
void ExpectMatchesReference(const Setup& s, const RunResult& r, int64_t first = 0) {
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

absl::StatusOr<quilt::v1::DistributedProgram> Program(const Setup& s,
                                                      const quilt::v1::Strategy& strategy,
                                                      int64_t batch) {
  ASSIGN_OR_RETURN(quilt::v1::DistributedProgram p,
                   Lower(s.graph, strategy, s.topo, s.cost.get(), batch));
  RETURN_IF_ERROR(ValidateProgram(p, s.graph, s.topo));
  return p;
}

// A seeded random strategy: contiguous op groups, each on a random device
// subset with random replica counts (or one device), each group's
// parameters aggregated by a random method.
quilt::v1::Strategy RandomStrategy(const Graph& g, const Topology& topo, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::vector<std::string> fwd = ForwardOps(g);
  const int groups = 1 + static_cast<int>(rng() % 3);
  quilt::v1::Strategy s;
  s.set_name("random");
  std::map<std::string, int> group_of;
  for (int k = 0; k < groups; ++k) {
    auto* grp = s.add_groups();
    grp->set_group(k);
    for (size_t i = fwd.size() * k / groups; i < fwd.size() * (k + 1) / groups; ++i) {
      grp->add_ops(fwd[i]);
      group_of[fwd[i]] = k;
    }
    std::vector<int> devices;
    for (int d = 0; d < topo.num_devices(); ++d) {
      if (rng() % 2 == 0) devices.push_back(d);
    }
    if (devices.empty()) devices.push_back(static_cast<int>(rng() % topo.num_devices()));
    for (int d : devices) {
      auto* r = grp->add_replicas();
      r->set_device(topo.device(d).id);
      r->set_replicas(1 + static_cast<int>(rng() % 3));
    }
  }
  for (const Op& op : g.ops) {
    if (!OpRegistry::Global().Find(op.type)->is_update) continue;
    auto* a = s.add_aggregations();
    a->set_parameter(op.inputs[0]);
    switch (rng() % 4) {
      case 0:
        a->set_method(quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE);
        break;
      case 1:
        a->set_method(quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE);
        break;
      case 2:
        a->set_method(quilt::v1::AGGREGATION_METHOD_TREE_ALLREDUCE);
        break;
      default:
        a->set_method(quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER);
        const int first = static_cast<int>(rng() % topo.num_devices());
        a->add_servers(topo.device(first).id);
        if (rng() % 2 == 0 && topo.num_devices() > 1) {
          a->add_servers(topo.device((first + 1) % topo.num_devices()).id);
        }
    }
  }
  return s;
}

// Forward ops [0, cut/3) and [cut/3, end) as two groups: one on device 0
// (with one_first) or the last device, the other on every device; ring
// all-reduce.
quilt::v1::Strategy TwoGroups(const Graph& g, const Topology& topo, int cut, bool one_first) {
  const std::vector<std::string> fwd = ForwardOps(g);
  const size_t boundary = fwd.size() * static_cast<size_t>(cut) / 3;
  quilt::v1::Strategy s;
  s.set_name("two-groups");
  for (int k = 0; k < 2; ++k) {
    auto* grp = s.add_groups();
    grp->set_group(k);
    for (size_t i = k == 0 ? 0 : boundary; i < (k == 0 ? boundary : fwd.size()); ++i) {
      grp->add_ops(fwd[i]);
    }
    const bool one = (k == 0) == one_first;
    for (int d = 0; d < topo.num_devices(); ++d) {
      if (one && d != (one_first ? 0 : topo.num_devices() - 1)) continue;
      auto* r = grp->add_replicas();
      r->set_device(topo.device(d).id);
      r->set_replicas(1);
    }
  }
  for (const Op& op : g.ops) {
    if (!OpRegistry::Global().Find(op.type)->is_update) continue;
    auto* a = s.add_aggregations();
    a->set_parameter(op.inputs[0]);
    a->set_method(quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE);
  }
  return s;
}

struct Case {
  Model model;
  int nodes;
  int per_node;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.model.name << "/" << c.model.optimizer << "/" << c.nodes << "x" << c.per_node;
}

class Oracle : public ::testing::TestWithParam<Case> {};

TEST_P(Oracle, EveryStrategyEndsWithTheSingleDeviceParameters) {
  const Case& c = GetParam();
  auto s = Prepare(c.model, Cluster(c.nodes, c.per_node));
  TempDir dir;
  const int n = s->topo.num_devices();
  std::vector<std::pair<std::string, quilt::v1::Strategy>> strategies;
  std::vector<int64_t> even(n, 1), proportional(n);
  for (int d = 0; d < n; ++d) proportional[d] = 1 + (n - d) % 3;
  strategies.push_back(
      {"even-ring", DataParallelStrategy(s->graph, s->topo, even,
                                         quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, "e")});
  strategies.push_back(
      {"even-tree", DataParallelStrategy(s->graph, s->topo, even,
                                         quilt::v1::AGGREGATION_METHOD_TREE_ALLREDUCE, "t")});
  strategies.push_back(
      {"proportional-hierarchical",
       DataParallelStrategy(s->graph, s->topo, proportional,
                            quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE, "p")});
  {
    // The weight gradients' rows split otherwise than the rest (the
    // counts reversed): each device sums other rows' part of them, from
    // activations and output gradients sent to it.
    quilt::v1::Strategy moved =
        DataParallelStrategy(s->graph, s->topo, proportional,
                             quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE, "wg");
    for (auto& grp : *moved.mutable_groups()) {
      for (int k = grp.replicas_size() - 1; k >= 0; --k) {
        auto* r = grp.add_weight_gradient_replicas();
        r->set_device(grp.replicas(grp.replicas_size() - 1 - k).device());
        r->set_replicas(grp.replicas(k).replicas());
      }
    }
    strategies.push_back({"weight-gradients-moved", moved});
  }
  strategies.push_back(
      {"proportional-ps",
       DataParallelStrategy(s->graph, s->topo, proportional,
                            quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER, "ps")});
  {
    // Every parameter sharded over two servers.
    quilt::v1::Strategy ps = DataParallelStrategy(
        s->graph, s->topo, even, quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER, "ps2");
    for (auto& a : *ps.mutable_aggregations()) {
      a.clear_servers();
      a.add_servers(s->topo.device(0).id);
      a.add_servers(s->topo.device(n - 1).id);
    }
    strategies.push_back({"sharded-ps", ps});
  }
  {
    // Small gradients fused in buckets, larger ones summed in slices of
    // rows, by each all-reduce method in turn.
    quilt::v1::Strategy sliced = DataParallelStrategy(s->graph, s->topo, proportional,
                                                      quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE,
                                                      "sl", /*bucket_bytes=*/512);
    const quilt::v1::AggregationMethod methods[] = {
        quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, quilt::v1::AGGREGATION_METHOD_TREE_ALLREDUCE,
        quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE};
    for (int i = 0; i < sliced.aggregations_size(); ++i) {
      sliced.mutable_aggregations(i)->set_method(methods[i % 3]);
      sliced.mutable_aggregations(i)->set_partition_bytes(700);
    }
    strategies.push_back({"buckets-and-slices", sliced});
  }
  {
    SearchOptions so;
    so.max_evaluations = 60;
    so.seed = 3;
    absl::StatusOr<SearchResult> found =
        SearchHeteroG(s->graph, s->topo, *s->cost, c.model.batch,
                      Baselines(s->graph, s->topo, *s->cost, c.model.batch), so);
    ASSERT_THAT(found.status(), IsOk());
    strategies.push_back({"planner", found->variants[0]});
  }
  for (uint64_t seed : {11, 12, 13, 14})
    strategies.push_back({absl::StrCat("random", seed), RandomStrategy(s->graph, s->topo, seed)});
  // Two groups on different device sets (one device, then all; all, then
  // one), cut at a third and two thirds of the forward ops: a parameter
  // used on both sides of the cut (the transformer's shared layer norm) has
  // gradient parts partial over all devices and whole on one, which must
  // still be summed exactly once.
  for (int cut : {1, 2}) {
    for (bool one_first : {true, false}) {
      strategies.push_back({absl::StrCat("split", cut, one_first ? "-one-all" : "-all-one"),
                            TwoGroups(s->graph, s->topo, cut, one_first)});
    }
  }
  // Embedding tables' gradients gathered (sparse lookup): with every
  // device data parallel, and with the ops in two groups on different
  // device sets (a lookup's rows then come from devices that do not hold
  // the table).
  absl::StatusOr<GraphIndex> ix = GraphIndex::Build(s->graph);
  ASSERT_THAT(ix.status(), IsOk());
  const std::map<std::string, std::vector<int>> tables = LookupTables(*ix);
  if (!tables.empty()) {
    auto sparse = [&](quilt::v1::Strategy st) {
      for (auto& a : *st.mutable_aggregations()) {
        if (tables.count(a.parameter())) {
          a.set_method(quilt::v1::AGGREGATION_METHOD_SPARSE_LOOKUP);
          a.clear_servers();
          a.set_partition_bytes(0);
        }
      }
      return st;
    };
    strategies.push_back(
        {"sparse-lookups",
         sparse(DataParallelStrategy(s->graph, s->topo, proportional,
                                     quilt::v1::AGGREGATION_METHOD_TREE_ALLREDUCE, "sp"))});
    for (bool one_first : {true, false}) {
      strategies.push_back({absl::StrCat("split-sparse", one_first ? "-one-all" : "-all-one"),
                            sparse(TwoGroups(s->graph, s->topo, 1, one_first))});
    }
    strategies.push_back({"random-sparse", sparse(RandomStrategy(s->graph, s->topo, 15))});
  }
  for (const auto& [name, strategy] : strategies) {
    SCOPED_TRACE(name);
    absl::StatusOr<quilt::v1::DistributedProgram> p = Program(*s, strategy, c.model.batch);
    ASSERT_THAT(p.status(), IsOk()) << strategy.ShortDebugString();
    absl::StatusOr<RunResult> r = RunExecutors(*p, *s, dir, name);
    ASSERT_THAT(r.status(), IsOk());
    ExpectMatchesReference(*s, *r);
    if (HasFailure()) {
      std::cerr << name << ": " << strategy.ShortDebugString() << "\n";
      if (const char* o = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR")) {
        std::ofstream(absl::StrCat(o, "/", name, ".txt")) << p->DebugString();
        std::filesystem::copy(dir.File(name), absl::StrCat(o, "/", name),
                              std::filesystem::copy_options::recursive);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    FixturesAndWorlds, Oracle,
    // The CNN trains with SGD only: its convolutions' biases before batch
    // norm have a gradient of exactly zero, which Adam turns into updates
    // of ±lr driven by rounding noise, different in any two runs.
    ::testing::Values(Case{{"mlp", "sgd", 24}, 2, 1}, Case{{"mlp", "adam", 24}, 3, 1},
                      Case{{"mlp", "sgd", 24}, 2, 2}, Case{{"cnn", "sgd", 16}, 2, 1},
                      Case{{"cnn", "sgd", 16}, 4, 1}, Case{{"transformer", "sgd", 16}, 2, 1},
                      Case{{"transformer", "adam", 16}, 3, 1},
                      // A tied embedding: its gradient's lookup part and its
                      // output projection's part, in groups on different devices.
                      Case{{"tied_lm", "sgd", 16}, 3, 1},
                      // A parameter expanded over each replica's rows.
                      Case{{"cls_token", "sgd", 16}, 3, 1},
                      // The same tie, the projection a folded transposed copy.
                      Case{{"tied_lm_folded", "sgd", 16}, 3, 1},
                      // A padding mask computed from each replica's ids.
                      Case{{"padded_encoder", "sgd", 16}, 3, 1},
                      // 1-D convolutions and batch norm over [N, C, L].
                      Case{{"text_cnn", "sgd", 16}, 2, 1},
                      // Transposed convolutions (an input gradient as an op).
                      Case{{"autoencoder", "sgd", 16}, 2, 1},
                      // LSTM and GRU unrolled, the batch on axis 1 of [T, B, ·].
                      Case{{"recurrent", "sgd", 16}, 2, 1},
                      // Max / Min from masks of each replica's rows.
                      Case{{"min_max", "sgd", 16}, 2, 1},
                      // Padding by copies; a class token repeated over the batch.
                      Case{{"pads_repeats", "sgd", 16}, 2, 1},
                      // Attention by einsum (batched MatMuls of each replica's rows).
                      Case{{"einsum_attention", "sgd", 16}, 2, 1},
                      // torch.gather by one-hot masks; int64 slices of the ids.
                      Case{{"gather_elements", "sgd", 16}, 2, 1},
                      // Blocks moved between space and depth, the batch split.
                      Case{{"pixel_shuffler", "sgd", 16}, 2, 1},
                      // Shifted windows: a mask folded from ScatterND, rolls.
                      Case{{"swin_blocks", "sgd", 16}, 2, 1},
                      // Language-model blocks: sliced labels, integer tables over
                      // the batch, a padding row tied to the output layer.
                      Case{{"lm_blocks", "sgd", 16}, 2, 1},
                      // One layer applied three times: one weight, summed gradients.
                      Case{{"shared_layers", "sgd", 16}, 2, 1},
                      // Or / And of masks, int64 counts over each replica's rows.
                      Case{{"mask_ops", "sgd", 16}, 2, 1},
                      // The model's own loss: a binary cross-entropy's mean,
                      // partial over the replicas' rows.
                      Case{{"multilabel_bce", "sgd", 16}, 2, 1},
                      // A loss past the batch mean (a root, a weighted sum): whole
                      // on every replica, reported once.
                      Case{{"mixed_losses", "sgd", 16}, 3, 1},
                      // x.shape[0], kl_div's batchmean, an unbiased variance over
                      // the batch: the global batch, whatever each replica holds.
                      Case{{"batch_size_losses", "sgd", 16}, 3, 1},
                      // Labels ignored unevenly over the replicas' rows: the mean
                      // over the kept labels of the whole batch.
                      Case{{"ignored_labels", "sgd", 16}, 2, 1},
                      // Class weights: the weighted mean over the whole batch's
                      // labels (the weight sum too is the batch's).
                      Case{{"weighted_ce", "sgd", 16}, 3, 1},
                      // One-hot rows of each replica's labels.
                      Case{{"smoothed_ce", "sgd", 16}, 2, 1},
                      // Per-sample cross-entropies, then a mean.
                      Case{{"focal_loss", "sgd", 16}, 2, 1},
                      // NLL over [N, C, T], class weights, a class ignored.
                      Case{{"mixture_nll", "sgd", 16}, 2, 1},
                      // Probability targets (mixup's): a mean over the batch.
                      Case{{"soft_targets", "sgd", 16}, 3, 1},
                      // Integer arithmetic on each replica's ids (//, %, where),
                      // floor, amin and logsumexp.
                      Case{{"integer_ops", "sgd", 16}, 2, 1},
                      // nn.RNN unrolled; F.pad cropping feature maps.
                      Case{{"elman_rnn", "sgd", 16}, 2, 1},
                      Case{{"cropping_pads", "sgd", 16}, 3, 1},
                      // Grouped-query attention: key/value heads repeated.
                      Case{{"gqa_attention", "sgd", 16}, 2, 1}),
    [](const auto& info) {
      const Case& c = info.param;
      return absl::StrCat(c.model.name, "_", c.model.optimizer, "_", c.nodes, "x", c.per_node);
    });

TEST(Executor, AKilledPeerFailsTheOthersWithAClearError) {
  auto s = Prepare({"mlp", "sgd", 24}, Cluster(2, 1));
  TempDir dir;
  std::vector<int64_t> even(2, 1);
  absl::StatusOr<quilt::v1::DistributedProgram> p =
      Program(*s,
              DataParallelStrategy(s->graph, s->topo, even,
                                   quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, "e"),
              24);
  ASSERT_THAT(p.status(), IsOk());
  const JobDir job = WriteJob(dir, "kill", *p);
  const std::string& base = job.base;
  std::vector<Subprocess> procs;
  for (int r = 0; r < 2; ++r) {
    // Slow steps (emulated slowdown) so the kill lands mid-run.
    absl::StatusOr<Subprocess> proc = Subprocess::Start(
        job.Argv("w0,w1", r, 100000, s->data,
                 {"--slowdown", "w0/cpu:0=50,w1/cpu:0=50", "--step-timeout", "30"}),
        absl::StrCat(base, "/log", r));
    ASSERT_THAT(proc.status(), IsOk());
    procs.push_back(std::move(*proc));
  }
  absl::SleepFor(absl::Seconds(2));
  procs[1].Signal(SIGKILL);
  const absl::Time killed = absl::Now();
  std::optional<int> st = procs[0].Wait(absl::Seconds(40));
  ASSERT_TRUE(st.has_value()) << "the surviving executor hangs";
  // Found by the transport (the peer's endpoint fails), not by the step
  // timeout.
  EXPECT_LT(absl::Now() - killed, absl::Seconds(10));
  // A clean exit with the error, not a crash on the way out (the transfers
  // the failed step left posted end with the transport).
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 1) << "wait status " << *st;
  std::ifstream log(base + "/log0");
  std::stringstream text;
  text << log.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("rank 1"));
  EXPECT_THAT(text.str(), HasSubstr("the peer failed"));
  EXPECT_THAT(text.str(), HasSubstr("step "));
}

// A program whose communication names what does not exist is refused
// before anything runs, naming the instruction, not failed mid-step.
TEST(Executor, RefusesProgramsNamingUnknownTensorsDevicesPushesOrGroups) {
  auto s = Prepare({"mlp", "sgd", 24}, Cluster(2, 1));
  std::vector<int64_t> even(2, 1);
  absl::StatusOr<quilt::v1::DistributedProgram> ring =
      Program(*s,
              DataParallelStrategy(s->graph, s->topo, even,
                                   quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, "e"),
              24);
  ASSERT_THAT(ring.status(), IsOk());
  absl::StatusOr<quilt::v1::DistributedProgram> ps =
      Program(*s,
              DataParallelStrategy(s->graph, s->topo, even,
                                   quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER, "p"),
              24);
  ASSERT_THAT(ps.status(), IsOk());
  auto create = [](quilt::v1::DistributedProgram p) {
    absl::StatusOr<std::unique_ptr<Executor>> e =
        Executor::Create(std::move(p), {"w0", "w1"}, 0, nullptr, nullptr, ExecutorOptions{});
    return e.status();
  };
  // Unchanged, they get as far as the missing dataset.
  EXPECT_THAT(create(*ring), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dataset")));
  EXPECT_THAT(create(*ps), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dataset")));
  // The first instruction of a kind on device `d` (the other process's
  // too: its pulls are served here).
  auto first = [](quilt::v1::DistributedProgram* p, int d, auto has) -> quilt::v1::Instruction* {
    for (auto& ins : *p->mutable_devices(d)->mutable_instructions()) {
      if (has(ins)) return &ins;
    }
    return nullptr;
  };
  auto all_reduce = [](const quilt::v1::Instruction& i) { return i.has_all_reduce(); };
  struct Broken {
    std::string what;
    quilt::v1::DistributedProgram program;
  };
  std::vector<Broken> broken;
  {
    quilt::v1::DistributedProgram p = *ring;
    quilt::v1::Instruction* ins = first(&p, 0, all_reduce);
    ASSERT_NE(ins, nullptr);
    ins->mutable_all_reduce()->set_tensors(0, "no-such-gradient");
    broken.push_back({"unknown tensor 'no-such-gradient'", p});
  }
  {
    quilt::v1::DistributedProgram p = *ring;
    first(&p, 0, all_reduce)->mutable_all_reduce()->set_group(987);
    broken.push_back({"unknown group 987", p});
  }
  {
    quilt::v1::DistributedProgram p = *ring;
    const int64_t group = first(&p, 0, all_reduce)->all_reduce().group();
    for (auto& g : *p.mutable_groups()) {
      if (g.id() == group) g.mutable_devices()->RemoveLast();
    }
    // Device 1 is no longer a member (each group lists 0, then 1).
    broken.push_back({"not a member", p});
  }
  {
    quilt::v1::DistributedProgram p = *ps;
    quilt::v1::Instruction* pull =
        first(&p, 1, [](const quilt::v1::Instruction& i) { return i.has_ps_pull(); });
    ASSERT_NE(pull, nullptr);
    pull->mutable_ps_pull()->set_server_device("w7/cpu:0");
    broken.push_back({"server device 'w7/cpu:0', which has no program", p});
  }
  {
    quilt::v1::DistributedProgram p = *ps;
    quilt::v1::Instruction* acc =
        first(&p, 0, [](const quilt::v1::Instruction& i) { return i.has_ps_accumulate(); });
    ASSERT_NE(acc, nullptr);
    acc->mutable_ps_accumulate()->set_push_tags(0, 424242);
    broken.push_back({"waits for push 424242, which no device makes", p});
  }
  for (Broken& b : broken) {
    EXPECT_THAT(create(std::move(b.program)),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("instruction "), HasSubstr(b.what))))
        << b.what;
  }
}

// The measured trace has every instruction of every step once, named as
// the program names it, and a device's kernels never overlap (one kernel
// thread).
TEST(Executor, TracesEveryInstructionOfEveryStep) {
  auto s = Prepare({"mlp", "sgd", 24}, Cluster(2, 1));
  TempDir dir;
  absl::StatusOr<quilt::v1::DistributedProgram> p =
      Program(*s,
              DataParallelStrategy(s->graph, s->topo, {1, 1},
                                   quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, "even"),
              24);
  ASSERT_THAT(p.status(), IsOk());
  const JobDir job = WriteJob(dir, "trace", *p);
  const std::string& base = job.base;
  constexpr int kSteps = 3;
  std::vector<Subprocess> procs;
  for (int r = 0; r < 2; ++r) {
    absl::StatusOr<Subprocess> proc =
        Subprocess::Start(job.Argv("w0,w1", r, kSteps, s->data,
                                   {"--trace", absl::StrCat(base, "/trace", r, ".json")}),
                          absl::StrCat(base, "/log", r));
    ASSERT_THAT(proc.status(), IsOk());
    procs.push_back(std::move(*proc));
  }
  for (int r = 0; r < 2; ++r) {
    std::optional<int> st = procs[r].Wait(absl::Seconds(60));
    ASSERT_TRUE(st.has_value() && *st == 0) << "rank " << r;
  }
  for (int r = 0; r < 2; ++r) {
    std::map<std::string, int> expected_compute;  // op → instructions
    int expected_all_reduces = 0;
    for (const auto& d : p->devices()) {
      if (!absl::StartsWith(d.device(), absl::StrCat("w", r, "/"))) continue;
      for (const auto& ins : d.instructions()) {
        if (ins.has_compute()) ++expected_compute[ins.compute().op()];
        if (ins.has_all_reduce()) ++expected_all_reduces;
      }
    }
    ASSERT_FALSE(expected_compute.empty());
    ASSERT_GT(expected_all_reduces, 0);
    std::ifstream in(absl::StrCat(base, "/trace", r, ".json"));
    const nlohmann::json trace = nlohmann::json::parse(in);
    std::map<std::string, int> compute;
    int all_reduces = 0;
    std::vector<std::pair<double, double>> kernels;  // (start, end) µs
    for (const auto& e : trace["traceEvents"]) {
      if (e["ph"] != "X") continue;
      EXPECT_GE(e["ts"].get<double>(), 0);
      EXPECT_GE(e["dur"].get<double>(), 0);
      if (e["cat"] == "compute") {
        ++compute[e["name"].get<std::string>()];
        kernels.push_back({e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
      } else {
        EXPECT_THAT(e["name"].get<std::string>(), HasSubstr("all-reduce"));
        ++all_reduces;
      }
    }
    for (auto& [op, n] : expected_compute) n *= kSteps;
    EXPECT_EQ(compute, expected_compute) << "rank " << r;
    EXPECT_EQ(all_reduces, expected_all_reduces * kSteps) << "rank " << r;
    std::sort(kernels.begin(), kernels.end());
    for (size_t i = 1; i < kernels.size(); ++i) {
      EXPECT_GE(kernels[i].first, kernels[i - 1].second - 0.01) << "rank " << r << " kernel " << i;
    }
  }
}

// The job of one executor on one device (a plain run of the model).
absl::StatusOr<JobDir> OneDeviceJob(const Setup& s, const TempDir& dir, const std::string& tag) {
  ASSIGN_OR_RETURN(
      quilt::v1::DistributedProgram p,
      Program(s,
              DataParallelStrategy(s.graph, s.topo, {1},
                                   quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, "one"),
              24));
  return WriteJob(dir, tag, p);
}

// A run that stops after 4 steps and one that goes on from its checkpoint
// under another plan (sharded parameter servers where the first had a
// ring) end as the uninterrupted run: the parameters and Adam's moments
// are restored, each process taking its share, and the data and Adam's
// step count go on from step 5 (batches of 24 of 64 samples: the data's
// position is not a whole number of passes).
TEST(Executor, ARunGoesOnFromACheckpointUnderAnotherPlanAsIfUninterrupted) {
  auto s = Prepare({"mlp", "adam", 24}, Cluster(3, 1));
  TempDir dir;
  const int n = s->topo.num_devices();
  absl::StatusOr<quilt::v1::DistributedProgram> ring =
      Program(*s,
              DataParallelStrategy(s->graph, s->topo, std::vector<int64_t>(n, 1),
                                   quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, "ring"),
              24);
  ASSERT_THAT(ring.status(), IsOk());
  quilt::v1::Strategy ps = DataParallelStrategy(
      s->graph, s->topo, {3, 2, 1}, quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER, "ps");
  for (auto& a : *ps.mutable_aggregations()) {
    a.clear_servers();
    a.add_servers(s->topo.device(0).id);
    a.add_servers(s->topo.device(n - 1).id);
  }
  absl::StatusOr<quilt::v1::DistributedProgram> sharded = Program(*s, ps, 24);
  ASSERT_THAT(sharded.status(), IsOk());
  constexpr int64_t kFirst = 4;
  const std::string ckpt = dir.File("ckpt");
  absl::StatusOr<RunResult> before = RunExecutors(
      *ring, *s, dir, "before", kFirst, {"--checkpoint-dir", ckpt, "--checkpoint-every", "0"});
  ASSERT_THAT(before.status(), IsOk());
  const std::string step = absl::StrCat(ckpt, "/step-0000000", kFirst);
  absl::StatusOr<RunResult> after = RunExecutors(
      *sharded, *s, dir, "after", kSteps - kFirst,
      {"--restore", step, "--restore-world", "3", "--steps-before", std::to_string(kFirst)});
  ASSERT_THAT(after.status(), IsOk());
  ExpectMatchesReference(*s, *after, kFirst);

  // A checkpoint that lacks a rank, and one of another optimizer, are refused
  // before the first step, naming the problem.
  absl::StatusOr<RunResult> missing =
      RunExecutors(*sharded, *s, dir, "missing", 1, {"--restore", step, "--restore-world", "4"});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(),
              HasSubstr("cannot restore from " + step + ": " + step + "/rank-3/metrics.json"));
  // (SGD with momentum: its state is not Adam's.)
  auto other = Prepare({"mlp", "sgd", 24}, Cluster(1, 1));
  absl::StatusOr<JobDir> sgd = OneDeviceJob(*other, dir, "sgd");
  ASSERT_THAT(sgd.status(), IsOk());
  absl::StatusOr<CommandResult> r =
      RunCommand(sgd->Argv("w0", 0, 1, other->data, {"--restore", step, "--restore-world", "3"}));
  ASSERT_THAT(r.status(), IsOk());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->err, HasSubstr("the state to restore holds no '"));
  EXPECT_THAT(r->err, HasSubstr(".momentum'"));
}

TEST(Executor, ACheckpointDirItCannotWriteInFailsItBeforeTraining) {
  auto s = Prepare({"mlp", "sgd", 24}, Cluster(1, 1));
  TempDir dir;
  absl::StatusOr<JobDir> one = OneDeviceJob(*s, dir, "ckpt");
  ASSERT_THAT(one.status(), IsOk());
  const JobDir& job = *one;
  // A file where the directory would go; the run's first checkpoint is
  // after its last step, far away.
  ASSERT_TRUE(std::ofstream(dir.File("blocked")).good());
  const absl::Time start = absl::Now();
  absl::StatusOr<CommandResult> r =
      RunCommand(job.Argv("w0", 0, 100000, s->data,
                          {"--checkpoint-dir", dir.File("blocked") + "/job", "--checkpoint-every",
                           "0", "--slowdown", "w0/cpu:0=50"}));
  ASSERT_THAT(r.status(), IsOk());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->err, HasSubstr("cannot write checkpoints in " + dir.File("blocked") + "/job"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(60));  // not after 100000 slowed steps
  // A directory it can write in: created, and no probe left in it.
  const std::string ok = dir.File("fine/job");
  absl::StatusOr<Subprocess> proc = Subprocess::Start(
      job.Argv("w0", 0, 2, s->data, {"--checkpoint-dir", ok, "--checkpoint-every", "0"}),
      dir.File("log"));
  ASSERT_THAT(proc.status(), IsOk());
  std::optional<int> st = proc->Wait(absl::Seconds(60));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(*st, 0);
  std::vector<std::string> entries;
  for (const auto& e : std::filesystem::directory_iterator(ok)) {
    entries.push_back(e.path().filename().string());
  }
  EXPECT_THAT(entries, ::testing::ElementsAre("step-00000002"));
  // A checkpoint's index names its tensors only: the steps' losses and
  // times would make each checkpoint larger than the one before.
  std::ifstream index(ok + "/step-00000002/rank-0/metrics.json");
  const nlohmann::json metrics = nlohmann::json::parse(index);
  EXPECT_FALSE(metrics["tensors"].empty());
  EXPECT_TRUE(metrics["loss_parts"].empty());
  EXPECT_TRUE(metrics["step_times_s"].empty());
}

// Every thread of a running executor started with --cpus C may run on C
// only; lists it cannot use are refused with the reason.
TEST(Executor, RunsOnTheCpusItIsGivenAndRefusesOthers) {
  absl::StatusOr<std::vector<int>> allowed = AllowedCpus();
  ASSERT_THAT(allowed.status(), IsOk());
  const int last = allowed->back();
  auto s = Prepare({"mlp", "sgd", 24}, Cluster(1, 1));
  TempDir dir;
  absl::StatusOr<JobDir> one = OneDeviceJob(*s, dir, "pin");
  ASSERT_THAT(one.status(), IsOk());
  const JobDir& job = *one;
  const std::string& base = job.base;
  auto argv = [&](const std::string& cpus) {
    return job.Argv("w0", 0, 100000, s->data, {"--slowdown", "w0/cpu:0=50", "--cpus", cpus});
  };
  for (const auto& [cpus, reason] : std::vector<std::pair<std::string, std::string>>{
           {"x", "bad CPU 'x'"},
           {"3-1", "CPU range '3-1' ends before it starts"},
           {std::to_string(last + 1), absl::StrCat("CPU ", last + 1, " is not available")}}) {
    absl::StatusOr<CommandResult> r = RunCommand(argv(cpus));
    ASSERT_THAT(r.status(), IsOk());
    EXPECT_EQ(r->exit_code, 1) << cpus;
    EXPECT_THAT(r->err, HasSubstr("--cpus: " + reason)) << cpus;
  }
  absl::StatusOr<Subprocess> proc = Subprocess::Start(argv(std::to_string(last)), base + "/log");
  ASSERT_THAT(proc.status(), IsOk());
  // Its threads (compute, transport progress, data prefetch) once started.
  const std::string tasks = absl::StrCat("/proc/", proc->pid(), "/task");
  std::vector<std::string> lists;
  for (absl::Time until = absl::Now() + absl::Seconds(20); absl::Now() < until;) {
    lists.clear();
    std::error_code ec;
    for (const auto& t : std::filesystem::directory_iterator(tasks, ec)) {
      std::ifstream status(t.path() / "status");
      for (std::string line; std::getline(status, line);) {
        if (absl::StartsWith(line, "Cpus_allowed_list:")) {
          lists.push_back(std::string(absl::StripAsciiWhitespace(line.substr(18))));
        }
      }
    }
    if (lists.size() >= 3) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_GE(lists.size(), 3u) << "the executor's threads did not start";
  for (const std::string& l : lists) EXPECT_EQ(l, std::to_string(last));
}

}  // namespace
}  // namespace quilt::testing
