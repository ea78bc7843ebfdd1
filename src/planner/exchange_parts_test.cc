// The explanation of a program's two-level all-reduces whose parts across
// nodes follow the nodes' bandwidths: named with the largest one's parts
// where the NICs differ, absent where they are alike.
#include "src/planner/exchange_parts.h"

#include <cstdio>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/planner/baselines.h"
#include "src/planner/planner_test_util.h"

namespace quilt {
namespace {

using ::testing::HasSubstr;

// Four nodes of two GPUs; the first node's NIC `fast` bytes/s, the
// others' 1.25 GB/s.
quilt::v1::ClusterSpec FourNodes(double fast) {
  quilt::v1::ClusterSpec spec = testing::TwoNodes();
  for (int n = 2; n < 4; ++n) {
    auto* node = spec.add_nodes();
    *node = spec.nodes(1);
    node->set_node_id("n" + std::to_string(n));
    for (int d = 0; d < node->devices_size(); ++d) {
      node->mutable_devices(d)->set_id(node->node_id() + "/gpu:" + std::to_string(d));
    }
  }
  spec.mutable_nodes(0)->mutable_nic()->set_bandwidth_bytes_per_s(fast);
  return spec;
}

TEST(ExchangeParts, NamesTheLargestAllReducesPartsWhereNicsDiffer) {
  for (double fast : {2.5e9, 1.25e9}) {
    SCOPED_TRACE(fast);
    auto s = testing::Make("transformer", FourNodes(fast));
    const quilt::v1::Strategy strategy =
        DataParallelStrategy(s->graph, s->topo, std::vector<int64_t>(8, 1),
                             quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE, "dp");
    const quilt::v1::DistributedProgram p = testing::LowerChecked(*s, strategy, 16);
    const std::string text = ExchangePartsText(p, s->topo);
    if (fast == 1.25e9) {
      EXPECT_EQ(text, "");
      continue;
    }
    // The embedding table's gradient (37000 × 512 floats) is the largest:
    // the fast node sums 0.7 of it, each other node 0.1.
    EXPECT_THAT(text, HasSubstr("the largest (72.3MiB): fast 70 %, slow 10 %, n2 10 %, n3 10 %"));
    // Small gradients (a piece alone) keep equal parts: fewer all-reduces
    // are counted than there are.
    int by_bandwidth = 0, all = 0;
    ASSERT_EQ(std::sscanf(text.c_str(), "%d of the %d", &by_bandwidth, &all), 2) << text;
    EXPECT_GE(by_bandwidth, 1);
    EXPECT_LT(by_bandwidth, all);
  }
}

}  // namespace
}  // namespace quilt
