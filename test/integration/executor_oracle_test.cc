// The correctness oracle (DESIGN §6): runs of 2–4 quilt-executor processes
// over UCX on loopback end a training run with the parameters the
// single-device run ends with, for the fixture MLP, CNN, transformer and
// language model with tied embeddings, and
// for every kind of strategy — data parallel with even and proportional
// splits and each all-reduce (ring, tree, hierarchical), parameter servers
// (sharded), embedding tables' gradients gathered (sparse lookup), the
// planner's hybrid plan, and seeded random strategies, some of them also
// with gradient accumulation over micro-batches — and
// the per-process loss
// parts sum to the single-device losses. (The executor's other behaviour:
// executor_process_test.cc.)
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "src/common/status.h"
#include "src/common/status_matchers.h"
#include "src/graph/autodiff.h"
#include "src/graph/model_loader.h"
#include "src/planner/baselines.h"
#include "src/planner/heterog.h"
#include "src/planner/lookups.h"
#include "src/planner/lower.h"
#include "src/planner/planner_test_util.h"
#include "src/runtime/data/dataset.h"
#include "src/runtime/data/npy.h"
#include "src/runtime/executor.h"
#include "src/runtime/local_trainer.h"
#include "src/runtime/parallel.h"
#include "src/testing/subprocess.h"
#include "src/testing/temp_dir.h"
#include "test/integration/executor_fixture.h"

namespace quilt::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

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
  RingForEveryUpdate(g, &s);
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

// Fixtures whose forward or backward pass reads a sum over the whole
// batch, so that no micro-batch can run without the others: batch-norm
// statistics (cnn, text_cnn), a mean over the labels kept (lm_blocks,
// ignored_labels, mixture_nll) or over class weights (weighted_ce), a
// loss past the batch mean (mixed_losses), a variance over the batch
// (batch_size_losses). Gradient accumulation is refused for them.
const std::set<std::string> kSumsOverTheBatch = {
    "cnn",         "text_cnn",    "lm_blocks",    "ignored_labels",
    "mixture_nll", "weighted_ce", "mixed_losses", "batch_size_losses"};

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
    // Even over every device, run below as micro-batches of one row per
    // device and one row fewer: the table keeps the device that has none.
    strategies.push_back({"sparse-even", sparse(DataParallelStrategy(
                                             s->graph, s->topo, even,
                                             quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, "se"))});
  }
  // The first third of the forward ops on device 0 and the last device
  // (in micro-batches of 2 rows; on device 0 alone in those of 1 row), the
  // rest on the last device (which keeps their weights at two rows and
  // fetches them at one) or on another of its node (which fetches them
  // from the last device at two rows, from device 0 at one), run below as
  // micro-batches of 1 and 2 rows: where the rest reads such a weight or a
  // copy made of it (tied_lm's transposed embedding, recurrent's transposed
  // LSTM weights, integer_ops' table read twice), the micro-batches of 1
  // row read it as the step at 2 rows provides it (received from another
  // device, made or kept there).
  {
    const int last = n - 1;
    std::vector<int> rests = {last};
    for (int d = 1; d < last; ++d) {
      if (s->topo.device(d).node == s->topo.device(last).node) rests.push_back(d);
    }
    for (int rest : rests) {
      strategies.push_back(
          {absl::StrCat("first-ops-move-rest", rest),
           FirstOpsMoveWithRows(s->graph, ForwardOps(s->graph).size() / 3, s->topo.device(0).id,
                                s->topo.device(last).id, s->topo.device(rest).id)});
    }
  }
  // Gradient accumulation: some of the above run as micro-batches, their
  // gradients summed before they are aggregated (4 micro-batches where
  // each device keeps a row of each; 5 and 7, which divide no fixture's
  // batch, of rows that differ by one (also over a random strategy's
  // groups, which run as 4 too: where its sum over the batch reaches a pass
  // from another device, the refusal below once missed it and the
  // executors deadlocked); 7 of 2 or 3 rows leave a device of
  // three out of the smaller ones; two thirds of the batch's rows, of 1 or
  // 2 rows each, move the first ops' devices; the batch over one more than
  // the devices fit, of a row per device and one row fewer, keep a table's
  // devices). Some run pipelined too (Strategy.micro_batches_in_flight).
  std::vector<std::pair<std::string, quilt::v1::Strategy>> accumulated;
  for (const auto& [name, strategy] : strategies) {
    std::vector<int> counts = {2};
    if (name == "even-ring") counts = {4, 7};
    if (name == "split1-one-all") counts = {5};
    if (name == "random12") counts = {4, 5};
    const bool moves = absl::StartsWith(name, "first-ops-move");
    if (moves) counts = {static_cast<int>(c.model.batch * 2 / 3)};                  // 1 or 2 rows
    if (name == "sparse-even") counts = {static_cast<int>(c.model.batch / n + 1)};  // n or n − 1
    if (name != "even-ring" && name != "planner" && name != "sharded-ps" && name != "random11" &&
        name != "split1-one-all" && name != "random12" && name != "sparse-lookups" &&
        name != "sparse-even" && !moves) {
      continue;
    }
    for (int k : counts) {
      quilt::v1::Strategy st = strategy;
      st.set_micro_batches(k);
      accumulated.push_back({absl::StrCat(name, "-micro", k), st});
      // Pipelined: micro-batches overlapping on devices that hold
      // different layers (a random strategy's with all of them in flight).
      const int in_flight = name == "random12" ? k : (name == "split1-one-all" || moves) ? 2 : 0;
      if (in_flight > 1) {
        st.set_micro_batches_in_flight(in_flight);
        accumulated.push_back({absl::StrCat(name, "-micro", k, "-in-flight", in_flight), st});
      }
    }
  }
  strategies.insert(strategies.end(), accumulated.begin(), accumulated.end());
  for (const auto& [name, strategy] : strategies) {
    SCOPED_TRACE(name);
    absl::StatusOr<quilt::v1::DistributedProgram> p = Program(*s, strategy, c.model.batch);
    if (strategy.micro_batches() > 1 && kSumsOverTheBatch.count(c.model.name)) {
      // A pass that reads a sum over the whole batch cannot run a part of
      // it: refused, naming what it reads.
      EXPECT_THAT(p.status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("gradient accumulation: op '")));
      continue;
    }
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

}  // namespace
}  // namespace quilt::testing
