// Staged seeds: the groups cut in order over disjoint runs of devices in
// node order, the fastest k that fits chosen (else the nearest to
// fitting), a run of more devices than rows cut to its fastest, stages
// left without groups dropped, and the search never ends slower than its
// staged seed.
#include "src/planner/seeds.h"

#include <algorithm>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/planner/baselines.h"
#include "src/planner/heterog.h"
#include "src/planner/planner_test_util.h"

namespace quilt {
namespace {

// bert_large on a cluster (its states, about 4 GiB with momentum, fit no
// device of 3 GiB or less whole), coarsened, with the search's space.
struct Fixture {
  std::unique_ptr<testing::World> w;
  std::unique_ptr<CoarseModel> coarse;
  std::unique_ptr<SearchSpace> space;
};

// bert_large on `spec`, coarsened for `batch`, with the search's space.
Fixture MakeOn(const quilt::v1::ClusterSpec& spec, int64_t batch) {
  Fixture f;
  f.w = testing::Make("bert_large", spec);
  absl::StatusOr<std::unique_ptr<CoarseModel>> coarse =
      CoarsenForSearch(f.w->graph, f.w->topo, *f.w->cost, batch, SearchOptions().target_groups);
  EXPECT_THAT(coarse.status(), IsOk());
  if (!coarse.ok()) return f;
  f.coarse = std::move(*coarse);
  f.space = std::make_unique<SearchSpace>(f.w->topo, *f.w->cost, *f.coarse, batch,
                                          SearchOptions().memory_fraction);
  return f;
}

// TwoNodes with `gib` GiB per device, twice over (four nodes, fast, slow,
// fast, slow) when `four`.
Fixture Make(double gib, int64_t batch, bool four = false) {
  quilt::v1::ClusterSpec spec =
      testing::TwoNodesWithMemory({static_cast<int64_t>(gib * (1 << 30))});
  if (four) {
    for (int n = 0; n < 2; ++n) {
      quilt::v1::NodeInfo node = spec.nodes(n);
      node.set_node_id(node.node_id() + "-2");
      for (auto& dev : *node.mutable_devices()) {
        dev.set_id(node.node_id() + "/" + dev.id().substr(dev.id().find('/') + 1));
      }
      *spec.add_nodes() = node;
    }
  }
  return MakeOn(spec, batch);
}

// The best `count` staged seeds of `f` at `batch`.
absl::StatusOr<std::vector<StagedSeed>> Seeds(const Fixture& f, int64_t batch, int count = 1) {
  return FindStagedSeeds(f.w->topo, *f.w->cost, *f.coarse, f.w->graph, batch,
                         SearchOptions().memory_fraction, count, *f.space);
}

TEST(StagedSeeds, CutTheGroupsInOrderOverDisjointRunsOfDevices) {
  const int64_t batch = 8;
  Fixture f = Make(3, batch);
  ASSERT_NE(f.coarse, nullptr);
  absl::StatusOr<std::vector<StagedSeed>> seed = Seeds(f, batch);
  ASSERT_THAT(seed.status(), IsOk());
  ASSERT_EQ(seed->size(), 1u);
  const StagedSeed& s = seed->front();
  ASSERT_GE(s.stages(), 2);
  ASSERT_EQ(static_cast<int>(s.stage_of_group.size()), f.coarse->num_groups());
  // In order, from the first stage.
  EXPECT_EQ(s.stage_of_group.front(), 0);
  EXPECT_TRUE(std::is_sorted(s.stage_of_group.begin(), s.stage_of_group.end()));
  // Disjoint runs of devices in node order, every device in one; replicas
  // in proportion to speed (the fast node's devices get more).
  std::vector<int> owner(f.w->topo.num_devices(), -1);
  for (int j = 0; j < s.stages(); ++j) {
    for (const auto& [d, r] : s.stage_options[j].replicas) {
      EXPECT_EQ(owner[d], -1) << "device " << d << " in two stages";
      owner[d] = j;
      EXPECT_GE(r, 1);
    }
  }
  for (size_t d = 1; d < owner.size(); ++d) {
    EXPECT_GE(owner[d], owner[d - 1]) << "stages are runs in node order";
  }
  EXPECT_NE(owner.front(), -1);
  // Its score is the coarse model's for it in the search's own space.
  PlanState state = s.In(f.space.get());
  absl::StatusOr<Score> score = f.space->Evaluate(state);
  ASSERT_THAT(score.status(), IsOk());
  EXPECT_EQ(score->feasible(), s.score.feasible());
  EXPECT_DOUBLE_EQ(score->time_s, s.score.time_s);
}

// The seed with k stages, scored on the coarse model (nullopt where the
// batch cannot feed its stages).
std::optional<Score> ScoreOfStages(Fixture* f, int64_t batch, int k) {
  std::optional<StagedSeed> cut =
      CutInStages(f->w->topo, *f->coarse, f->w->graph, batch, k, *f->space);
  if (!cut.has_value()) return std::nullopt;
  absl::StatusOr<Score> score = f->space->Evaluate(cut->In(f->space.get()));
  EXPECT_THAT(score.status(), IsOk());
  return score.ok() ? std::optional<Score>(*score) : std::nullopt;
}

TEST(StagedSeeds, TheFastestThatFits) {
  const int64_t batch = 8;
  // bert_large's states alone (parameters, gradients, momentum) take about
  // 4 GiB: on 1.25–3 GiB per device no data-parallel replica fits. The
  // fewest stages that fit take 5, 5, 4, 3 and 2 (of the 8 devices).
  for (double gib : {1.25, 1.5, 2.0, 2.5, 3.0}) {
    SCOPED_TRACE(gib);
    Fixture f = Make(gib, batch, /*four=*/true);
    ASSERT_NE(f.coarse, nullptr);
    for (const NamedStrategy& ns : Baselines(f.w->graph, f.w->topo, *f.w->cost, batch)) {
      if (ns.strategy.groups_size() == 1 && ns.strategy.groups(0).replicas_size() > 1) {
        absl::StatusOr<Score> score = f.space->Evaluate(f.space->FromDataParallel(ns.strategy));
        ASSERT_THAT(score.status(), IsOk());
        EXPECT_FALSE(score->feasible()) << ns.name << " fits: the case tests nothing";
      }
    }
    absl::StatusOr<std::vector<StagedSeed>> seed = Seeds(f, batch);
    ASSERT_THAT(seed.status(), IsOk());
    ASSERT_EQ(seed->size(), 1u);
    EXPECT_TRUE(seed->front().score.feasible());
    // Every k judged on its own: none that fits is faster.
    int fit = 0;
    for (int k = 2; k < f.w->topo.num_devices() && k <= f.coarse->num_groups(); ++k) {
      std::optional<Score> score = ScoreOfStages(&f, batch, k);
      ASSERT_TRUE(score.has_value());
      if (!score->feasible()) continue;
      ++fit;
      EXPECT_LE(seed->front().score.time_s, score->time_s * (1 + 1e-12)) << k << " stages";
      if (k == seed->front().stages()) EXPECT_DOUBLE_EQ(seed->front().score.time_s, score->time_s);
    }
    EXPECT_GE(fit, 2) << "the case tests nothing";
    // Several: best first, no two alike, the first the one above.
    absl::StatusOr<std::vector<StagedSeed>> three = Seeds(f, batch, 3);
    ASSERT_THAT(three.status(), IsOk());
    ASSERT_EQ(three->size(), 3u);
    EXPECT_DOUBLE_EQ(three->front().score.time_s, seed->front().score.time_s);
    std::set<std::string> keys;
    for (size_t i = 0; i < three->size(); ++i) {
      keys.insert(f.space->StateKey((*three)[i].In(f.space.get())));
      if (i > 0) EXPECT_FALSE((*three)[i].score.BetterThan((*three)[i - 1].score));
    }
    EXPECT_EQ(keys.size(), 3u);
  }
}

TEST(StagedSeeds, WhereNoneFitsTheNearestToFitting) {
  const int64_t batch = 8;
  Fixture f = Make(1, batch, /*four=*/true);
  ASSERT_NE(f.coarse, nullptr);
  absl::StatusOr<std::vector<StagedSeed>> seed = Seeds(f, batch);
  ASSERT_THAT(seed.status(), IsOk());
  ASSERT_EQ(seed->size(), 1u);
  EXPECT_FALSE(seed->front().score.feasible());
  // No further over than any k.
  for (int k = 2; k < f.w->topo.num_devices() && k <= f.coarse->num_groups(); ++k) {
    std::optional<Score> score = ScoreOfStages(&f, batch, k);
    ASSERT_TRUE(score.has_value());
    EXPECT_FALSE(score->feasible());
    EXPECT_LE(seed->front().score.overflow_bytes, score->overflow_bytes) << k << " stages";
  }
}

TEST(StagedSeeds, ARunOfMoreDevicesThanRowsKeepsItsFastest) {
  // Batch 3 in two stages of four devices (a fast node and a slow one
  // each): three devices a stage, the two fast ones among them.
  Fixture f = Make(3, 3, /*four=*/true);
  ASSERT_NE(f.coarse, nullptr);
  std::optional<StagedSeed> cut = CutInStages(f.w->topo, *f.coarse, f.w->graph, 3, 2, *f.space);
  ASSERT_TRUE(cut.has_value());
  ASSERT_EQ(cut->stages(), 2);
  for (const PlacementOption& o : cut->stage_options) {
    ASSERT_EQ(o.replicas.size(), 3u);
    int fast = 0;
    for (const auto& [d, r] : o.replicas) {
      fast += f.w->topo.node_id(f.w->topo.device(d).node).rfind("fast", 0) == 0 ? 1 : 0;
    }
    EXPECT_EQ(fast, 2);
  }
  // Batch 1: one device a stage, and a seed still.
  Fixture one = Make(3, 1);
  ASSERT_NE(one.coarse, nullptr);
  absl::StatusOr<std::vector<StagedSeed>> seed = Seeds(one, 1);
  ASSERT_THAT(seed.status(), IsOk());
  ASSERT_EQ(seed->size(), 1u);
  for (const PlacementOption& o : seed->front().stage_options) EXPECT_EQ(o.replicas.size(), 1u);
}

TEST(StagedSeeds, StagesLeftWithoutGroupsAreDropped) {
  // TwoNodes and a third node of one device of 64 MiB, which holds no
  // group: three runs, two stages.
  quilt::v1::ClusterSpec spec = testing::TwoNodesWithMemory({int64_t{3} << 30});
  quilt::v1::NodeInfo tiny = spec.nodes(1);
  tiny.set_node_id("tiny");
  tiny.mutable_devices()->DeleteSubrange(1, 1);
  tiny.mutable_devices(0)->set_id("tiny/gpu:0");
  tiny.mutable_devices(0)->set_memory_bytes(int64_t{64} << 20);
  *spec.add_nodes() = tiny;
  Fixture f = MakeOn(spec, 8);
  ASSERT_NE(f.coarse, nullptr);
  std::optional<StagedSeed> cut = CutInStages(f.w->topo, *f.coarse, f.w->graph, 8, 3, *f.space);
  ASSERT_TRUE(cut.has_value());
  EXPECT_EQ(cut->stages(), 2);
  for (int j = 0; j < cut->stages(); ++j) {
    EXPECT_NE(std::find(cut->stage_of_group.begin(), cut->stage_of_group.end(), j),
              cut->stage_of_group.end())
        << "stage " << j << " holds no group";
    for (const auto& [d, r] : cut->stage_options[j].replicas) {
      EXPECT_NE(f.w->topo.device(d).id, "tiny/gpu:0");
    }
  }
}

TEST(StagedSeeds, TheSearchEndsNoSlowerThanItsStagedSeed) {
  const int64_t batch = 8;
  Fixture f = Make(3, batch);
  ASSERT_NE(f.coarse, nullptr);
  absl::StatusOr<std::vector<StagedSeed>> seed = Seeds(f, batch);
  ASSERT_THAT(seed.status(), IsOk());
  ASSERT_TRUE(seed->size() == 1 && seed->front().score.feasible());
  SearchOptions o;
  o.time_budget_s = 300;  // ended by its plans, not the clock
  absl::StatusOr<SearchResult> r =
      SearchHeteroG(f.w->graph, f.w->topo, *f.w->cost, batch,
                    Baselines(f.w->graph, f.w->topo, *f.w->cost, batch), o);
  ASSERT_THAT(r.status(), IsOk());
  ASSERT_TRUE(r->feasible);
  EXPECT_LE(r->result_s, seed->front().score.time_s * (1 + 1e-12));
}

}  // namespace
}  // namespace quilt
