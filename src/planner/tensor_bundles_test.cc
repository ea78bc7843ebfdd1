// Tests of the coarse graph's tensor bundles: what goes in a bundle (and
// what never does), the bytes it carries, the coarse ops that read it, and
// that plans simulate on bundles as they do on the tensors alone.
#include "src/planner/tensor_bundles.h"

#include <algorithm>
#include <set>

#include "gtest/gtest.h"
#include "src/planner/coarse_graph.h"
#include "src/planner/planner_test_util.h"
#include "src/planner/search_space.h"

namespace quilt {
namespace {

struct Coarse {
  std::unique_ptr<testing::World> w;
  Grouping grouping;
  std::unique_ptr<CoarseModel> bundled, alone;
};

Coarse Build(const std::string& model, const quilt::v1::ClusterSpec& spec, int64_t rows) {
  Coarse c;
  c.w = testing::Make(model, spec);
  c.grouping = GroupOps(c.w->graph, *c.w->cost, 12, rows);
  for (bool bundle : {true, false}) {
    absl::StatusOr<std::unique_ptr<CoarseModel>> m =
        CoarseModel::Build(c.w->graph, c.grouping, *c.w->cost, bundle);
    EXPECT_THAT(m.status(), IsOk());
    if (m.ok()) (bundle ? c.bundled : c.alone) = std::move(*m);
  }
  return c;
}

int64_t RowOrWholeBytes(const TensorInfo& t) { return t.shape.NumElements(1) * DTypeSize(t.dtype); }

TEST(TensorBundles, BundleTensorsOfOneProducerAndOneSetOfReaders) {
  for (const std::string model : {"resnet50", "bert_large"}) {
    SCOPED_TRACE(model);
    Coarse c = Build(model, testing::TwoNodes(), 8);
    ASSERT_NE(c.bundled, nullptr);
    const Graph& g = c.w->graph;
    const Graph& cg = c.bundled->graph();
    std::map<std::string, std::vector<std::string>> members;
    for (const auto& [t, b] : c.bundled->bundled()) members[b].push_back(t);
    ASSERT_FALSE(members.empty());
    size_t largest = 0;
    std::set<std::string> trainable;
    for (const ParameterSpec& p : g.parameters) {
      if (!p.frozen) trainable.insert(p.tensor);
    }
    const std::map<std::string, int> producer = g.Producers();
    for (const auto& [bundle, ts] : members) {
      SCOPED_TRACE(bundle);
      largest = std::max(largest, ts.size());
      EXPECT_GE(ts.size(), 2u);
      const TensorInfo* info = cg.FindTensor(bundle);
      ASSERT_NE(info, nullptr);
      int64_t bytes = 0;
      std::set<std::string> producers;
      for (const std::string& t : ts) {
        const TensorInfo& fine = *g.FindTensor(t);
        // Gone from the coarse graph, one of a kind, never the data, the
        // loss or a trained parameter.
        EXPECT_EQ(cg.FindTensor(t), nullptr) << t;
        EXPECT_EQ(fine.shape.HasBatch(), info->shape.HasBatch()) << t;
        EXPECT_NE(fine.role, TensorRole::kInput) << t;
        EXPECT_NE(fine.role, TensorRole::kLabel) << t;
        EXPECT_NE(t, g.loss.output);
        EXPECT_FALSE(trainable.count(t)) << t;
        bytes += (RowOrWholeBytes(fine) + 3) / 4 * 4;
        auto p = producer.find(t);
        producers.insert(p == producer.end() ? "" : g.ops[p->second].name);
      }
      // The bytes of its members (per batch row when they carry the batch).
      EXPECT_EQ(RowOrWholeBytes(*info), bytes);
      // Each member's readers among the forward ops of other groups than
      // the one producing it: their groups' coarse ops read the bundle.
      std::set<std::string> readers;
      for (const Op& op : cg.ops) {
        if (std::count(op.inputs.begin(), op.inputs.end(), bundle)) readers.insert(op.name);
      }
      EXPECT_FALSE(readers.empty());
      int producing_group = -1;
      for (size_t k = 0; k < c.grouping.forward_ops.size(); ++k) {
        for (int i : c.grouping.forward_ops[k]) {
          if (producers.count(g.ops[i].name)) producing_group = static_cast<int>(k);
        }
      }
      for (size_t k = 0; k < c.grouping.forward_ops.size(); ++k) {
        if (static_cast<int>(k) == producing_group) continue;
        for (int i : c.grouping.forward_ops[k]) {
          for (const std::string& in : g.ops[i].inputs) {
            if (!std::count(ts.begin(), ts.end(), in)) continue;
            EXPECT_TRUE(readers.count(c.bundled->ForwardOp(static_cast<int>(k))))
                << g.ops[i].name << " reads " << in;
          }
        }
      }
    }
    // Whole groups' worth of saved activations (and batch-norm statistics)
    // go together.
    EXPECT_GE(largest, 8u);
  }
}

// Lowers and simulates a coarse plan of `m`.
SimResult SimulateCoarse(const CoarseModel& m, const Topology& topo, const v1::Strategy& s,
                         int64_t batch, int* instructions) {
  absl::StatusOr<v1::DistributedProgram> p =
      LowerWithoutGraph(m.index(), s, topo, &m.cost(), batch);
  EXPECT_THAT(p.status(), IsOk());
  if (!p.ok()) return {};
  *instructions = 0;
  for (const auto& d : p->devices()) *instructions += d.instructions_size();
  absl::StatusOr<SimResult> r = Simulate(*p, m.graph(), topo, m.cost());
  EXPECT_THAT(r.status(), IsOk());
  return r.ok() ? *r : SimResult{};
}

TEST(TensorBundles, PlansSimulateOnBundlesAsOnTheTensorsAlone) {
  for (const auto& [model, cluster] :
       std::vector<std::pair<std::string, std::string>>{{"resnet50", "heterog_testbed"},
                                                        {"inception_v3", "nvlink_2x4_v100"},
                                                        {"bert_large", "heterog_testbed"}}) {
    SCOPED_TRACE(model + " on " + cluster);
    absl::StatusOr<v1::ClusterSpec> spec =
        LoadClusterSpec("config/clusters/" + cluster + ".textproto");
    ASSERT_THAT(spec.status(), IsOk());
    Coarse c = Build(model, *spec, 8);
    ASSERT_NE(c.bundled, nullptr);
    ASSERT_NE(c.alone, nullptr);
    const Topology& topo = c.w->topo;
    const int64_t batch = 8 * topo.num_devices();
    SearchSpace bundled(topo, *c.w->cost, *c.bundled, batch, 1.0);
    SearchSpace alone(topo, *c.w->cost, *c.alone, batch, 1.0);
    // Each baseline's split, and every group on one device of its own in
    // turn (activations cross between devices); the same calls make the
    // same states in both spaces.
    const std::vector<NamedStrategy> baselines = Baselines(c.w->graph, topo, *c.w->cost, batch);
    auto states_of = [&](SearchSpace& space) {
      std::vector<PlanState> states;
      for (const NamedStrategy& ns : baselines) {
        if (ns.infeasible_reason.empty() && ns.name != "single-device") {
          states.push_back(space.FromDataParallel(ns.strategy));
        }
      }
      PlanState pipeline = states.front();
      for (size_t k = 0; k < pipeline.place.size(); ++k) {
        pipeline.place[k] = space.SingleOption(static_cast<int>(k % topo.num_devices()));
      }
      states.push_back(pipeline);
      return states;
    };
    const std::vector<PlanState> states = states_of(bundled);
    ASSERT_TRUE(states == states_of(alone));
    for (const PlanState& s : states) {
      int with = 0, without = 0;
      const SimResult a = SimulateCoarse(*c.bundled, topo, bundled.CoarseStrategy(s), batch, &with);
      const SimResult b = SimulateCoarse(*c.alone, topo, alone.CoarseStrategy(s), batch, &without);
      ASSERT_GT(b.step_time_s, 0);
      EXPECT_NEAR(a.step_time_s / b.step_time_s, 1.0, 0.02);
      EXPECT_LE(with, without);
      ASSERT_EQ(a.devices.size(), b.devices.size());
      for (size_t d = 0; d < a.devices.size(); ++d) {
        EXPECT_NEAR(static_cast<double>(a.devices[d].peak_memory_bytes),
                    static_cast<double>(b.devices[d].peak_memory_bytes),
                    1e-3 * static_cast<double>(b.devices[d].peak_memory_bytes));
      }
    }
  }
}

}  // namespace
}  // namespace quilt
