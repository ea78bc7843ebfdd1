// The search's bound: never above the step the coarse simulation gives a
// plan (on zoo models and random clusters, plans of every kind), close to
// it where a plan has no communication, and passing over the
// moves it rules out leaves a search that runs to convergence with the
// same plan, from fewer simulations.
#include "src/planner/time_bound.h"

#include <algorithm>
#include <random>

#include "gtest/gtest.h"
#include "src/cluster/random_cluster.h"
#include "src/planner/heterog.h"
#include "src/planner/local_search.h"
#include "src/planner/planner_test_util.h"
#include "src/planner/priorities.h"
#include "src/planner/search_space.h"
#include "src/planner/search_test_util.h"

namespace quilt {
namespace {

using testing::RandomState;

struct Case {
  std::string model;
  uint64_t cluster_seed;  // 0: TwoNodes
  int64_t batch;
};

// A case's model on its cluster, coarsened into about 12 groups, and its
// search space (null when the model does not coarsen).
struct Coarsened {
  std::unique_ptr<testing::World> w;
  std::unique_ptr<CoarseModel> coarse;
  std::unique_ptr<SearchSpace> space;
};
Coarsened Coarsen(const Case& c) {
  Coarsened out;
  out.w = testing::Make(c.model,
                        c.cluster_seed == 0 ? testing::TwoNodes() : RandomCluster(c.cluster_seed));
  const Grouping grouping = GroupOps(out.w->graph, *out.w->cost, 12, c.batch / 2);
  absl::StatusOr<std::unique_ptr<CoarseModel>> coarse =
      CoarseModel::Build(out.w->graph, grouping, *out.w->cost);
  EXPECT_THAT(coarse.status(), IsOk());
  if (!coarse.ok()) return out;
  out.coarse = std::move(*coarse);
  out.space = std::make_unique<SearchSpace>(out.w->topo, *out.w->cost, *out.coarse, c.batch, 0.92);
  return out;
}

TEST(TimeBound, NeverAboveTheSimulatedStepAndCloseWithoutCommunication) {
  for (const Case& c : {Case{"cnn", 0, 64}, Case{"cnn", 11, 96}, Case{"transformer", 0, 8},
                        Case{"resnet50", 23, 32}, Case{"gpt2", 5, 8}, Case{"inception_v3", 42, 64},
                        Case{"bert_large", 77, 16}}) {
    SCOPED_TRACE(c.model + " on cluster " + std::to_string(c.cluster_seed));
    Coarsened cc = Coarsen(c);
    ASSERT_NE(cc.space, nullptr);
    const auto& w = cc.w;
    const CoarseModel& coarse = *cc.coarse;
    const int groups = coarse.num_groups();
    SearchSpace& space = *cc.space;
    // The same space, judging the states without simulating them.
    SearchSpace judge(w->topo, *w->cost, coarse, c.batch, 0.92);
    TimeBound bound(coarse, w->topo, c.batch);
    std::mt19937_64 rng(c.cluster_seed + 3);
    std::vector<PlanState> states;
    for (int i = 0; i < 30; ++i) states.push_back(RandomState(space, groups, &rng));
    // Every group on one device: no communication at all.
    for (int d : {0, w->topo.num_devices() - 1}) {
      PlanState one;
      one.place.assign(groups, space.SingleOption(d));
      ASSERT_EQ(judge.SingleOption(d), one.place[0]);
      one.method.assign(groups, space.MethodsFor(one.place[0]).front());
      states.push_back(one);
    }
    int checked = 0, servers_counted = 0;
    for (size_t i = 0; i < states.size(); ++i) {
      absl::StatusOr<Score> score = space.Evaluate(states[i]);
      if (!score.ok()) continue;  // a state the lowering rejects
      ++checked;
      const double b = bound.Of(states[i], space.options());
      EXPECT_GT(b, 0) << i;
      EXPECT_LE(b, score->time_s * (1 + 1e-12)) << i;
      // The space's bound counts parameter servers' traffic too.
      const double with_servers = judge.BoundOf(states[i]);
      EXPECT_GE(with_servers, b) << i;
      EXPECT_LE(with_servers, score->time_s * (1 + 1e-12)) << i;
      for (Method m : states[i].method) {
        if (m == Method::kParameterServer) {
          servers_counted += with_servers > b * (1 + 1e-9) ? 1 : 0;
          break;
        }
      }
      EXPECT_EQ(judge.CannotBeat(states[i], score->time_s * (1 + 1e-9)), false) << i;
      EXPECT_EQ(judge.CannotBeat(states[i], b), true) << i;
      // Simulated already: judged by its score, and not counted.
      EXPECT_EQ(space.CannotBeat(states[i], score->time_s), score->feasible()) << i;
      EXPECT_EQ(space.CannotBeat(states[i], score->time_s * (1 + 1e-9)), false) << i;
      // Only the updates and the host's overhead are left out.
      if (i >= states.size() - 2) EXPECT_GT(b, 0.8 * score->time_s) << i;
    }
    EXPECT_GE(checked, 20);
    EXPECT_GT(servers_counted, 0) << "no parameter server's traffic raised a bound";
    // Each state ruled out is counted once, however often it is judged.
    EXPECT_EQ(judge.ruled_out(), checked);
    EXPECT_EQ(judge.evaluations(), 0);
    EXPECT_EQ(space.ruled_out(), 0);
  }
}

TEST(TimeBound, RulingOutMovesLeavesAConvergedSearchsPlan) {
  for (const Case& c : {Case{"cnn", 0, 64}, Case{"transformer", 7, 16}}) {
    SCOPED_TRACE(c.model + " on cluster " + std::to_string(c.cluster_seed));
    auto w = testing::Make(
        c.model, c.cluster_seed == 0 ? testing::TwoNodes() : RandomCluster(c.cluster_seed));
    const std::vector<NamedStrategy> baselines = Baselines(w->graph, w->topo, *w->cost, c.batch);
    SearchOptions o;
    o.time_budget_s = 600;
    o.max_evaluations = 0;  // to convergence
    o.target_groups = 8;
    absl::StatusOr<SearchResult> with =
        SearchHeteroG(w->graph, w->topo, *w->cost, c.batch, baselines, o);
    o.rule_out_by_bound = false;
    absl::StatusOr<SearchResult> without =
        SearchHeteroG(w->graph, w->topo, *w->cost, c.batch, baselines, o);
    ASSERT_THAT(with.status(), IsOk());
    ASSERT_THAT(without.status(), IsOk());
    ASSERT_EQ(with->stopped_by, "converged");
    ASSERT_EQ(without->stopped_by, "converged");
    EXPECT_EQ(with->result_s, without->result_s);
    ASSERT_EQ(with->variants.size(), without->variants.size());
    EXPECT_EQ(with->variants[0].SerializeAsString(), without->variants[0].SerializeAsString());
    EXPECT_GT(with->ruled_out, 0);
    EXPECT_EQ(without->ruled_out, 0);
    EXPECT_LT(with->evaluated, without->evaluated);
  }
}

// The descent on the bound ends where no single group's placement or
// all-reduce method lowers the bound further, no higher than it started,
// and leaves parameter servers as they were.
TEST(TimeBound, DescentEndsWhereNoGroupsChangeLowersTheBound) {
  for (const Case& c : {Case{"cnn", 11, 96}, Case{"vgg19", 0, 32}, Case{"transformer", 23, 16}}) {
    SCOPED_TRACE(c.model + " on cluster " + std::to_string(c.cluster_seed));
    Coarsened cc = Coarsen(c);
    ASSERT_NE(cc.space, nullptr);
    SearchSpace& space = *cc.space;
    const int groups = cc.coarse->num_groups();
    std::mt19937_64 rng(c.cluster_seed + 5);
    for (int trial = 0; trial < 3; ++trial) {
      const PlanState from = RandomState(space, groups, &rng);
      const PlanState to = DescendBound(&space, groups, from, 50);
      const double bound = space.BoundOf(to);
      EXPECT_LE(bound, space.BoundOf(from));
      for (int k = 0; k < groups; ++k) {
        if (from.method[k] == Method::kParameterServer) {
          EXPECT_EQ(to.place[k], from.place[k]) << k;
          EXPECT_EQ(to.method[k], Method::kParameterServer) << k;
          continue;
        }
        EXPECT_NE(to.method[k], Method::kParameterServer) << k;
        for (int o = 0; o < static_cast<int>(space.options().size()); ++o) {
          for (Method m : space.MethodsFor(o)) {
            if (m == Method::kParameterServer) continue;
            PlanState next = to;
            next.place[k] = o;
            next.method[k] = m;
            EXPECT_GE(space.BoundOf(next), bound * (1 - 1e-9)) << k << " " << o;
          }
        }
      }
    }
  }
}

// A group's choices bounded together (the descent's way) are bounded as
// one at a time, whatever the other groups' placements, methods and
// parameter servers.
TEST(TimeBound, EachChoiceOfAGroupBoundedTogetherAsAlone) {
  for (const Case& c :
       {Case{"cnn", 11, 96}, Case{"transformer", 23, 16}, Case{"inception_v3", 42, 64}}) {
    SCOPED_TRACE(c.model + " on cluster " + std::to_string(c.cluster_seed));
    Coarsened cc = Coarsen(c);
    ASSERT_NE(cc.space, nullptr);
    const SearchSpace& space = *cc.space;
    const int groups = cc.coarse->num_groups();
    TimeBound together(*cc.coarse, cc.w->topo, c.batch), alone(*cc.coarse, cc.w->topo, c.batch);
    std::mt19937_64 rng(c.cluster_seed + 7);
    for (int trial = 0; trial < 3; ++trial) {
      const PlanState state = RandomState(space, groups, &rng);
      for (int k = 0; k < groups; ++k) {
        std::vector<std::pair<int, Method>> choices;
        for (int o = 0; o < static_cast<int>(space.options().size()); ++o) {
          for (Method m : space.MethodsFor(o)) choices.push_back({o, m});
        }
        const std::vector<double> bounds = together.OfEach(state, k, choices, space.options());
        ASSERT_EQ(bounds.size(), choices.size());
        std::vector<double> distinct;
        for (size_t i = 0; i < choices.size(); ++i) {
          PlanState next = state;
          next.place[k] = choices[i].first;
          next.method[k] = choices[i].second;
          const double one = alone.Of(next, space.options());
          EXPECT_NEAR(bounds[i], one, 1e-12 * one) << k << " " << choices[i].first;
          distinct.push_back(one);
        }
        std::sort(distinct.begin(), distinct.end());
        // The choices differ: some group's bounds differ with them.
        if (k == 0) EXPECT_LT(distinct.front(), distinct.back());
      }
    }
  }
}

}  // namespace
}  // namespace quilt
