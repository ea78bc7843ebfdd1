// Lowering of general strategies (data parallel with every aggregation
// method, model parallel, mixed groups, sharded parameter servers, fused
// buckets) into programs the validator accepts and the simulator runs; and
// the validator rejecting corrupted programs with the violation named.
#include "src/planner/lower.h"

#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/graph/autodiff.h"
#include "src/graph/op_registry.h"
#include "src/graph/zoo/zoo.h"
#include "src/planner/baselines.h"
#include "src/planner/partial_sums.h"
#include "src/planner/program_validator.h"
#include "src/sim/simulator.h"

namespace quilt {
namespace {

using quilt::v1::AggregationMethod;
using quilt::v1::DistributedProgram;
using quilt::v1::Instruction;
using quilt::v1::Strategy;
using ::testing::AllOf;
using ::testing::HasSubstr;

// Two nodes: two fast devices, two slow ones.
quilt::v1::ClusterSpec TwoNodes() {
  quilt::v1::ClusterSpec spec;
  spec.set_name("two-nodes");
  for (int n = 0; n < 2; ++n) {
    auto* node = spec.add_nodes();
    node->set_node_id(n == 0 ? "fast" : "slow");
    for (int d = 0; d < 2; ++d) {
      auto* dev = node->add_devices();
      dev->set_id(node->node_id() + "/gpu:" + std::to_string(d));
      dev->set_kind(quilt::v1::DEVICE_KIND_GPU);
      dev->set_index(d);
      dev->set_peak_fp32_flops_per_s(n == 0 ? 1.4e13 : 9e12);
      dev->set_efficiency(0.4);
      dev->set_memory_bandwidth_bytes_per_s(8e11);
      dev->set_memory_bytes(int64_t{16} << 30);
    }
    node->mutable_intra_node_link()->set_bandwidth_bytes_per_s(1.2e10);
    node->mutable_nic()->set_bandwidth_bytes_per_s(1.25e9);
  }
  return spec;
}

struct World {
  Graph graph;
  Topology topo;
  std::unique_ptr<CostModel> cost;
};

std::unique_ptr<World> Make(const std::string& model,
                            const quilt::v1::ClusterSpec& spec = TwoNodes()) {
  auto s = std::make_unique<World>();
  absl::StatusOr<Graph> g = zoo::BuildZooModel(model);
  EXPECT_THAT(g.status(), IsOk());
  s->graph = std::move(*g);
  TrainingOptions to;
  to.loss = LossType::kSoftmaxCrossEntropy;
  to.optimizer.kind = OptimizerSpec::Kind::kSgd;
  to.optimizer.momentum = 0.9;
  EXPECT_THAT(BuildTrainingGraph(&s->graph, to), IsOk());
  absl::StatusOr<Topology> topo = Topology::Build(spec);
  EXPECT_THAT(topo.status(), IsOk());
  s->topo = std::move(*topo);
  absl::StatusOr<CostModel> cost = CostModel::Create(&s->graph, &s->topo);
  EXPECT_THAT(cost.status(), IsOk());
  s->cost = std::make_unique<CostModel>(std::move(*cost));
  return s;
}

// Lowers, validates and simulates; returns the program.
DistributedProgram LowerChecked(const World& s, const Strategy& strategy, int64_t batch) {
  absl::StatusOr<DistributedProgram> p = Lower(s.graph, strategy, s.topo, s.cost.get(), batch);
  EXPECT_THAT(p.status(), IsOk());
  if (!p.ok()) return {};
  EXPECT_THAT(ValidateProgram(*p, s.graph, s.topo), IsOk());
  absl::StatusOr<SimResult> r = Simulate(*p, s.graph, s.topo, *s.cost);
  EXPECT_THAT(r.status(), IsOk());
  if (r.ok()) {
    EXPECT_GT(r->step_time_s, 0);
  }
  return *p;
}

int Count(const DistributedProgram& p, Instruction::KindCase kind) {
  int n = 0;
  for (const auto& dp : p.devices()) {
    for (const auto& ins : dp.instructions()) n += ins.kind_case() == kind;
  }
  return n;
}

std::set<int64_t> Collectives(const DistributedProgram& p) {
  std::set<int64_t> ids;
  for (const auto& dp : p.devices()) {
    for (const auto& ins : dp.instructions()) {
      if (ins.has_all_reduce()) ids.insert(ins.all_reduce().collective_id());
    }
  }
  return ids;
}

int TrainableParameters(const Graph& g) {
  int n = 0;
  for (const ParameterSpec& p : g.parameters) n += !p.frozen;
  return n;
}

class DataParallel : public ::testing::TestWithParam<AggregationMethod> {};

TEST_P(DataParallel, EveryMethodLowersToAValidProgram) {
  for (const std::string model : {"mlp", "cnn"}) {
    auto s = Make(model);
    const Strategy strategy =
        DataParallelStrategy(s->graph, s->topo, {3, 3, 2, 2}, GetParam(), "dp");
    const DistributedProgram p = LowerChecked(*s, strategy, 50);
    EXPECT_EQ(p.devices_size(), 4);
    if (GetParam() == quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER) {
      EXPECT_EQ(Count(p, Instruction::kAllReduce), 0);
      EXPECT_GT(Count(p, Instruction::kPsPush), 0);
      EXPECT_GT(Count(p, Instruction::kPsPull), 0);
    } else {
      // One collective per trainable parameter, on all four devices.
      EXPECT_EQ(static_cast<int>(Collectives(p).size()), TrainableParameters(s->graph)) << model;
      EXPECT_EQ(Count(p, Instruction::kAllReduce), 4 * TrainableParameters(s->graph));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Methods, DataParallel,
                         ::testing::Values(quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE,
                                           quilt::v1::AGGREGATION_METHOD_TREE_ALLREDUCE,
                                           quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE,
                                           quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER));

TEST(Lower, SingleDevice_HasNoCommunication) {
  auto s = Make("mlp");
  const Strategy strategy = DataParallelStrategy(
      s->graph, s->topo, {0, 0, 1, 0}, quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, "one");
  const DistributedProgram p = LowerChecked(*s, strategy, 16);
  ASSERT_EQ(p.devices_size(), 1);
  EXPECT_EQ(p.devices(0).device(), "slow/gpu:0");
  EXPECT_EQ(Count(p, Instruction::kSend) + Count(p, Instruction::kAllReduce) +
                Count(p, Instruction::kPsPush),
            0);
}

TEST(Lower, BucketsFuseGradientsIntoOneCollectivePerBucket) {
  auto s = Make("mlp");
  Strategy strategy = DataParallelStrategy(s->graph, s->topo, {1, 1, 1, 1},
                                           quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, "dp");
  for (int i = 0; i < strategy.aggregations_size(); ++i) {
    strategy.mutable_aggregations(i)->set_bucket(1 + i % 2);
  }
  const DistributedProgram p = LowerChecked(*s, strategy, 32);
  EXPECT_EQ(Collectives(p).size(), 2u);
  int64_t bytes = 0;
  for (const auto& ins : p.devices(0).instructions()) {
    if (ins.has_all_reduce()) bytes += ins.all_reduce().bytes();
  }
  int64_t param_bytes = 0;
  for (const ParameterSpec& ps : s->graph.parameters) {
    const TensorInfo* t = s->graph.FindTensor(ps.tensor);
    param_bytes += t->shape.NumElements(1) * DTypeSize(t->dtype);
  }
  EXPECT_EQ(bytes, param_bytes);
}

// Gradients larger than partition_bytes are summed in slices of whole rows
// that tile dim 0, each its own collective of at most that many bytes (or
// one row); smaller ones stay whole. Every all-reduce method.
TEST(Lower, PartitionedGradientsAreSummedInSlicesThatTileTheirRows) {
  auto s = Make("mlp");
  for (AggregationMethod method :
       {quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, quilt::v1::AGGREGATION_METHOD_TREE_ALLREDUCE,
        quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE}) {
    SCOPED_TRACE(quilt::v1::AggregationMethod_Name(method));
    Strategy strategy = DataParallelStrategy(s->graph, s->topo, {1, 2, 1, 1}, method, "dp");
    const int64_t limit = 3000;
    for (auto& a : *strategy.mutable_aggregations()) a.set_partition_bytes(limit);
    const DistributedProgram p = LowerChecked(*s, strategy, 32);
    // Per gradient, on device 0: its slices' rows and bytes.
    std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> rows;
    std::map<std::string, int64_t> bytes;
    for (const auto& ins : p.devices(0).instructions()) {
      if (!ins.has_all_reduce()) continue;
      const auto& ar = ins.all_reduce();
      ASSERT_EQ(ar.tensors_size(), 1);
      rows[ar.tensors(0)].push_back({ar.begin(), ar.end()});
      bytes[ar.tensors(0)] += ar.bytes();
    }
    int sliced = 0;
    for (const Op& update : s->graph.ops) {
      if (!OpRegistry::Global().Find(update.type)->is_update) continue;
      const TensorInfo* param = s->graph.FindTensor(update.inputs[0]);
      const int64_t whole = param->shape.NumElements(1) * DTypeSize(param->dtype);
      const int64_t dim0 = param->shape.rank() == 0 ? 1 : param->shape.dim(0).value;
      const std::string& grad = update.inputs[1];
      ASSERT_TRUE(rows.count(grad)) << grad;
      EXPECT_EQ(bytes[grad], whole) << grad;
      std::vector<std::pair<int64_t, int64_t>> r = rows[grad];
      std::sort(r.begin(), r.end());
      if (whole <= limit || dim0 == 1) {
        EXPECT_EQ(r, (std::vector<std::pair<int64_t, int64_t>>{{0, 0}})) << grad;
        continue;
      }
      ++sliced;
      EXPECT_EQ(r.front().first, 0) << grad;
      EXPECT_EQ(r.back().second, dim0) << grad;
      for (size_t k = 0; k < r.size(); ++k) {
        EXPECT_LT(r[k].first, r[k].second) << grad;
        if (k > 0) EXPECT_EQ(r[k].first, r[k - 1].second) << grad;
        const int64_t slice_bytes = whole / dim0 * (r[k].second - r[k].first);
        EXPECT_TRUE(slice_bytes <= limit || r[k].second - r[k].first == 1) << grad;
      }
    }
    EXPECT_GT(sliced, 0);
  }
}

// Sums that are not parameter gradients (batch-norm statistics and their
// gradients' sums over the batch) take the faster of
// the ring and the tree: over slow-to-reach members (high latency) the
// tree's fewer steps win; with next to no latency the ring's smaller
// messages do.
TEST(Lower, StatisticsSumsTakeTheFasterOfRingAndTree) {
  for (const double latency : {1e-12, 5e-4}) {
    SCOPED_TRACE(latency);
    quilt::v1::ClusterSpec spec = TwoNodes();
    for (auto& node : *spec.mutable_nodes()) {
      node.mutable_nic()->set_latency_s(latency);
      node.mutable_intra_node_link()->set_latency_s(1e-12);
    }
    auto s = Make("resnet50", spec);  // batch norm: its statistics are summed
    const Strategy strategy = DataParallelStrategy(
        s->graph, s->topo, {1, 1, 1, 1}, quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, "dp");
    const DistributedProgram p = LowerChecked(*s, strategy, 8);
    std::set<std::string> parameter_gradients;
    for (const Op& op : s->graph.ops) {
      if (OpRegistry::Global().Find(op.type)->is_update) parameter_gradients.insert(op.inputs[1]);
    }
    int stats = 0, gradients = 0;
    for (const auto& ins : p.devices(0).instructions()) {
      if (!ins.has_all_reduce()) continue;
      if (parameter_gradients.count(ins.all_reduce().tensors(0))) {
        ++gradients;  // as the strategy says
        EXPECT_EQ(ins.all_reduce().algorithm(), quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE);
        continue;
      }
      ++stats;
      EXPECT_EQ(ins.all_reduce().algorithm(), latency > 1e-6
                                                  ? quilt::v1::AGGREGATION_METHOD_TREE_ALLREDUCE
                                                  : quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE)
          << ins.all_reduce().tensors(0);
    }
    EXPECT_GT(stats, 0);
    EXPECT_GT(gradients, 0);
  }
}

// Reranking a lowered program for the other execution order gives the
// priorities lowering in that order gives, and changes nothing else; a
// program whose dependencies name no instruction is refused.
TEST(Lower, ReprioritizeMatchesLoweringInThatOrder) {
  auto s = Make("mlp");
  Strategy strategy = DataParallelStrategy(s->graph, s->topo, {1, 1, 1, 1},
                                           quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, "dp");
  DistributedProgram critical = LowerChecked(*s, strategy, 32);
  strategy.set_order(quilt::v1::EXECUTION_ORDER_TRANSFERS_FIRST);
  const DistributedProgram lifted = LowerChecked(*s, strategy, 32);
  bool differ = false;
  for (int d = 0; d < critical.devices_size(); ++d) {
    for (int i = 0; i < critical.devices(d).instructions_size(); ++i) {
      differ |= critical.devices(d).instructions(i).priority() !=
                lifted.devices(d).instructions(i).priority();
    }
  }
  EXPECT_TRUE(differ) << "the orders rank the weight gradients differently";
  ASSERT_THAT(Reprioritize(s->graph, s->topo, s->cost.get(),
                           quilt::v1::EXECUTION_ORDER_TRANSFERS_FIRST, &critical),
              IsOk());
  EXPECT_EQ(critical.strategy().order(), quilt::v1::EXECUTION_ORDER_TRANSFERS_FIRST);
  ASSERT_EQ(critical.devices_size(), lifted.devices_size());
  for (int d = 0; d < critical.devices_size(); ++d) {
    ASSERT_EQ(critical.devices(d).instructions_size(), lifted.devices(d).instructions_size());
    for (int i = 0; i < critical.devices(d).instructions_size(); ++i) {
      quilt::v1::Instruction a = critical.devices(d).instructions(i);
      quilt::v1::Instruction b = lifted.devices(d).instructions(i);
      EXPECT_DOUBLE_EQ(a.priority(), b.priority()) << a.ShortDebugString();
      a.clear_priority();
      b.clear_priority();
      EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString());
    }
  }
  critical.mutable_devices(0)->mutable_instructions(0)->add_deps(1 << 30);
  EXPECT_THAT(Reprioritize(s->graph, s->topo, s->cost.get(),
                           quilt::v1::EXECUTION_ORDER_CRITICAL_PATH, &critical),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("depends on")));
}

// Forward ops split in two halves: the first data parallel over the fast
// node, the second on one slow device.
Strategy Pipeline(const Graph& g, const Topology& topo, AggregationMethod method) {
  Strategy s;
  s.set_name("mixed");
  const std::vector<std::string> fwd = ForwardOps(g);
  for (int k = 0; k < 2; ++k) {
    auto* group = s.add_groups();
    group->set_group(k);
    for (size_t i = k == 0 ? 0 : fwd.size() / 2; i < (k == 0 ? fwd.size() / 2 : fwd.size()); ++i) {
      group->add_ops(fwd[i]);
    }
    if (k == 0) {
      for (const char* d : {"fast/gpu:0", "fast/gpu:1"}) {
        auto* r = group->add_replicas();
        r->set_device(d);
        r->set_replicas(1);
      }
    } else {
      auto* r = group->add_replicas();
      r->set_device("slow/gpu:1");
      r->set_replicas(1);
    }
  }
  for (const ParameterSpec& p : g.parameters) {
    auto* a = s.add_aggregations();
    a->set_parameter(p.tensor);
    a->set_method(method);
    if (method == quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER) {
      a->add_servers("slow/gpu:0");  // a device that computes nothing
      a->add_servers("fast/gpu:1");
    }
  }
  (void)topo;
  return s;
}

TEST(Lower, MixedGroups_TransferActivationsAndGradientsBetweenThem) {
  for (AggregationMethod method : {quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE,
                                   quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER}) {
    auto s = Make("cnn");
    const DistributedProgram p = LowerChecked(*s, Pipeline(s->graph, s->topo, method), 24);
    EXPECT_GT(Count(p, Instruction::kSend), 0);
    EXPECT_EQ(Count(p, Instruction::kSend), Count(p, Instruction::kRecv));
    std::set<std::string> computing;
    for (const auto& dp : p.devices()) {
      for (const auto& ins : dp.instructions()) {
        if (ins.has_compute()) computing.insert(dp.device());
      }
    }
    if (method == quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER) {
      // The servers hold the parameter shards and apply the updates.
      EXPECT_TRUE(computing.count("slow/gpu:0"));
      EXPECT_GT(Count(p, Instruction::kPsAccumulate), 0);
    } else {
      EXPECT_FALSE(computing.count("slow/gpu:0"));
    }
  }
}

// The transformer's tied embedding: its lookup alone on fast/gpu:0, every
// other op on all four devices. The embedding's gradient sums the lookup's
// part (whole, on fast/gpu:0) and the output projection's and the second
// lookup's parts (partial sums on all four devices).
Strategy TiedSplit(const Graph& g, const Topology& topo) {
  Strategy s;
  s.set_name("tied-split");
  const std::vector<std::string> fwd = ForwardOps(g);
  auto* one = s.add_groups();
  one->set_group(0);
  one->add_ops(fwd[0]);
  auto* r = one->add_replicas();
  r->set_device("fast/gpu:0");
  r->set_replicas(1);
  auto* all = s.add_groups();
  all->set_group(1);
  for (size_t i = 1; i < fwd.size(); ++i) all->add_ops(fwd[i]);
  for (int d = 0; d < topo.num_devices(); ++d) {
    auto* rr = all->add_replicas();
    rr->set_device(topo.device(d).id);
    rr->set_replicas(1);
  }
  for (const ParameterSpec& p : g.parameters) {
    auto* a = s.add_aggregations();
    a->set_parameter(p.tensor);
    a->set_method(quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE);
  }
  return s;
}

TEST(Lower, PartialSumsHeldOnOtherDevicesAreSummedBeforeUse) {
  auto s = Make("transformer");
  ASSERT_EQ(ForwardOps(s->graph)[0], "Gather");
  const DistributedProgram p = LowerChecked(*s, TiedSplit(s->graph, s->topo), 8);
  // The gradient's sum runs where the embedding lives (fast/gpu:0); each
  // part partial on all four devices is all-reduced over all four first.
  const Op* sum = s->graph.FindOp("grad/embedding.weight_sum");
  ASSERT_NE(sum, nullptr);
  std::map<int64_t, const Instruction*> by_id;
  std::map<std::string, std::set<std::string>> summed_on;  // tensor → devices
  const Instruction* sum_ins = nullptr;
  for (const auto& dp : p.devices()) {
    for (const auto& ins : dp.instructions()) {
      by_id[ins.id()] = &ins;
      if (ins.has_all_reduce()) {
        for (const auto& t : ins.all_reduce().tensors()) summed_on[t].insert(dp.device());
      }
      if (ins.has_compute() && ins.compute().op() == sum->name) {
        EXPECT_EQ(sum_ins, nullptr) << "the sum runs on one device";
        EXPECT_EQ(dp.device(), "fast/gpu:0");
        sum_ins = &ins;
      }
    }
  }
  ASSERT_NE(sum_ins, nullptr);
  int partial_parts = 0;
  for (const std::string& part : sum->inputs) {
    if (part == "grad/Gather_grad") continue;  // the lookup's part: whole, on fast/gpu:0
    ++partial_parts;
    EXPECT_EQ(summed_on[part].size(), 4u) << part << " must be all-reduced over every device";
    bool after = false;
    for (int64_t dep : sum_ins->deps()) {
      after |= by_id[dep]->has_all_reduce() && by_id[dep]->all_reduce().tensors(0) == part;
    }
    EXPECT_TRUE(after) << "the sum must read " << part << " after its all-reduce";
  }
  EXPECT_EQ(partial_parts, 2);
}

TEST(Lower, ParameterServerShards_SplitTheUpdateByRows) {
  auto s = Make("mlp");
  Strategy strategy = DataParallelStrategy(s->graph, s->topo, {1, 1, 1, 1},
                                           quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER, "ps");
  for (auto& a : *strategy.mutable_aggregations()) {
    a.clear_servers();
    for (const char* d : {"fast/gpu:0", "slow/gpu:0", "slow/gpu:1"}) a.add_servers(d);
  }
  const DistributedProgram p = LowerChecked(*s, strategy, 32);
  // Every update runs as shards (row ranges) on the servers.
  std::set<std::string> shard_devices;
  for (const auto& dp : p.devices()) {
    for (const auto& ins : dp.instructions()) {
      if (!ins.has_compute()) continue;
      const Op* op = s->graph.FindOp(ins.compute().op());
      if (!OpRegistry::Global().Find(op->type)->is_update) continue;
      const TensorInfo* param = s->graph.FindTensor(op->inputs[0]);
      if (param->shape.rank() > 0 && param->shape.dim(0).value >= 3) {
        EXPECT_GT(ins.compute().end(), ins.compute().begin()) << op->name;
        EXPECT_LT(ins.compute().end() - ins.compute().begin(), param->shape.dim(0).value)
            << op->name;
      }
      shard_devices.insert(dp.device());
    }
  }
  EXPECT_EQ(shard_devices, (std::set<std::string>{"fast/gpu:0", "slow/gpu:0", "slow/gpu:1"}));
  // Each of the four workers pulls every shard of every parameter.
  EXPECT_GE(Count(p, Instruction::kPsPull), 4 * 3);
}

TEST(Lower, BadStrategies_AreRejectedWithTheirCause) {
  auto s = Make("mlp");
  Strategy strategy = DataParallelStrategy(s->graph, s->topo, {1, 1, 1, 1},
                                           quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, "dp");
  Strategy unknown = strategy;
  unknown.mutable_groups(0)->mutable_replicas(0)->set_device("nowhere/gpu:9");
  EXPECT_THAT(Lower(s->graph, unknown, s->topo, s->cost.get(), 8).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nowhere/gpu:9")));
  Strategy missing = strategy;
  missing.mutable_groups(0)->mutable_ops()->RemoveLast();
  EXPECT_THAT(Lower(s->graph, missing, s->topo, s->cost.get(), 8).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("in no group")));
  EXPECT_THAT(Lower(s->graph, strategy, s->topo, s->cost.get(), 0).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  Strategy no_servers = DataParallelStrategy(s->graph, s->topo, {1, 1, 1, 1},
                                             quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER, "ps");
  no_servers.mutable_aggregations(0)->clear_servers();
  EXPECT_THAT(Lower(s->graph, no_servers, s->topo, s->cost.get(), 8).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("has no servers")));
  Strategy partitioned_ps = no_servers;
  partitioned_ps.mutable_aggregations(0)->add_servers(s->topo.device(1).id);
  partitioned_ps.mutable_aggregations(0)->set_partition_bytes(1024);
  EXPECT_THAT(Lower(s->graph, partitioned_ps, s->topo, s->cost.get(), 8).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("only all-reduce methods")));
  Strategy negative = DataParallelStrategy(s->graph, s->topo, {1, 1, 1, 1},
                                           quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, "dp");
  negative.mutable_aggregations(0)->set_partition_bytes(-5);
  EXPECT_THAT(Lower(s->graph, negative, s->topo, s->cost.get(), 8).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("negative partition_bytes")));
  Strategy twice = no_servers;
  twice.mutable_aggregations(0)->add_servers(s->topo.device(1).id);
  twice.mutable_aggregations(0)->add_servers(s->topo.device(1).id);
  EXPECT_THAT(Lower(s->graph, twice, s->topo, s->cost.get(), 8).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("twice")));
}

// --- The validator on corrupted programs --------------------------------

class Corrupted : public ::testing::Test {
 protected:
  void SetUp() override {
    s_ = Make("mlp");
    ring_ = LowerChecked(*s_,
                         DataParallelStrategy(s_->graph, s_->topo, {1, 1, 1, 1},
                                              quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, "dp"),
                         32);
    ps_ = LowerChecked(*s_,
                       DataParallelStrategy(s_->graph, s_->topo, {1, 1, 1, 1},
                                            quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER, "ps"),
                       32);
  }
  absl::Status Validate(const DistributedProgram& p) {
    return ValidateProgram(p, s_->graph, s_->topo);
  }
  // The first instruction matching `pred`: (device, position).
  template <typename Pred>
  std::pair<int, int> Find(const DistributedProgram& p, Pred pred) {
    for (int d = 0; d < p.devices_size(); ++d) {
      for (int i = 0; i < p.devices(d).instructions_size(); ++i) {
        if (pred(p.devices(d).instructions(i))) return {d, i};
      }
    }
    ADD_FAILURE() << "no matching instruction";
    return {0, 0};
  }
  Instruction* At(DistributedProgram& p, std::pair<int, int> where) {
    return p.mutable_devices(where.first)->mutable_instructions(where.second);
  }
  int64_t MaxId(const DistributedProgram& p) {
    int64_t m = 0;
    for (const auto& dp : p.devices()) {
      for (const auto& ins : dp.instructions()) m = std::max(m, ins.id());
    }
    return m;
  }

  // A second all-reduce of what `first` sums, after it, on every member.
  void SumAgainAfter(const Instruction& first, DistributedProgram* p) {
    int64_t id = MaxId(*p);
    for (auto& dp : *p->mutable_devices()) {
      int64_t member = -1;
      for (const auto& ins : dp.instructions()) {
        if (ins.has_all_reduce() &&
            ins.all_reduce().collective_id() == first.all_reduce().collective_id()) {
          member = ins.id();
        }
      }
      Instruction* again = dp.add_instructions();
      *again->mutable_all_reduce() = first.all_reduce();
      again->mutable_all_reduce()->set_collective_id(777777);
      again->set_id(++id);
      again->add_deps(member);
    }
  }

  std::unique_ptr<World> s_;
  DistributedProgram ring_, ps_;
};

TEST_F(Corrupted, CollectiveMissingAMember) {
  DistributedProgram p = ring_;
  At(p, Find(p, [](const Instruction& i) { return i.has_all_reduce(); }))
      ->mutable_all_reduce()
      ->set_collective_id(999999);
  EXPECT_THAT(Validate(p), StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr("not on each of the 4 devices of group")));
}

TEST_F(Corrupted, GradientAggregatedTwice) {
  DistributedProgram p = ring_;
  const Instruction first =
      *At(p, Find(p, [](const Instruction& i) { return i.has_all_reduce(); }));
  SumAgainAfter(first, &p);
  EXPECT_THAT(Validate(p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("aggregated exactly once")));
}

TEST_F(Corrupted, UpdateReadsAnUnaggregatedGradient) {
  DistributedProgram p = ring_;
  // Point an update at the gradient's producer instead of its all-reduce.
  std::map<int64_t, const Instruction*> by_id;
  for (const auto& dp : p.devices()) {
    for (const auto& ins : dp.instructions()) by_id[ins.id()] = &ins;
  }
  Instruction* update = nullptr;
  int64_t allreduce = -1;
  for (auto& dp : *p.mutable_devices()) {
    for (auto& ins : *dp.mutable_instructions()) {
      if (!ins.has_compute() || update != nullptr) continue;
      for (int64_t dep : ins.deps()) {
        if (by_id[dep]->has_all_reduce()) {
          update = &ins;
          allreduce = dep;
        }
      }
    }
  }
  ASSERT_NE(update, nullptr);
  std::vector<int64_t> deps;
  for (int64_t dep : update->deps()) {
    if (dep != allreduce) deps.push_back(dep);
  }
  for (int64_t dep : by_id[allreduce]->deps()) deps.push_back(dep);
  update->clear_deps();
  std::sort(deps.begin(), deps.end());
  for (int64_t dep : deps) update->add_deps(dep);
  EXPECT_THAT(Validate(p),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("partial sum over part of the batch that was never aggregated")));
}

// A partitioned gradient whose update misses one slice reads rows that
// were never summed; a slice beyond the tensor's rows, or one summed twice,
// is refused too.
TEST_F(Corrupted, PartitionedGradientSlices) {
  Strategy strategy = DataParallelStrategy(s_->graph, s_->topo, {1, 1, 1, 1},
                                           quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, "dp");
  for (auto& a : *strategy.mutable_aggregations()) a.set_partition_bytes(2000);
  const DistributedProgram sliced = LowerChecked(*s_, strategy, 32);
  const auto is_slice = [](const Instruction& i) {
    return i.has_all_reduce() && i.all_reduce().end() != 0;
  };
  {
    // The update that depends on a slice drops that dependency.
    DistributedProgram p = sliced;
    const Instruction slice = *At(p, Find(p, is_slice));
    bool dropped = false;
    for (auto& dp : *p.mutable_devices()) {
      for (auto& ins : *dp.mutable_instructions()) {
        if (!ins.has_compute() || dropped) continue;
        std::vector<int64_t> deps(ins.deps().begin(), ins.deps().end());
        auto it = std::find(deps.begin(), deps.end(), slice.id());
        if (it == deps.end()) continue;
        deps.erase(it);
        ins.clear_deps();
        for (int64_t d : deps) ins.add_deps(d);
        dropped = true;
      }
    }
    ASSERT_TRUE(dropped);
    const absl::Status st = Validate(p);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(st.message(), HasSubstr(slice.all_reduce().tensors(0)));
  }
  {
    DistributedProgram p = sliced;
    const int64_t cid = At(p, Find(p, is_slice))->all_reduce().collective_id();
    for (auto& dp : *p.mutable_devices()) {
      for (auto& ins : *dp.mutable_instructions()) {
        if (ins.has_all_reduce() && ins.all_reduce().collective_id() == cid)
          ins.mutable_all_reduce()->set_end(1 << 20);
      }
    }
    EXPECT_THAT(Validate(p), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("a slice is whole rows of one tensor")));
  }
  {
    DistributedProgram p = sliced;
    const Instruction slice = *At(p, Find(p, is_slice));
    SumAgainAfter(slice, &p);
    EXPECT_THAT(Validate(p),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("aggregated exactly once")));
  }
  {
    // Two slices that overlap and do not depend on each other: each reads
    // a partial sum, and the update sees every row, but the shared rows are
    // summed twice.
    DistributedProgram p = sliced;
    const Instruction slice = *At(p, Find(p, is_slice));
    const int64_t cid = slice.all_reduce().collective_id();
    const std::string tensor = slice.all_reduce().tensors(0);
    std::vector<std::pair<int64_t, int64_t>> ranges;  // of this tensor's slices
    for (const auto& ins : p.devices(0).instructions()) {
      if (ins.has_all_reduce() && ins.all_reduce().tensors(0) == tensor)
        ranges.push_back({ins.all_reduce().begin(), ins.all_reduce().end()});
    }
    ASSERT_GE(ranges.size(), 2u);
    std::sort(ranges.begin(), ranges.end());
    for (auto& dp : *p.mutable_devices()) {
      for (auto& ins : *dp.mutable_instructions()) {
        if (!ins.has_all_reduce() || ins.all_reduce().collective_id() != cid) continue;
        // Widen it over the next slice's first row, bytes to match.
        auto* ar = ins.mutable_all_reduce();
        const int64_t row_bytes = ar->bytes() / (ar->end() - ar->begin());
        if (ar->end() < ranges.back().second) {
          ar->set_end(ar->end() + 1);
        } else {
          ar->set_begin(ar->begin() - 1);
        }
        ar->set_bytes(row_bytes * (ar->end() - ar->begin()));
      }
    }
    const absl::Status st = Validate(p);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(st.message(), HasSubstr("both sum rows"));
    EXPECT_THAT(st.message(), HasSubstr(tensor));
  }
  {
    // A reader that depends on one slice only, and on the gradient's
    // producer: some rows summed, the others still partial.
    DistributedProgram p = sliced;
    const Instruction slice = *At(p, Find(p, is_slice));
    std::map<int64_t, const Instruction*> by_id;
    for (const auto& dp : p.devices()) {
      for (const auto& ins : dp.instructions()) by_id[ins.id()] = &ins;
    }
    bool changed = false;
    for (auto& dp : *p.mutable_devices()) {
      for (auto& ins : *dp.mutable_instructions()) {
        if (!ins.has_compute() || changed) continue;
        std::vector<int64_t> deps(ins.deps().begin(), ins.deps().end());
        if (std::find(deps.begin(), deps.end(), slice.id()) == deps.end()) continue;
        // Drop its other slices of the tensor; depend on their producers.
        std::vector<int64_t> kept;
        for (int64_t d : deps) {
          const Instruction* dep = by_id[d];
          const bool other_slice = d != slice.id() && dep->has_all_reduce() &&
                                   dep->all_reduce().end() != 0 &&
                                   dep->all_reduce().tensors(0) == slice.all_reduce().tensors(0);
          if (!other_slice) {
            kept.push_back(d);
            continue;
          }
          for (int64_t dd : dep->deps()) kept.push_back(dd);
        }
        std::sort(kept.begin(), kept.end());
        kept.erase(std::unique(kept.begin(), kept.end()), kept.end());
        ins.clear_deps();
        for (int64_t d : kept) ins.add_deps(d);
        changed = true;
      }
    }
    ASSERT_TRUE(changed);
    EXPECT_THAT(Validate(p), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("some rows summed and others still partial")));
  }
}

TEST(PartialRule, FollowsWhatEachOpDoesWithItsOperands) {
  auto rule = [](const std::string& type, std::vector<std::string> inputs) {
    Op op;
    op.type = type;
    op.inputs = std::move(inputs);
    const OpSchema* schema = OpRegistry::Global().Find(type);
    EXPECT_NE(schema, nullptr) << type;
    return schema == nullptr ? PartialRule::kNone : PartialRuleOf(op, *schema);
  };
  for (const char* adds : {"Add", "Sub", "Sum", "Concat"}) {
    EXPECT_EQ(rule(adds, {"a", "b"}), PartialRule::kAllOperands) << adds;
  }
  EXPECT_EQ(rule("Div", {"a", "b"}), PartialRule::kFirstOperand);
  EXPECT_EQ(rule("Mul", {"a", "b"}), PartialRule::kOneOperand);
  EXPECT_EQ(rule("MatMul", {"a", "b"}), PartialRule::kOneOperand);
  EXPECT_EQ(rule("Gemm", {"a", "b"}), PartialRule::kOneOperand);
  EXPECT_EQ(rule("Gemm", {"a", "b", "c"}), PartialRule::kNone);  // affine: the bias
  EXPECT_EQ(rule("Gemm", {"a", "b", ""}), PartialRule::kOneOperand);
  EXPECT_EQ(rule("Neg", {"a"}), PartialRule::kOneOperand);
  EXPECT_EQ(rule("Relu", {"a"}), PartialRule::kNone);
  EXPECT_EQ(rule("Pow", {"a", "b"}), PartialRule::kNone);
  EXPECT_EQ(rule("Log", {"a"}), PartialRule::kNone);
}

// The same program with one part's all-reduce removed: the sum on
// fast/gpu:0 would read only its own partial sum and the other devices'
// parts would be lost.
TEST(Validator, PartialSumsReadOnFewerDevicesThanHoldThem) {
  auto s = Make("transformer");
  absl::StatusOr<DistributedProgram> lowered =
      Lower(s->graph, TiedSplit(s->graph, s->topo), s->topo, s->cost.get(), 8);
  ASSERT_THAT(lowered.status(), IsOk());
  DistributedProgram p = *lowered;
  const std::string part = "grad/logits_grad_1";
  std::map<int64_t, int64_t> producer_of_reduce;  // all-reduce id → its dependency
  for (auto& dp : *p.mutable_devices()) {
    auto* list = dp.mutable_instructions();
    for (int k = list->size() - 1; k >= 0; --k) {
      const Instruction& ins = list->Get(k);
      if (ins.has_all_reduce() && ins.all_reduce().tensors(0) == part) {
        ASSERT_EQ(ins.deps_size(), 1);
        producer_of_reduce[ins.id()] = ins.deps(0);
        list->DeleteSubrange(k, 1);
      }
    }
  }
  ASSERT_EQ(producer_of_reduce.size(), 4u);
  // Ids doubled (room for one more instruction after each); the sum then
  // "aggregated" by an all-reduce over fast/gpu:0 alone, as a lowering that
  // took the sum's own partial sum for the whole would do.
  const std::string sum = "grad/embedding.weight_sum";
  auto* alone = p.add_groups();
  alone->set_id(p.groups_size());
  alone->add_devices("fast/gpu:0");
  for (auto& dp : *p.mutable_devices()) {
    auto* list = dp.mutable_instructions();
    for (int k = 0; k < list->size(); ++k) {
      Instruction& ins = *list->Mutable(k);
      ins.set_id(2 * ins.id());
      for (int j = 0; j < ins.deps_size(); ++j) {
        auto it = producer_of_reduce.find(ins.deps(j));
        ins.set_deps(j, 2 * (it != producer_of_reduce.end() ? it->second : ins.deps(j)));
      }
    }
    for (int k = 0; k < list->size(); ++k) {
      if (!list->Get(k).has_compute() || list->Get(k).compute().op() != sum) continue;
      const int64_t sum_id = list->Get(k).id();
      Instruction reduce;
      reduce.set_id(sum_id + 1);
      reduce.add_deps(sum_id);
      reduce.mutable_all_reduce()->set_collective_id(888888);
      reduce.mutable_all_reduce()->set_group(alone->id());
      reduce.mutable_all_reduce()->add_tensors(sum);
      reduce.mutable_all_reduce()->set_bytes(RangeBytes(*s->graph.FindTensor(sum), 0, 0));
      reduce.mutable_all_reduce()->set_algorithm(quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE);
      for (int j = k + 1; j < list->size(); ++j) {
        Instruction& later = *list->Mutable(j);
        for (int d = 0; d < later.deps_size(); ++d) {
          if (later.deps(d) == sum_id) later.set_deps(d, sum_id + 1);
        }
      }
      *list->Add() = reduce;
      for (int j = list->size() - 1; j > k + 1; --j) list->SwapElements(j, j - 1);
      break;
    }
  }
  EXPECT_THAT(ValidateProgram(p, s->graph, s->topo),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("grad/logits_grad_1"), HasSubstr("on {fast/gpu:0}"),
                             HasSubstr("would never be added"))));
}

TEST_F(Corrupted, ReplicasNotCoveringTheBatch) {
  DistributedProgram p = ring_;
  Instruction* c =
      At(p, Find(p, [](const Instruction& i) { return i.has_compute() && i.compute().end() > 0; }));
  c->mutable_compute()->set_end(c->compute().end() - 1);
  EXPECT_THAT(Validate(p), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("the batch")));
}

TEST_F(Corrupted, InputNeitherResidentNorWritten) {
  DistributedProgram p = ring_;
  Instruction* c =
      At(p, Find(p, [](const Instruction& i) { return i.has_compute() && i.deps_size() > 0; }));
  c->clear_deps();
  EXPECT_THAT(Validate(p),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("neither resident there nor written by one of its dependencies")));
}

TEST_F(Corrupted, OpRunsWhereItsGroupDoesNotPlaceIt) {
  DistributedProgram p = ring_;
  // Move device 0's first computation to device 1 (with a fresh id at the end).
  const auto where =
      Find(p, [](const Instruction& i) { return i.has_compute() && i.deps_size() == 0; });
  Instruction moved = *At(p, where);
  p.mutable_devices(where.first)->mutable_instructions()->DeleteSubrange(where.second, 1);
  for (auto& dp : *p.mutable_devices()) {
    for (auto& ins : *dp.mutable_instructions()) {
      auto* deps = ins.mutable_deps();
      deps->erase(std::remove(deps->begin(), deps->end(), moved.id()), deps->end());
    }
  }
  moved.set_id(MaxId(p) + 1);
  *p.mutable_devices((where.first + 1) % p.devices_size())->add_instructions() = moved;
  EXPECT_THAT(Validate(p), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(Corrupted, UnmatchedTransfersAndPushes) {
  {
    DistributedProgram p = ps_;
    Instruction* push = At(p, Find(p, [](const Instruction& i) { return i.has_ps_push(); }));
    push->mutable_ps_push()->set_tag(push->ps_push().tag() + 1000000);
    EXPECT_THAT(Validate(p), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("push tag")));
  }
  {
    DistributedProgram p = ps_;
    Instruction* pull = At(p, Find(p, [](const Instruction& i) { return i.has_ps_pull(); }));
    const std::string server = pull->ps_pull().server_device();
    for (const auto& dp : p.devices()) {
      if (dp.device() != server) {
        pull->mutable_ps_pull()->set_server_device(dp.device());
        break;
      }
    }
    EXPECT_THAT(Validate(p),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("which does not hold it")));
  }
  {
    DistributedProgram p = ring_;
    p.mutable_devices(0)->mutable_instructions(0)->add_deps(MaxId(p) + 5);
    EXPECT_THAT(Validate(p),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("missing instruction")));
  }
}

}  // namespace
}  // namespace quilt
