// Weight-gradient ops and their own batch split: which ops are among them
// (the weights' products and the biases' row sums, not the inputs'
// gradients), where Place puts their rows, the strategies it refuses, and
// that moving their rows off slow devices shortens those devices' work in
// simulation.
#include "src/planner/weight_gradients.h"

#include <set>

#include "absl/strings/match.h"
#include "src/graph/op_registry.h"
#include "src/planner/placement.h"
#include "src/planner/planner_test_util.h"
#include "src/planner/weight_gradient_balance.h"

namespace quilt::testing {
namespace {

using ::testing::HasSubstr;

GraphIndex Index(const Graph& g) {
  absl::StatusOr<GraphIndex> ix = GraphIndex::Build(g);
  EXPECT_THAT(ix.status(), IsOk());
  return *std::move(ix);
}

TEST(WeightGradientOps, AreTheWeightsProductsAndRowSumsNotTheInputsGradients) {
  for (const char* model : {"mlp", "transformer", "resnet50"}) {
    SCOPED_TRACE(model);
    auto w = Make(model);
    const GraphIndex ix = Index(w->graph);
    const Graph& g = w->graph;
    const std::vector<bool> wg = WeightGradientOps(ix);
    std::set<int> gradient_producers;
    std::vector<std::vector<int>> consumers(g.tensors().size());
    for (size_t i = 0; i < g.ops.size(); ++i) {
      for (int t : ix.Inputs(static_cast<int>(i))) {
        if (t >= 0) consumers[t].push_back(static_cast<int>(i));
      }
    }
    int row_sums = 0;
    for (size_t i = 0; i < g.ops.size(); ++i) {
      const int op = static_cast<int>(i);
      if (!wg[i]) continue;
      EXPECT_FALSE(g.ops[i].forward_op.empty()) << g.ops[i].name << " is a forward op";
      EXPECT_FALSE(ix.Schema(op).is_update) << g.ops[i].name;
      bool batched_out = false;
      for (int t : ix.Outputs(op)) {
        batched_out |= ix.Batched(t);
        // Whatever it writes reaches no op outside the weight gradients but
        // sums of gradients' parts and updates.
        for (int c : consumers[t]) {
          if (ix.Batched(t)) {
            EXPECT_TRUE(wg[c]) << g.ops[i].name << " → " << g.ops[c].name;
          }
        }
      }
      if (!batched_out) ++row_sums;
    }
    // Every weight's product with its output's gradient is one: the
    // convolutions' filter gradients and the matrices' products that the
    // updates read.
    std::set<int> param_grads;
    for (size_t i = 0; i < g.ops.size(); ++i) {
      if (ix.Schema(static_cast<int>(i)).is_update)
        param_grads.insert(ix.Inputs(static_cast<int>(i))[1]);
    }
    int products = 0;
    for (size_t i = 0; i < g.ops.size(); ++i) {
      const int op = static_cast<int>(i);
      const bool weight_product = g.ops[i].type == "ConvGradWeight" ||
                                  (g.ops[i].type == "MatMul" && !g.ops[i].forward_op.empty() &&
                                   param_grads.count(ix.Outputs(op)[0]));
      if (!weight_product) continue;
      ++products;
      EXPECT_TRUE(wg[i]) << g.ops[i].name;
    }
    EXPECT_GT(products, 0);
    EXPECT_GE(row_sums, products);
    // No op that feeds an input's gradient onwards (a batch tensor read by
    // an op that is not a weight gradient) is one.
    for (size_t i = 0; i < g.ops.size(); ++i) {
      if (g.ops[i].forward_op.empty() || wg[i]) continue;
      for (int t : ix.Inputs(static_cast<int>(i))) {
        if (t < 0 || !ix.Batched(t)) continue;
        for (size_t j = 0; j < g.ops.size(); ++j) {
          for (int o : ix.Outputs(static_cast<int>(j))) {
            if (o == t) {
              EXPECT_FALSE(wg[j]) << g.ops[j].name << " feeds " << g.ops[i].name;
            }
          }
        }
      }
    }
  }
}

TEST(WeightGradientOps, TheMlpsAreItsWeightsProductsBiasesSumsAndTheFirstReluGradient) {
  auto w = Make("mlp");
  const GraphIndex ix = Index(w->graph);
  const std::vector<bool> wg = WeightGradientOps(ix);
  std::vector<std::string> products, sums, feeders;
  for (size_t i = 0; i < wg.size(); ++i) {
    if (!wg[i]) continue;
    bool batched_out = false;
    for (int t : ix.Outputs(static_cast<int>(i))) batched_out |= ix.Batched(t);
    const Op& op = w->graph.ops[i];
    (batched_out ? feeders : op.type == "MatMul" ? products : sums).push_back(op.name);
  }
  EXPECT_EQ(products.size(), 3u);
  EXPECT_EQ(sums.size(), 3u);
  // The first layer's activation gradient feeds nothing but its weight's
  // product and its bias's sum (the input needs no gradient).
  EXPECT_THAT(feeders, ::testing::ElementsAre("grad/Relu_grad"));
}

quilt::v1::Strategy WithWeightGradients(quilt::v1::Strategy s, const std::vector<int>& counts) {
  for (auto& grp : *s.mutable_groups()) {
    for (int k = 0; k < grp.replicas_size(); ++k) {
      auto* r = grp.add_weight_gradient_replicas();
      r->set_device(grp.replicas(k).device());
      r->set_replicas(counts[k]);
    }
  }
  return s;
}

TEST(Placement, WeightGradientOpsTakeTheirOwnSplitAndTheOthersTheGroups) {
  auto w = Make("mlp");
  const GraphIndex ix = Index(w->graph);
  const std::vector<bool> wg = WeightGradientOps(ix);
  const quilt::v1::Strategy s = WithWeightGradients(EvenRing(*w), {3, 3, 1, 1});
  absl::StatusOr<Placement> p = Place(ix, s, w->topo, 16);
  ASSERT_THAT(p.status(), IsOk());
  int moved = 0;
  for (size_t i = 0; i < wg.size(); ++i) {
    bool batched = false;
    for (int t : ix.Inputs(static_cast<int>(i))) batched |= t >= 0 && ix.Batched(t);
    if (!batched) continue;
    const std::vector<Slice>& sl = p->op_slices[i];
    ASSERT_EQ(sl.size(), 4u) << w->graph.ops[i].name;
    if (wg[i]) {
      ++moved;
      EXPECT_EQ(sl[0].end - sl[0].begin, 6) << w->graph.ops[i].name;
      EXPECT_EQ(sl[3].end - sl[3].begin, 2) << w->graph.ops[i].name;
    } else {
      for (const Slice& x : sl) EXPECT_EQ(x.end - x.begin, 4) << w->graph.ops[i].name;
    }
  }
  EXPECT_EQ(moved, 7);
}

TEST(Placement, RefusesWeightGradientSplitsItCannotRun) {
  auto w = Make("mlp");
  const GraphIndex ix = Index(w->graph);
  auto refused = [&](const quilt::v1::Strategy& s, const std::string& why) {
    absl::StatusOr<Placement> p = Place(ix, s, w->topo, 16);
    EXPECT_FALSE(p.ok()) << why;
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(why));
  };
  quilt::v1::Strategy zero = WithWeightGradients(EvenRing(*w), {3, 3, 2, 0});
  refused(zero, "each device of the group keeps at least one");
  quilt::v1::Strategy swapped = WithWeightGradients(EvenRing(*w), {1, 1, 1, 1});
  swapped.mutable_groups(0)->mutable_weight_gradient_replicas(0)->set_device("slow/gpu:0");
  swapped.mutable_groups(0)->mutable_weight_gradient_replicas(2)->set_device("fast/gpu:0");
  refused(swapped, "in the same order");
  quilt::v1::Strategy fewer = WithWeightGradients(EvenRing(*w), {1, 1, 1, 1});
  fewer.mutable_groups(0)->mutable_weight_gradient_replicas()->RemoveLast();
  refused(fewer, "in the same order");
  quilt::v1::Strategy unknown = WithWeightGradients(EvenRing(*w), {1, 1, 1, 1});
  unknown.mutable_groups(0)->mutable_weight_gradient_replicas(1)->set_device("nowhere/gpu:9");
  refused(unknown, "unknown device 'nowhere/gpu:9'");
  // 4 rows over 30 : 1 : 1 : 1 give the last three none.
  refused(WithWeightGradients(EvenRing(*w), {30, 1, 1, 1}), "give a device no rows");
}

TEST(WeightGradientSplit, MovingRowsOffTheSlowDevicesShortensTheirWork) {
  // (Models whose kernels take more than the rows' transfers' latencies.)
  for (const char* model : {"transformer", "resnet50"}) {
    SCOPED_TRACE(model);
    auto w = Make(model);
    const int64_t batch = 32;
    auto busy = [&](const quilt::v1::Strategy& s) {
      const quilt::v1::DistributedProgram p = LowerChecked(*w, s, batch);
      absl::StatusOr<SimResult> r = Simulate(p, w->graph, w->topo, *w->cost);
      EXPECT_THAT(r.status(), IsOk());
      std::map<std::string, double> out;
      if (r.ok()) {
        for (const DeviceUsage& d : r->devices) out[d.device] = d.busy_s;
      }
      return out;
    };
    const std::map<std::string, double> before = busy(EvenRing(*w));
    const std::map<std::string, double> after =
        busy(WithWeightGradients(EvenRing(*w), {5, 5, 3, 3}));
    for (const char* slow : {"slow/gpu:0", "slow/gpu:1"}) {
      EXPECT_LT(after.at(slow), before.at(slow)) << slow;
    }
    for (const char* fast : {"fast/gpu:0", "fast/gpu:1"}) {
      EXPECT_GT(after.at(fast), before.at(fast)) << fast;
    }
  }
}

std::map<std::string, double> Busy(const World& w, const quilt::v1::Strategy& s, int64_t batch) {
  const quilt::v1::DistributedProgram p = LowerChecked(w, s, batch);
  absl::StatusOr<SimResult> r = Simulate(p, w.graph, w.topo, *w.cost);
  EXPECT_THAT(r.status(), IsOk());
  std::map<std::string, double> out;
  if (r.ok()) {
    for (const DeviceUsage& d : r->devices) out[d.device] = d.busy_s;
  }
  return out;
}

// Two fast devices and two slow ones on another node, the transformer
// split evenly: the slow ones have the most work. Over 10 Gbit/s NICs a
// row's activations and output gradients take longer to send than its
// weight gradients to compute, and nothing moves; over 200 Gbit/s every
// candidate moves rows off the slow devices onto the fast ones and no
// other way, keeps each group's rows and devices, lowers and validates.
TEST(BalanceWeightGradients, MovesRowsOffTheBusiestDevicesWhereTheLinksAllowIt) {
  {
    auto slow_links = Make("transformer");
    const GraphIndex ix = Index(slow_links->graph);
    const quilt::v1::Strategy even = EvenRing(*slow_links);
    absl::StatusOr<std::vector<BalancedWeightGradients>> none = BalanceWeightGradients(
        ix, even, slow_links->topo, *slow_links->cost, 32, Busy(*slow_links, even, 32));
    ASSERT_THAT(none.status(), IsOk());
    EXPECT_TRUE(none->empty());
  }
  quilt::v1::ClusterSpec spec = TwoNodes();
  for (auto& node : *spec.mutable_nodes()) {
    node.mutable_nic()->set_bandwidth_bytes_per_s(2.5e10);
    node.mutable_intra_node_link()->set_bandwidth_bytes_per_s(5e10);
  }
  auto w = Make("transformer", spec);
  const GraphIndex ix = Index(w->graph);
  const int64_t batch = 32;
  const quilt::v1::Strategy even = EvenRing(*w);
  const std::map<std::string, double> busy = Busy(*w, even, batch);
  ASSERT_GT(busy.at("slow/gpu:0"), busy.at("fast/gpu:0"));
  absl::StatusOr<std::vector<BalancedWeightGradients>> out =
      BalanceWeightGradients(ix, even, w->topo, *w->cost, batch, busy);
  ASSERT_THAT(out.status(), IsOk());
  ASSERT_FALSE(out->empty());
  for (const BalancedWeightGradients& b : *out) {
    SCOPED_TRACE(b.moves);
    EXPECT_THAT(b.moves, HasSubstr("moved off slow/gpu:"));
    EXPECT_THAT(b.moves, HasSubstr("onto fast/gpu:"));
    int changed = 0;
    for (const auto& grp : b.strategy.groups()) {
      if (grp.weight_gradient_replicas().empty()) continue;
      ++changed;
      ASSERT_EQ(grp.weight_gradient_replicas_size(), grp.replicas_size());
      int64_t rows = 0;
      for (int k = 0; k < grp.replicas_size(); ++k) {
        const auto& r = grp.weight_gradient_replicas(k);
        EXPECT_EQ(r.device(), grp.replicas(k).device());
        rows += r.replicas();
        // Even split: 8 rows each before.
        if (absl::StartsWith(r.device(), "slow")) EXPECT_LE(r.replicas(), 8) << r.device();
        if (absl::StartsWith(r.device(), "fast")) EXPECT_GE(r.replicas(), 8) << r.device();
      }
      EXPECT_EQ(rows, batch);
    }
    EXPECT_GT(changed, 0);
    const std::map<std::string, double> after = Busy(*w, b.strategy, batch);
    EXPECT_LT(after.at("slow/gpu:0") + after.at("slow/gpu:1"),
              busy.at("slow/gpu:0") + busy.at("slow/gpu:1"));
  }
}

TEST(BalanceWeightGradients, NothingToMoveWhereTheDevicesAreEquallyBusyOrAlone) {
  auto w = Make("transformer");
  const GraphIndex ix = Index(w->graph);
  const int64_t batch = 32;
  std::map<std::string, double> equal;
  for (int d = 0; d < w->topo.num_devices(); ++d) equal[w->topo.device(d).id] = 1.0;
  absl::StatusOr<std::vector<BalancedWeightGradients>> out =
      BalanceWeightGradients(ix, EvenRing(*w), w->topo, *w->cost, batch, equal);
  ASSERT_THAT(out.status(), IsOk());
  EXPECT_TRUE(out->empty());
  // One device per group: nowhere to move rows.
  quilt::v1::Strategy alone = EvenRing(*w);
  for (auto& grp : *alone.mutable_groups()) {
    while (grp.replicas_size() > 1) grp.mutable_replicas()->RemoveLast();
  }
  std::map<std::string, double> busy = equal;
  busy["fast/gpu:0"] = 5.0;
  out = BalanceWeightGradients(ix, alone, w->topo, *w->cost, batch, busy);
  ASSERT_THAT(out.status(), IsOk());
  EXPECT_TRUE(out->empty());
}

}  // namespace
}  // namespace quilt::testing
