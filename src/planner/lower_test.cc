// Lowering of general strategies (data parallel with every aggregation
// method, model parallel, mixed groups, sharded parameter servers, fused
// buckets) into programs the validator accepts and the simulator runs.
#include "src/planner/lower.h"

#include <map>
#include <set>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/graph/autodiff.h"
#include "src/graph/op_registry.h"
#include "src/graph/zoo/zoo.h"
#include "src/planner/baselines.h"
#include "src/planner/lookups.h"
#include "src/planner/planner_test_util.h"
#include "src/planner/program_validator.h"
#include "src/sim/simulator.h"

namespace quilt {
namespace {

using quilt::v1::AggregationMethod;
using quilt::v1::DistributedProgram;
using quilt::v1::Instruction;
using quilt::v1::Strategy;
using ::testing::AllOf;
using testing::EvenRing;
using ::testing::HasSubstr;
using testing::LowerChecked;
using testing::Make;
using testing::TiedSplit;
using testing::TopologyAndCost;
using testing::TwoNodes;
using testing::World;

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

// Groups over three nodes whose NICs differ carry each member's node's
// bandwidth (the two-level all-reduce sizes the nodes' parts by them);
// groups over nodes alike carry none. The validator refuses figures the
// cluster does not give.
TEST(Lower, GroupsOverNodesOfUnequalNicsCarryThem) {
  quilt::v1::ClusterSpec spec = TwoNodes();
  *spec.add_nodes() = spec.nodes(1);
  auto* third = spec.mutable_nodes(2);
  third->set_node_id("third");
  for (int d = 0; d < third->devices_size(); ++d) {
    third->mutable_devices(d)->set_id("third/gpu:" + std::to_string(d));
  }
  const auto two_level = quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE;
  for (double fast_nic : {1.25e9, 5e9}) {
    SCOPED_TRACE(fast_nic);
    spec.mutable_nodes(0)->mutable_nic()->set_bandwidth_bytes_per_s(fast_nic);
    auto s = Make("mlp", spec);
    const Strategy strategy =
        DataParallelStrategy(s->graph, s->topo, {1, 1, 1, 1, 1, 1}, two_level, "dp");
    DistributedProgram p = LowerChecked(*s, strategy, 24);
    ASSERT_EQ(p.groups_size(), 1);
    const auto& group = p.groups(0);
    if (fast_nic == 1.25e9) {
      EXPECT_EQ(group.node_bytes_per_s_size(), 0);
      for (int m = 0; m < 6; ++m) p.mutable_groups(0)->add_node_bytes_per_s(1.25e9);
      EXPECT_THAT(ValidateProgram(p, s->graph, s->topo),
                  StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("need none")));
      continue;
    }
    ASSERT_EQ(group.node_bytes_per_s_size(), 6);
    for (int m = 0; m < 6; ++m) {
      const bool on_fast = absl::StartsWith(group.devices(m), "fast/");
      EXPECT_EQ(group.node_bytes_per_s(m), on_fast ? 5e9 : 1.25e9) << group.devices(m);
    }
    p.mutable_groups(0)->set_node_bytes_per_s(5, 9e9);
    EXPECT_THAT(ValidateProgram(p, s->graph, s->topo),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("across nodes")));
    p.mutable_groups(0)->mutable_node_bytes_per_s()->RemoveLast();
    EXPECT_THAT(ValidateProgram(p, s->graph, s->topo),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("5 node bandwidths")));
    // Without them the executor would split evenly what the simulator
    // prices by bandwidth.
    p.mutable_groups(0)->clear_node_bytes_per_s();
    EXPECT_THAT(
        ValidateProgram(p, s->graph, s->topo),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("carries no node bandwidths")));
  }
}

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
        if (k > 0) {
          EXPECT_EQ(r[k].first, r[k - 1].second) << grad;
        }
        const int64_t slice_bytes = whole / dim0 * (r[k].second - r[k].first);
        EXPECT_TRUE(slice_bytes <= limit || r[k].second - r[k].first == 1) << grad;
      }
    }
    EXPECT_GT(sliced, 0);
  }
}

// Sums that are not parameter gradients (batch-norm statistics and their
// gradients' sums over the batch) take the fastest all-reduce the cost
// model knows for their bytes and members: on high-latency links not the
// ring (2(n − 1) latencies), and the direct one (one) for some.
TEST(Lower, StatisticsSumsTakeTheFastestAllReduce) {
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
    const std::vector<int> members{0, 1, 2, 3};
    int stats = 0, gradients = 0, direct = 0;
    for (const auto& ins : p.devices(0).instructions()) {
      if (!ins.has_all_reduce()) continue;
      if (parameter_gradients.count(ins.all_reduce().tensors(0))) {
        ++gradients;  // as the strategy says
        EXPECT_EQ(ins.all_reduce().algorithm(), quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE);
        continue;
      }
      ++stats;
      const double bytes = static_cast<double>(ins.all_reduce().bytes());
      quilt::v1::AggregationMethod fastest = quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE;
      double best = s->cost->AllReduce(fastest, members, bytes).time_s;
      for (auto m : {quilt::v1::AGGREGATION_METHOD_TREE_ALLREDUCE,
                     quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE,
                     quilt::v1::AGGREGATION_METHOD_DIRECT_ALLREDUCE}) {
        const double t = s->cost->AllReduce(m, members, bytes).time_s;
        if (t < best) {
          best = t;
          fastest = m;
        }
      }
      EXPECT_EQ(ins.all_reduce().algorithm(), fastest) << ins.all_reduce().tensors(0);
      if (latency > 1e-6) {
        EXPECT_NE(ins.all_reduce().algorithm(), quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE)
            << ins.all_reduce().tensors(0);
      }
      direct += ins.all_reduce().algorithm() == quilt::v1::AGGREGATION_METHOD_DIRECT_ALLREDUCE;
    }
    // Small sums over four members on slow links: one latency beats two
    // or more.
    if (latency > 1e-6) EXPECT_GT(direct, 0);
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
  const DistributedProgram original = critical;
  const std::vector<double> saved = Priorities(critical);
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
  // Put back, its instructions are those lowered in the first order again.
  SetPriorities(saved, &critical);
  for (int d = 0; d < critical.devices_size(); ++d) {
    EXPECT_EQ(critical.devices(d).SerializeAsString(), original.devices(d).SerializeAsString());
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

// x [B, 6, 8] → a Linear(8, 16) and tanh on every (sample, step) row →
// [B, 96] → Linear(96, 4). `time_major`: the rows are formed sequence
// first ([6, B, 8] → [6·B, 8], as PyTorch's attention does), so their
// samples interleave; else sample first ([B·6, 8]).
// Helpers of the hand-built graphs below.
Attrs Ints(const char* key, std::vector<int64_t> v) {
  Attrs a;
  a.SetInts(key, std::move(v));
  return a;
}

InitializerSpec SmallUniform() {
  InitializerSpec init;
  init.kind = InitializerSpec::Kind::kUniform;
  init.low = -0.3;
  init.high = 0.3;
  return init;
}

// `logits` trained with softmax cross-entropy and SGD, on TwoNodes.
void TrainOnTwoNodes(const std::string& logits, World* w) {
  Graph& g = w->graph;
  g.outputs = {logits};
  g.loss.type = LossType::kSoftmaxCrossEntropy;
  g.loss.prediction = logits;
  TrainingOptions to;
  to.loss = LossType::kSoftmaxCrossEntropy;
  to.optimizer.kind = OptimizerSpec::Kind::kSgd;
  EXPECT_THAT(BuildTrainingGraph(&g, to), IsOk());
  TopologyAndCost(TwoNodes(), g, &w->topo, &w->cost);
}

std::unique_ptr<World> RowsPerStep(bool time_major) {
  auto w = std::make_unique<World>();
  Graph& g = w->graph;
  GraphBuilder b(&g);
  const InitializerSpec init = SmallUniform();
  EXPECT_THAT(
      b.AddInput("x", DType::kF32, Shape({Dim::Batch(), Dim::Fixed(6), Dim::Fixed(8)})).status(),
      IsOk());
  EXPECT_THAT(b.AddParameter("w1", Shape::Fixed({8, 16}), init).status(), IsOk());
  EXPECT_THAT(b.AddParameter("w2", Shape::Fixed({96, 4}), init).status(), IsOk());
  std::string rows = "x";
  if (time_major) rows = *b.Add("Transpose", {rows}, Ints("perm", {1, 0, 2}), "steps_first");
  rows = *b.Add("Reshape", {rows}, Ints("shape", {-1, 8}), "rows");
  std::string h = *b.Add("MatMul", {rows, "w1"}, {}, "h");
  h = *b.Add("Tanh", {h}, {}, "t");
  if (time_major) {
    h = *b.Add("Reshape", {h}, Ints("shape", {6, -1, 16}), "steps");
    h = *b.Add("Transpose", {h}, Ints("perm", {1, 0, 2}), "samples");
  }
  h = *b.Add("Reshape", {h}, Ints("shape", {-1, 96}), "flat");
  const std::string logits = *b.Add("MatMul", {h, "w2"}, {}, "logits");
  TrainOnTwoNodes(logits, w.get());
  return w;
}

TEST(Lower, InterleavedSamples_NotReSplitBetweenDevices) {
  for (bool time_major : {false, true}) {
    auto w = RowsPerStep(time_major);
    // Exactly the [6·B, k] row tensors formed sequence first interleave,
    // forward and backward.
    int rows = 0, gradients = 0;
    for (const TensorInfo& t : w->graph.tensors()) {
      const bool row = t.shape.rank() == 2 && t.shape.dim(0).batch && t.shape.dim(0).value == 6;
      EXPECT_EQ(t.interleaved_batch, time_major && row) << t.name << " " << t.shape.ToString();
      rows += row;
      gradients += row && t.role == TensorRole::kGradient;
    }
    EXPECT_GE(rows, 5);
    EXPECT_GE(gradients, 2);
    // Each device reshaping its own samples: exact either way.
    LowerChecked(*w, EvenRing(*w), 8);
    // The fast node's two halves of the rows gathered on one slow device:
    // a range of samples is a range of rows only sample first.
    absl::StatusOr<DistributedProgram> p =
        Lower(w->graph, Pipeline(w->graph, w->topo, quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE),
              w->topo, w->cost.get(), 8);
    if (time_major) {
      EXPECT_THAT(p.status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("interleaves its samples")));
    } else {
      EXPECT_THAT(p.status(), IsOk());
    }
  }
}

TEST(Lower, BatchSmallerThanTheReplicas_DevicesWithoutRowsDoNothing) {
  for (AggregationMethod method : {quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE,
                                   quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER}) {
    auto s = Make("mlp");
    const Strategy strategy = DataParallelStrategy(s->graph, s->topo, {1, 1, 1, 1}, method, "dp");
    for (int64_t batch : {1, 2, 3}) {
      const DistributedProgram p = LowerChecked(*s, strategy, batch);
      int computing = 0;
      for (const auto& dp : p.devices()) {
        bool batch_op = false;
        for (const auto& ins : dp.instructions()) {
          batch_op |= ins.has_compute() && ins.compute().end() > ins.compute().begin() &&
                      !(ins.compute().begin() == 0 && ins.compute().end() == 0) &&
                      s->graph.FindOp(ins.compute().op())->type != "SgdUpdate";
        }
        computing += batch_op;
      }
      EXPECT_EQ(computing, batch) << AggregationMethod_Name(method) << " at " << batch;
    }
  }
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

// A partial sum read as is by one op (Neg, on the devices that hold it)
// and summed for another (Relu): the all-reduce replaces the partial sum
// on each device, so there it must wait for the op that reads the partial.
TEST(Lower, AllReduceWaitsForTheOpsThatReadThePartialSum) {
  std::unique_ptr<World> w = testing::PartialReadThenSummed();
  const std::string t = "t";
  const DistributedProgram p = LowerChecked(*w, testing::EvenRing(*w), 8);
  int checked = 0;
  for (const auto& dp : p.devices()) {
    int64_t neg = -1;
    for (const auto& ins : dp.instructions()) {
      if (ins.has_compute() && ins.compute().op() == "n") neg = ins.id();
      if (!ins.has_all_reduce() || ins.all_reduce().tensors(0) != t) continue;
      ASSERT_GE(neg, 0) << dp.device() << ": the partial's reader comes first";
      EXPECT_THAT(std::vector<int64_t>(ins.deps().begin(), ins.deps().end()),
                  ::testing::Contains(neg))
          << dp.device();
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4);
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

// The transformer's embedding table (looked up twice, tied to the output
// projection) aggregated by sparse lookup: every device computes both
// lookups' gradients for the whole batch from rows the others send, no
// collective sums the table's whole gradient, and the output projection's
// part is all-reduced alone, before the lookups' parts are added.
TEST(Lower, SparseLookup_GathersTheLookupsRowsAndSumsOnlyTheOtherParts) {
  auto s = Make("transformer");
  absl::StatusOr<GraphIndex> built = GraphIndex::Build(s->graph);
  ASSERT_THAT(built.status(), IsOk());
  const GraphIndex& ix = *built;
  const std::map<std::string, std::vector<int>> tables = LookupTables(ix);
  ASSERT_EQ(tables.size(), 1u);
  const std::string table = tables.begin()->first;
  const std::vector<int>& lookups = tables.begin()->second;
  ASSERT_EQ(lookups.size(), 2u);
  Strategy strategy = EvenRing(*s);
  std::string grad;
  for (auto& a : *strategy.mutable_aggregations()) {
    if (a.parameter() == table) a.set_method(quilt::v1::AGGREGATION_METHOD_SPARSE_LOOKUP);
  }
  for (size_t i = 0; i < s->graph.ops.size(); ++i) {
    if (ix.Schema(static_cast<int>(i)).is_update && s->graph.ops[i].inputs[0] == table) {
      grad = s->graph.ops[i].inputs[1];
    }
  }
  ASSERT_FALSE(grad.empty());
  constexpr int64_t kBatch = 8;
  const DistributedProgram p = LowerChecked(*s, strategy, kBatch);
  ASSERT_EQ(p.devices_size(), 4);
  std::set<std::string> summed;
  for (const auto& dp : p.devices()) {
    std::map<std::string, int> whole;
    int recvs = 0;
    for (const auto& ins : dp.instructions()) {
      if (ins.has_all_reduce()) {
        for (const std::string& t : ins.all_reduce().tensors()) summed.insert(t);
      }
      if (ins.has_compute()) {
        for (int op : lookups) {
          if (ins.compute().op() != s->graph.ops[op].name) continue;
          EXPECT_EQ(ins.compute().begin(), 0);
          EXPECT_EQ(ins.compute().end(), kBatch);
          ++whole[ins.compute().op()];
        }
      }
      recvs += ins.has_recv();
    }
    for (int op : lookups) EXPECT_EQ(whole[s->graph.ops[op].name], 1) << dp.device();
    EXPECT_GT(recvs, 0) << dp.device();
  }
  EXPECT_FALSE(summed.count(grad)) << grad;
  // The table's other gradient part (the projection's) is summed by itself.
  int table_parts = 0;
  for (const std::string& t : summed) table_parts += absl::StartsWith(t, "grad/") && t != grad;
  EXPECT_GT(table_parts, 0);
  // The dense program sums the whole gradient instead.
  const DistributedProgram dense = LowerChecked(*s, EvenRing(*s), kBatch);
  bool dense_sums_grad = false;
  for (const auto& dp : dense.devices()) {
    for (const auto& ins : dp.instructions()) {
      if (!ins.has_all_reduce()) continue;
      for (const std::string& t : ins.all_reduce().tensors()) dense_sums_grad |= t == grad;
    }
  }
  EXPECT_TRUE(dense_sums_grad);
  // The validator takes a whole-batch op on several devices, but not twice
  // on one (a hand-built program, no strategy to compare with).
  DistributedProgram twice = p;
  twice.mutable_strategy()->clear_groups();
  auto* instructions = twice.mutable_devices(0)->mutable_instructions();
  int64_t next_id = 0;
  for (const auto& dp : twice.devices()) {
    for (const auto& ins : dp.instructions()) next_id = std::max(next_id, ins.id() + 1);
  }
  for (int k = 0; k < instructions->size(); ++k) {
    if (!instructions->Get(k).has_compute() ||
        instructions->Get(k).compute().op() != s->graph.ops[lookups[0]].name) {
      continue;
    }
    Instruction copy = instructions->Get(k);
    copy.set_id(next_id);
    copy.clear_deps();
    copy.add_deps(instructions->Get(k).id());
    *instructions->Add() = copy;
    break;
  }
  EXPECT_THAT(ValidateProgram(twice, s->graph, s->topo),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'" + s->graph.ops[lookups[0]].name + "'"),
                             HasSubstr("cover the batch"))));
}

// ids [B, 6] → (time-major: [6, B]) → flat → Gather of table [20, 8] →
// back to [B, 48] → MatMul → logits.
std::unique_ptr<World> FlatLookups(bool time_major) {
  auto w = std::make_unique<World>();
  Graph& g = w->graph;
  GraphBuilder b(&g);
  const InitializerSpec init = SmallUniform();
  EXPECT_THAT(b.AddInput("ids", DType::kI64, Shape({Dim::Batch(), Dim::Fixed(6)})).status(),
              IsOk());
  EXPECT_THAT(b.AddParameter("table", Shape::Fixed({20, 8}), init).status(), IsOk());
  EXPECT_THAT(b.AddParameter("w", Shape::Fixed({48, 4}), init).status(), IsOk());
  std::string ids = "ids";
  if (time_major) ids = *b.Add("Transpose", {ids}, Ints("perm", {1, 0}), "steps_first");
  ids = *b.Add("Reshape", {ids}, Ints("shape", {-1}), "flat_ids");
  std::string h = *b.Add("Gather", {"table", ids}, {}, "rows");
  if (time_major) {
    h = *b.Add("Reshape", {h}, Ints("shape", {6, -1, 8}), "steps");
    h = *b.Add("Transpose", {h}, Ints("perm", {1, 0, 2}), "samples");
  }
  h = *b.Add("Reshape", {h}, Ints("shape", {-1, 48}), "flat");
  const std::string logits = *b.Add("MatMul", {h, "w"}, {}, "logits");
  TrainOnTwoNodes(logits, w.get());
  return w;
}

// Ids flattened sample by sample make a table; flattened step by step
// (each sample's ids spread over the rows) they do not, and a strategy
// that gathers such a table is refused.
TEST(Lower, SparseLookup_OnlyForIdsThatKeepEachSampleTogether) {
  for (bool time_major : {false, true}) {
    SCOPED_TRACE(time_major ? "time-major" : "batch-major");
    auto w = FlatLookups(time_major);
    absl::StatusOr<GraphIndex> ix = GraphIndex::Build(w->graph);
    ASSERT_THAT(ix.status(), IsOk());
    EXPECT_EQ(LookupTables(*ix).count("table"), time_major ? 0u : 1u);
    Strategy strategy = EvenRing(*w);
    for (auto& a : *strategy.mutable_aggregations()) {
      if (a.parameter() == "table") a.set_method(quilt::v1::AGGREGATION_METHOD_SPARSE_LOOKUP);
    }
    if (time_major) {
      EXPECT_THAT(Lower(w->graph, strategy, w->topo, w->cost.get(), 8).status(),
                  StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("only embedding tables")));
    } else {
      const DistributedProgram p = LowerChecked(*w, strategy, 8);
      EXPECT_EQ(p.devices_size(), 4);
    }
  }
}

TEST(Lower, SparseLookup_RefusedForParametersNoLookupReads) {
  auto s = Make("mlp");
  absl::StatusOr<GraphIndex> ix = GraphIndex::Build(s->graph);
  ASSERT_THAT(ix.status(), IsOk());
  EXPECT_TRUE(LookupTables(*ix).empty());
  Strategy strategy = EvenRing(*s);
  strategy.mutable_aggregations(0)->set_method(quilt::v1::AGGREGATION_METHOD_SPARSE_LOOKUP);
  EXPECT_THAT(Lower(s->graph, strategy, s->topo, s->cost.get(), 8).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(strategy.aggregations(0).parameter()),
                             HasSubstr("only embedding tables take"))));
  auto t = Make("transformer");
  absl::StatusOr<GraphIndex> tix = GraphIndex::Build(t->graph);
  ASSERT_THAT(tix.status(), IsOk());
  Strategy sliced = EvenRing(*t);
  for (auto& a : *sliced.mutable_aggregations()) {
    if (LookupTables(*tix).count(a.parameter())) {
      a.set_method(quilt::v1::AGGREGATION_METHOD_SPARSE_LOOKUP);
      a.set_partition_bytes(4096);
    }
  }
  EXPECT_THAT(Lower(t->graph, sliced, t->topo, t->cost.get(), 8).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("partition_bytes")));
}

// --- The validator on corrupted programs --------------------------------

}  // namespace
}  // namespace quilt
