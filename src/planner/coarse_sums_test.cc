// The coarse graph's cut at a group's batch-statistics sums: which ops are
// cut and where, that the parts keep the group's cost and placement, that
// a replicated group sums across its replicas and a group on one device
// does not, and that with the cut the search's prediction of a CNN's
// data-parallel plan is slower and nearer the full simulation's.
#include <cmath>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/planner/coarse_graph.h"
#include "src/planner/placement.h"
#include "src/planner/planner_test_util.h"
#include "src/planner/search_space.h"

namespace quilt {
namespace {

std::unique_ptr<CoarseModel> Coarsen(const testing::World& w, const Grouping& grouping,
                                     int sum_parts) {
  absl::StatusOr<std::unique_ptr<CoarseModel>> m =
      CoarseModel::Build(w.graph, grouping, *w.cost, /*bundle=*/true, sum_parts);
  EXPECT_THAT(m.status(), IsOk());
  return m.ok() ? std::move(*m) : nullptr;
}

TEST(CoarseSums, GroupsThatSumBatchStatisticsAreCutBeforeTheLastSum) {
  for (const std::string model : {"resnet50", "bert_large"}) {
    SCOPED_TRACE(model);
    auto w = testing::Make(model);
    const Grouping grouping = GroupOps(w->graph, *w->cost, 12, 8);
    std::unique_ptr<CoarseModel> cut = Coarsen(*w, grouping, 2);
    std::unique_ptr<CoarseModel> whole = Coarsen(*w, grouping, 1);
    ASSERT_NE(cut, nullptr);
    ASSERT_NE(whole, nullptr);
    const Graph& cg = cut->graph();
    int parts = 0;
    for (size_t i = 0; i < cg.ops.size(); ++i) {
      const Op& op = cg.ops[i];
      if (!absl::StrContains(op.name, "/part")) continue;
      ++parts;
      // A part goes where its group goes, and hands the rest of the op
      // its statistics and nothing else.
      EXPECT_TRUE(absl::StartsWith(op.name, op.forward_op + "/")) << op.name;
      ASSERT_EQ(op.outputs.size(), 1u) << op.name;
      EXPECT_FALSE(cg.FindTensor(op.outputs[0])->shape.HasBatch());
      const std::string rest = op.name.substr(0, op.name.find("/part"));
      const Op* tail = cg.FindOp(rest);
      ASSERT_NE(tail, nullptr) << rest;
      EXPECT_NE(std::find(tail->inputs.begin(), tail->inputs.end(), op.outputs[0]),
                tail->inputs.end());
      EXPECT_EQ(GroupKey(op), GroupKey(*tail));
    }
    // A group whose forward ops hold a batch norm whole (its statistics
    // and the op normalizing with them) sums them in its forward and its
    // backward op, so both are cut; no op of bert_large sums over the
    // batch (a layer norm's statistics are per row).
    int expected = 0;
    const std::map<std::string, int> producer = w->graph.Producers();
    for (int k = 0; k < cut->num_groups(); ++k) {
      std::set<int> members(grouping.forward_ops[k].begin(), grouping.forward_ops[k].end());
      bool whole_norm = false;
      for (int i : members) {
        const Op& op = w->graph.ops[i];
        if (op.type != "BatchNormApply") continue;
        auto stats = producer.find(op.inputs[1]);
        whole_norm |= stats != producer.end() && members.count(stats->second) > 0;
      }
      const std::string name = absl::StrCat("group", k);
      EXPECT_EQ(cg.FindOp(name + "/part0") != nullptr, whole_norm) << name;
      EXPECT_EQ(cg.FindOp(name + "/backward/part0") != nullptr, whole_norm) << name;
      expected += whole_norm ? 2 : 0;
    }
    EXPECT_EQ(parts, expected);
    if (model == "resnet50") EXPECT_GE(parts, cut->num_groups());
    EXPECT_EQ(cg.ops.size(), whole->graph().ops.size() + parts);
    // The parts split the op's members: the costs add up to the uncut
    // graph's on every device, and each part of a cut op costs less than
    // the whole op.
    for (int d = 0; d < w->topo.num_devices(); ++d) {
      double with = 0, without = 0;
      for (size_t i = 0; i < cg.ops.size(); ++i) with += cut->cost().OpTime(i, d, 8);
      for (size_t i = 0; i < whole->graph().ops.size(); ++i)
        without += whole->cost().OpTime(i, d, 8);
      EXPECT_NEAR(with, without, without * 1e-9);
    }
  }
}

// Simulates `s` (coarse when `fine` is null) and counts the collectives
// over the parts' statistics.
double Step(const testing::World& w, const CoarseModel& m, const quilt::v1::Strategy& s,
            int64_t batch, bool fine, int* sums) {
  absl::StatusOr<quilt::v1::DistributedProgram> p =
      fine ? Lower(w.graph, s, w.topo, w.cost.get(), batch)
           : LowerWithoutGraph(m.index(), s, w.topo, &m.cost(), batch);
  EXPECT_THAT(p.status(), IsOk());
  if (!p.ok()) return 0;
  if (sums != nullptr) {
    *sums = 0;
    for (const auto& d : p->devices()) {
      for (const auto& ins : d.instructions()) {
        if (!ins.has_all_reduce()) continue;
        for (const std::string& t : ins.all_reduce().tensors())
          *sums += absl::StrContains(t, "/sums");
      }
    }
  }
  absl::StatusOr<SimResult> r =
      Simulate(*p, fine ? w.graph : m.graph(), w.topo, fine ? *w.cost : m.cost());
  EXPECT_THAT(r.status(), IsOk());
  return r.ok() ? r->step_time_s : 0;
}

TEST(CoarseSums, ReplicatedGroupsSumAndTheCoarsePredictionComesNearTheFullOne) {
  auto w = testing::OnShippedCluster("resnet50", "hap_cluster");
  ASSERT_NE(w, nullptr);
  const int64_t batch = 8 * w->topo.num_devices();
  const Grouping grouping = GroupOps(w->graph, *w->cost, 12, 8);
  std::unique_ptr<CoarseModel> cut = Coarsen(*w, grouping, 2);
  std::unique_ptr<CoarseModel> whole = Coarsen(*w, grouping, 1);
  ASSERT_NE(cut, nullptr);
  ASSERT_NE(whole, nullptr);
  SearchSpace cut_space(w->topo, *w->cost, *cut, batch, 1.0);
  SearchSpace whole_space(w->topo, *w->cost, *whole, batch, 1.0);
  const std::vector<NamedStrategy> baselines = Baselines(w->graph, w->topo, *w->cost, batch);
  const NamedStrategy* ring = nullptr;
  for (const NamedStrategy& ns : baselines) {
    if (ns.name == "dp-proportional-ring") ring = &ns;
  }
  ASSERT_NE(ring, nullptr);
  const PlanState state = cut_space.FromDataParallel(ring->strategy);
  ASSERT_TRUE(state == whole_space.FromDataParallel(ring->strategy));
  int sums = 0;
  const double with = Step(*w, *cut, cut_space.CoarseStrategy(state), batch, false, &sums);
  const double without = Step(*w, *whole, whole_space.CoarseStrategy(state), batch, false, nullptr);
  const double full =
      Step(*w, *cut, cut_space.FineStrategy(w->graph, state, "ring", SearchSpace::kFusePerGroup),
           batch, true, nullptr);
  // One sum per cut op and device.
  int parts = 0;
  for (const Op& op : cut->graph().ops) parts += absl::StrContains(op.name, "/part");
  ASSERT_GT(parts, 0);
  EXPECT_EQ(sums, parts * w->topo.num_devices());
  EXPECT_GT(with, without);
  EXPECT_LT(std::abs(with - full), std::abs(without - full))
      << "coarse " << without << " s, cut " << with << " s, full " << full << " s";

  // Every group on one device: nothing to sum.
  PlanState single = state;
  for (int& p : single.place) p = cut_space.SingleOption(0);
  Step(*w, *cut, cut_space.CoarseStrategy(single), batch, false, &sums);
  EXPECT_EQ(sums, 0);
}

}  // namespace
}  // namespace quilt
