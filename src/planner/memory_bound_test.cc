// The search's memory bound: never above the peak the coarse simulation
// gives a plan on any device (zoo models, random clusters, plans of every
// kind), close to it where every group is on one device; the moves it
// rules out are neither better than the plan they were judged against nor
// within the devices' whole memory; a search from a plan over memory
// that rules them out takes the same path from fewer simulations; and the
// descent on the bound, and the seed it gives, end where no group's move
// lowers it.
#include "src/planner/memory_bound.h"

#include <algorithm>
#include <random>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "src/cluster/random_cluster.h"
#include "src/planner/heterog.h"
#include "src/planner/local_search.h"
#include "src/planner/memory_floor.h"
#include "src/planner/planner_test_util.h"
#include "src/planner/priorities.h"
#include "src/planner/search_space.h"
#include "src/planner/search_test_util.h"
#include "src/planner/seeds.h"

namespace quilt {
namespace {

using testing::AllOn;
using testing::RandomState;

struct Case {
  std::string model;
  uint64_t cluster_seed;  // 0: TwoNodes
  int64_t batch;
};

struct Coarsened {
  std::unique_ptr<testing::World> w;
  std::unique_ptr<CoarseModel> coarse;
};
Coarsened Coarsen(const std::string& model, const quilt::v1::ClusterSpec& spec, int64_t batch) {
  Coarsened out;
  out.w = testing::Make(model, spec);
  const Grouping grouping = GroupOps(out.w->graph, *out.w->cost, 12, batch / 2);
  absl::StatusOr<std::unique_ptr<CoarseModel>> coarse =
      CoarseModel::Build(out.w->graph, grouping, *out.w->cost);
  EXPECT_THAT(coarse.status(), IsOk());
  if (coarse.ok()) out.coarse = std::move(*coarse);
  return out;
}

// TwoNodes with each device holding `share` of the memory floor's bytes at
// `batch` of `model` (the floor: memory_floor.h).
quilt::v1::ClusterSpec TightTwoNodes(const std::string& model, int64_t batch, double share) {
  std::unique_ptr<testing::World> w = testing::Make(model, testing::TwoNodes());
  absl::StatusOr<MemoryFloor> floor = ComputeMemoryFloor(w->graph);
  EXPECT_THAT(floor.status(), IsOk());
  const int64_t bytes = floor.ok() ? static_cast<int64_t>(share * floor->BytesAt(batch)) : 0;
  return testing::TwoNodesWithMemory({bytes});
}

TEST(MemoryBound, NeverAboveTheSimulatedPeakAndCloseOnOneDevice) {
  for (const Case& c : {Case{"cnn", 0, 64}, Case{"cnn", 11, 96}, Case{"transformer", 0, 8},
                        Case{"resnet50", 23, 32}, Case{"gpt2", 5, 8}, Case{"inception_v3", 42, 64},
                        Case{"bert_large", 77, 16}, Case{"vgg19", 3, 32}}) {
    SCOPED_TRACE(c.model + " on cluster " + std::to_string(c.cluster_seed));
    Coarsened cc =
        Coarsen(c.model, c.cluster_seed == 0 ? testing::TwoNodes() : RandomCluster(c.cluster_seed),
                c.batch);
    ASSERT_NE(cc.coarse, nullptr);
    const Topology& topo = cc.w->topo;
    const int groups = cc.coarse->num_groups();
    SearchSpace space(topo, *cc.w->cost, *cc.coarse, c.batch, 0.92);
    MemoryBound bound(*cc.coarse, topo, c.batch);
    // A training graph's forward pass ends before the backward pass reads
    // what it kept: every kept tensor of a device counts.
    EXPECT_TRUE(bound.summed());
    std::mt19937_64 rng(c.cluster_seed + 7);
    std::vector<PlanState> states;
    for (int i = 0; i < 25; ++i) states.push_back(RandomState(space, groups, &rng));
    states.push_back(AllOn(&space, groups, 0));
    states.push_back(AllOn(&space, groups, topo.num_devices() - 1));
    int checked = 0;
    for (size_t i = 0; i < states.size(); ++i) {
      absl::StatusOr<std::vector<double>> peaks = space.CoarsePeaks(states[i]);
      if (!peaks.ok()) continue;  // a state the lowering rejects
      ++checked;
      const std::vector<double> b = bound.Of(states[i], space.options());
      double held = 0;
      for (int d = 0; d < topo.num_devices(); ++d) {
        EXPECT_LE(b[d], (*peaks)[d] * (1 + 1e-12)) << "state " << i << " device " << d;
        held += b[d];
      }
      EXPECT_GT(held, 0) << i;
      // One device: every tensor it keeps and every parameter, nothing
      // received; the rest (gradients, scratch, inputs) is a smaller part.
      if (i >= states.size() - 2) {
        const int d = i + 1 == states.size() ? topo.num_devices() - 1 : 0;
        EXPECT_GT(b[d], 0.5 * (*peaks)[d]) << i;
      }
    }
    EXPECT_GE(checked, 15);
  }
}

TEST(MemoryBound, RulesOutOnlyPlansNoBetterAndOverTheWholeMemory) {
  for (const Case& c : {Case{"transformer", 0, 16}, Case{"cnn", 0, 64}, Case{"gpt2", 0, 8}}) {
    SCOPED_TRACE(c.model);
    Coarsened cc = Coarsen(c.model, TightTwoNodes(c.model, c.batch, 0.4), c.batch);
    ASSERT_NE(cc.coarse, nullptr);
    const int groups = cc.coarse->num_groups();
    SearchSpace space(cc.w->topo, *cc.w->cost, *cc.coarse, c.batch, 0.92);
    // The same space, judging without simulating.
    SearchSpace judge(cc.w->topo, *cc.w->cost, *cc.coarse, c.batch, 0.92);
    std::mt19937_64 rng(c.batch);
    std::vector<PlanState> states;
    for (int i = 0; i < 30; ++i) states.push_back(RandomState(space, groups, &rng));
    for (int d = 0; d < cc.w->topo.num_devices(); ++d) states.push_back(AllOn(&space, groups, d));
    std::vector<Score> scores;
    std::vector<PlanState> scored;
    for (const PlanState& s : states) {
      absl::StatusOr<Score> score = space.Evaluate(s);
      if (!score.ok()) continue;
      scores.push_back(*score);
      scored.push_back(s);
    }
    ASSERT_GE(scored.size(), 20u);
    int ruled_out = 0, infeasible = 0;
    for (size_t j = 0; j < scored.size(); ++j) {
      infeasible += scores[j].feasible() ? 0 : 1;
      for (size_t i = 0; i < scored.size(); ++i) {
        if (!judge.MemoryCannotBeat(scored[i], scores[j])) continue;
        ++ruled_out;
        EXPECT_FALSE(scores[i].BetterThan(scores[j])) << i << " against " << j;
        EXPECT_FALSE(scores[i].fits_whole) << i;
        EXPECT_GT(scores[i].overflow_bytes, 0) << i;
      }
    }
    EXPECT_GT(infeasible, 0) << "no plan over memory: the case tests nothing";
    EXPECT_GT(ruled_out, 0);
    // Each state is counted once, however often it is judged; none is
    // simulated.
    EXPECT_LE(judge.ruled_out(), static_cast<int64_t>(scored.size()));
    EXPECT_GT(judge.ruled_out(), 0);
    EXPECT_EQ(judge.evaluations(), 0);
    // A state simulated already is judged by its score, not the bound.
    for (size_t i = 0; i < scored.size(); ++i) {
      EXPECT_FALSE(space.MemoryCannotBeat(scored[i], scores[0])) << i;
    }
  }
}

TEST(MemoryBound, RulingOutMovesLeavesAMemoryTightSearchsPath) {
  // The same search from a plan over memory, with and without ruling out,
  // each ended by the plans it judges (simulated or ruled out): it takes
  // the same moves, so it ends with the same plan, and the same nearest
  // plan within the whole memory.
  for (const Case& c : {Case{"transformer", 0, 16}, Case{"cnn", 0, 64}, Case{"gpt2", 0, 8}}) {
    SCOPED_TRACE(c.model);
    Coarsened cc = Coarsen(c.model, TightTwoNodes(c.model, c.batch, 0.45), c.batch);
    ASSERT_NE(cc.coarse, nullptr);
    const int groups = cc.coarse->num_groups();
    std::vector<LocalSearchResult> results;
    std::vector<int64_t> evaluations, ruled_out;
    for (bool rule_out : {true, false}) {
      SearchSpace space(cc.w->topo, *cc.w->cost, *cc.coarse, c.batch, 0.92);
      SearchOptions o;
      o.rule_out_by_bound = rule_out;
      o.max_evaluations = 200;
      const PlanState from = AllOn(&space, groups, 0);
      absl::StatusOr<Score> from_score = space.Evaluate(from);
      ASSERT_THAT(from_score.status(), IsOk());
      ASSERT_FALSE(from_score->feasible()) << "the start fits: the case tests nothing";
      absl::StatusOr<LocalSearchResult> r =
          RunLocalSearch(&space, groups, o, absl::InfiniteFuture(), false, "one device",
                         /*evaluation_cap=*/600, from, *from_score);
      ASSERT_THAT(r.status(), IsOk());
      results.push_back(*std::move(r));
      evaluations.push_back(space.evaluations());
      ruled_out.push_back(space.ruled_out());
    }
    EXPECT_TRUE(results[0].best == results[1].best);
    EXPECT_EQ(results[0].score.time_s, results[1].score.time_s);
    EXPECT_EQ(results[0].score.overflow_bytes, results[1].score.overflow_bytes);
    EXPECT_EQ(results[0].near.has_value(), results[1].near.has_value());
    if (results[0].near.has_value() && results[1].near.has_value()) {
      EXPECT_TRUE(results[0].near->first == results[1].near->first);
    }
    EXPECT_GT(ruled_out[0], 0);
    EXPECT_EQ(ruled_out[1], 0);
    EXPECT_LT(evaluations[0], evaluations[1]);
  }
}

// The descent on the memory bound ends where no single group's placement
// or all-reduce method lowers the bound's overflow (nor, at equal overflow,
// the step's bound), no higher than it started, and leaves parameter
// servers as they were.
TEST(MemoryBound, DescentEndsWhereNoGroupsChangeLowersTheOverflow) {
  for (const Case& c : {Case{"transformer", 0, 16}, Case{"gpt2", 0, 8}}) {
    SCOPED_TRACE(c.model);
    Coarsened cc = Coarsen(c.model, TightTwoNodes(c.model, c.batch, 0.4), c.batch);
    ASSERT_NE(cc.coarse, nullptr);
    const int groups = cc.coarse->num_groups();
    SearchSpace space(cc.w->topo, *cc.w->cost, *cc.coarse, c.batch, 0.92);
    std::mt19937_64 rng(c.batch + 1);
    std::vector<PlanState> froms = {AllOn(&space, groups, 0)};
    for (int i = 0; i < 3; ++i) froms.push_back(RandomState(space, groups, &rng));
    for (const PlanState& from : froms) {
      const PlanState to = DescendMemory(&space, groups, from, 50);
      const double over = space.MemoryOverShare(to);
      EXPECT_LE(over, space.MemoryOverShare(from));
      const double bound = space.BoundOf(to);
      for (int k = 0; k < groups; ++k) {
        if (from.method[k] == Method::kParameterServer) {
          EXPECT_EQ(to.place[k], from.place[k]) << k;
          EXPECT_EQ(to.method[k], Method::kParameterServer) << k;
          continue;
        }
        for (int o = 0; o < static_cast<int>(space.options().size()); ++o) {
          for (Method m : space.MethodsFor(o)) {
            if (m == Method::kParameterServer) continue;
            PlanState next = to;
            next.place[k] = o;
            next.method[k] = m;
            const double next_over = space.MemoryOverShare(next);
            EXPECT_GE(next_over, over * (1 - 1e-9)) << k << " " << o;
            if (next_over <= over) EXPECT_GE(space.BoundOf(next), bound * (1 - 1e-9)) << k;
          }
        }
      }
    }
    // From all on one device (over memory), the descent spreads the plan.
    EXPECT_LT(space.MemoryOverShare(DescendMemory(&space, groups, froms[0], 50)),
              space.MemoryOverShare(froms[0]));
  }
}

// The balanced seed: options over runs of consecutive nodes join the space
// on clusters of three or more nodes, and the seed is the descent's plan,
// simulated; none where the descent changes nothing.
TEST(MemoryBound, BalancedSeedAddsRunsOfNodesAndIsTheDescentsPlan) {
  quilt::v1::ClusterSpec spec;
  for (uint64_t seed = 1; seed < 100; ++seed) {
    spec = RandomCluster(seed);
    if (spec.nodes_size() >= 4) break;
  }
  ASSERT_GE(spec.nodes_size(), 4);
  Coarsened cc = Coarsen("transformer", spec, 16);
  ASSERT_NE(cc.coarse, nullptr);
  const int groups = cc.coarse->num_groups();
  SearchSpace space(cc.w->topo, *cc.w->cost, *cc.coarse, 16, 0.92);
  const size_t before = space.options().size();
  const PlanState from = AllOn(&space, groups, 0);
  std::optional<std::pair<PlanState, Score>> seed =
      MemoryBalancedSeed(cc.w->topo, groups, from, &space);
  // Runs of 2 (and more, to half the nodes, at most 4) consecutive nodes.
  const int nodes = spec.nodes_size();
  int runs = 0;
  for (int length = 2; length <= std::min(4, nodes / 2); ++length) runs += nodes - length + 1;
  ASSERT_GE(space.options().size(), before);
  int found = 0;
  for (size_t o = before; o < space.options().size(); ++o) {
    found += absl::StartsWith(space.options()[o].label, "nodes ") ? 1 : 0;
  }
  // (A run equal to an option the space had is found, not added.)
  EXPECT_LE(found, runs);
  EXPECT_GT(found, 0);
  // (All on one device is no local optimum of the step's bound.)
  ASSERT_TRUE(seed.has_value());
  EXPECT_TRUE(seed->first == DescendMemory(&space, groups, from, 20));
  absl::StatusOr<Score> score = space.Evaluate(seed->first);
  ASSERT_THAT(score.status(), IsOk());
  EXPECT_EQ(score->time_s, seed->second.time_s);
  EXPECT_EQ(score->overflow_bytes, seed->second.overflow_bytes);
  // From its own plan the descent changes nothing: no seed.
  EXPECT_FALSE(MemoryBalancedSeed(cc.w->topo, groups, seed->first, &space).has_value());
  // Two nodes: no runs.
  Coarsened two = Coarsen("transformer", testing::TwoNodes(), 16);
  ASSERT_NE(two.coarse, nullptr);
  SearchSpace two_space(two.w->topo, *two.w->cost, *two.coarse, 16, 0.92);
  const size_t two_before = two_space.options().size();
  MemoryBalancedSeed(two.w->topo, two.coarse->num_groups(),
                     AllOn(&two_space, two.coarse->num_groups(), 0), &two_space);
  EXPECT_EQ(two_space.options().size(), two_before);
}

}  // namespace
}  // namespace quilt
