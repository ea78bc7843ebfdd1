// The cost model's all-reduce prices: a plain model keeps them in a cache
// its copies share under a lock. Prices taken again, by copies, on two
// threads at once, equal those of a model that has priced nothing before,
// for every method, member order and size.
#include "src/cost/cost_model.h"

#include <random>
#include <thread>

#include "gtest/gtest.h"
#include "src/cluster/random_cluster.h"
#include "src/planner/planner_test_util.h"

namespace quilt {
namespace {

struct Ask {
  quilt::v1::AggregationMethod method;
  std::vector<int> devices;
  double bytes;
};

TEST(CostModel, AllReducePricesCachedAndOnThreadsAreThePricesFirstGiven) {
  auto w = testing::Make("mlp", RandomCluster(17));
  ASSERT_NE(w, nullptr);
  const int n = w->topo.num_devices();
  ASSERT_GE(n, 4);
  std::mt19937_64 rng(5);
  // Each member set in each method at two sizes: asks that differ in one
  // of them only.
  std::vector<Ask> asks;
  for (int set = 0; set < 15; ++set) {
    std::vector<int> devices;
    for (int d = 0; d < n; ++d) {
      if (rng() % 2 == 0) devices.push_back(d);
    }
    if (devices.size() < 2) devices = {0, n - 1};
    std::shuffle(devices.begin(), devices.end(), rng);  // ring order matters
    const double bytes = static_cast<double>(1 + rng() % (64 << 20));
    for (quilt::v1::AggregationMethod method :
         {quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE,
          quilt::v1::AGGREGATION_METHOD_TREE_ALLREDUCE,
          quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE,
          quilt::v1::AGGREGATION_METHOD_DIRECT_ALLREDUCE}) {
      for (double b : {bytes, 3 * bytes + 1}) asks.push_back({method, devices, b});
    }
  }
  // Each price from a model that has priced nothing before.
  std::vector<CostModel::Collective> first;
  for (const Ask& a : asks) {
    absl::StatusOr<CostModel> fresh = CostModel::Create(&w->graph, &w->topo);
    ASSERT_TRUE(fresh.ok());
    first.push_back(fresh->AllReduce(a.method, a.devices, a.bytes));
    EXPECT_GT(first.back().time_s, 0);
  }
  // The same ring order reversed is another collective, priced apart.
  const CostModel& model = *w->cost;
  std::vector<int> reversed(asks[0].devices.rbegin(), asks[0].devices.rend());
  const double reversed_s = model.AllReduce(asks[0].method, reversed, asks[0].bytes).time_s;
  absl::StatusOr<CostModel> fresh = CostModel::Create(&w->graph, &w->topo);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(reversed_s, fresh->AllReduce(asks[0].method, reversed, asks[0].bytes).time_s);
  // Copies on two threads, each in its own order, three rounds.
  const CostModel copy = model;
  std::vector<std::vector<CostModel::Collective>> got(2);
  std::thread other([&] {
    for (int round = 0; round < 3; ++round) {
      for (size_t i = asks.size(); i-- > 0;) {
        got[1].push_back(copy.AllReduce(asks[i].method, asks[i].devices, asks[i].bytes));
      }
    }
  });
  for (int round = 0; round < 3; ++round) {
    for (const Ask& a : asks) got[0].push_back(model.AllReduce(a.method, a.devices, a.bytes));
  }
  other.join();
  for (size_t k = 0; k < 3 * asks.size(); ++k) {
    const size_t i = k % asks.size(), j = asks.size() - 1 - k % asks.size();
    EXPECT_EQ(got[0][k].time_s, first[i].time_s) << i;
    EXPECT_EQ(got[0][k].resources, first[i].resources) << i;
    EXPECT_EQ(got[1][k].time_s, first[j].time_s) << j;
    EXPECT_EQ(got[1][k].resources, first[j].resources) << j;
  }
}

}  // namespace
}  // namespace quilt
