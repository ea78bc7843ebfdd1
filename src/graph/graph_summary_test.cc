// Summarize: activation bytes grow with the batch and saturate rather than
// wrap at the largest batches a step may have.
#include "src/graph/graph_summary.h"

#include <limits>

#include "gtest/gtest.h"
#include "src/graph/graph.h"
#include "src/graph/zoo/zoo.h"

namespace quilt {
namespace {

TEST(Summarize, ActivationBytesSaturateRatherThanWrap) {
  absl::StatusOr<Graph> g = zoo::BuildZooModel("gpt2_xl");
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<GraphSummary> four = Summarize(*g, 4), eight = Summarize(*g, 8);
  ASSERT_TRUE(four.ok() && eight.ok());
  EXPECT_GT(four->activation_bytes, 0);
  EXPECT_GT(eight->activation_bytes, four->activation_bytes);
  absl::StatusOr<GraphSummary> most = Summarize(*g, kMaxGlobalBatch);
  ASSERT_TRUE(most.ok());
  EXPECT_EQ(most->activation_bytes, std::numeric_limits<int64_t>::max());
}

}  // namespace
}  // namespace quilt
