// EstimateMany simulates strategies that are one plan but for their names
// and replica counts that give the same rows once: the later is a copy under
// its own name and counts, equal to what simulating it alone gives; a copy
// whose plan was not begun (the budget's end) is left out too.
#include "src/planner/estimate_many.h"

#include <map>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/planner/planner_test_util.h"

namespace quilt {
namespace {

using google::protobuf::util::MessageDifferencer;

constexpr int64_t kBatch = 24;

struct Outcome {
  std::map<std::string, Evaluated> done;
  std::vector<std::string> lines;
};

Outcome EstimateAll(const testing::World& w, const std::vector<NamedStrategy>& list,
                    std::function<bool()> may_begin = {}, int64_t batch = kBatch) {
  Outcome run;
  absl::StatusOr<GraphIndex> ix = GraphIndex::Build(w.graph);
  EXPECT_THAT(ix.status(), IsOk());
  if (!ix.ok()) return run;
  EstimateManyOptions o;
  o.batch = batch;
  o.progress = [&](const std::string& line) { run.lines.push_back(line); };
  o.start = absl::Now();
  o.may_begin = std::move(may_begin);
  EXPECT_THAT(EstimateMany(*ix, w.topo, *w.cost, list, o, &run.done), IsOk());
  return run;
}

NamedStrategy Ring(const testing::World& w, const std::string& name,
                   const std::vector<int64_t>& counts) {
  return {name, DataParallelStrategy(w.graph, w.topo, counts,
                                     quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, name)};
}

bool Said(const Outcome& run, const std::string& text) {
  return absl::c_any_of(run.lines,
                        [&](const std::string& l) { return absl::StrContains(l, text); });
}

TEST(EstimateMany, OnePlanUnderTwoNamesIsSimulatedOnce) {
  auto w = testing::Make("resnet50");
  const NamedStrategy even = Ring(*w, "even", {1, 1, 1, 1});
  const NamedStrategy scaled = Ring(*w, "scaled", {3, 3, 3, 3});
  const NamedStrategy skewed = Ring(*w, "skewed", {3, 3, 1, 1});
  const Outcome all = EstimateAll(*w, {even, scaled, skewed});
  ASSERT_EQ(all.done.size(), 3u);
  EXPECT_TRUE(Said(all, "scaled is the plan of even: simulated once"));
  EXPECT_FALSE(Said(all, "simulating scaled"));
  EXPECT_TRUE(Said(all, "simulating skewed"));  // another split: its own plan

  // The copy is what simulating it alone gives: its own name and counts.
  const Outcome alone = EstimateAll(*w, {scaled});
  ASSERT_EQ(alone.done.count("scaled"), 1u);
  const Evaluated& copy = all.done.at("scaled");
  const Evaluated& own = alone.done.at("scaled");
  EXPECT_TRUE(MessageDifferencer::Equals(copy.estimate, own.estimate))
      << copy.estimate.ShortDebugString() << "\nvs\n"
      << own.estimate.ShortDebugString();
  ASSERT_FALSE(copy.program.empty());
  ASSERT_FALSE(own.program.empty());
  EXPECT_TRUE(MessageDifferencer::Equals(*copy.program, *own.program));
  EXPECT_EQ(copy.program->strategy().groups(0).replicas(0).replicas(), 3);
  EXPECT_EQ(all.done.at("even").estimate.strategy().groups(0).replicas(0).replicas(), 1);
  EXPECT_EQ(all.done.at("even").program->strategy().name(), "even");
}

// Counts of 3, 3, 1, 1 give 4 rows as 2, 2, 0, 0: the plan of counts 1, 1
// on the first two devices alone; 1 each gives every device a row.
TEST(EstimateMany, CountsThatGiveTheSameRowsAreOnePlan) {
  auto w = testing::Make("resnet50");
  const Outcome all = EstimateAll(*w,
                                  {Ring(*w, "pair", {1, 1, 0, 0}), Ring(*w, "skewed", {3, 3, 1, 1}),
                                   Ring(*w, "even", {1, 1, 1, 1})},
                                  {}, /*batch=*/4);
  ASSERT_EQ(all.done.size(), 3u);
  EXPECT_TRUE(Said(all, "skewed is the plan of pair: simulated once"));
  EXPECT_TRUE(Said(all, "simulating even"));
  const Outcome alone = EstimateAll(*w, {Ring(*w, "skewed", {3, 3, 1, 1})}, {}, /*batch=*/4);
  ASSERT_EQ(alone.done.count("skewed"), 1u);
  EXPECT_TRUE(
      MessageDifferencer::Equals(all.done.at("skewed").estimate, alone.done.at("skewed").estimate));
  EXPECT_TRUE(
      MessageDifferencer::Equals(*all.done.at("skewed").program, *alone.done.at("skewed").program));
}

TEST(EstimateMany, ACopyOfAPlanNotBegunIsLeftOut) {
  auto w = testing::Make("resnet50");
  const Outcome none = EstimateAll(
      *w, {Ring(*w, "even", {1, 1, 1, 1}), Ring(*w, "scaled", {2, 2, 2, 2})}, [] { return false; });
  EXPECT_TRUE(none.done.empty());
  EXPECT_FALSE(Said(none, "simulated once"));
}

}  // namespace
}  // namespace quilt
