#include "src/graph/zoo/zoo.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/graph/autodiff.h"
#include "src/graph/validate.h"

namespace quilt::zoo {
namespace {

class ZooTest : public ::testing::TestWithParam<ZooModel> {};

TEST_P(ZooTest, BuildsValidatesAndMatchesPublishedParameterCount) {
  const ZooModel& m = GetParam();
  auto g = BuildZooModel(m.name);
  ASSERT_THAT(g, IsOk());
  ASSERT_THAT(ValidateGraph(&*g), IsOk());
  const int64_t count = g->ParameterCount();
  if (m.published_parameters > 0) {
    EXPECT_LT(std::fabs(double(count) - double(m.published_parameters)),
              0.01 * double(m.published_parameters))
        << m.name << " has " << count << " parameters; published " << m.published_parameters;
  } else {
    EXPECT_GT(count, 0);
  }
}

TEST_P(ZooTest, TrainingGraphBuilds) {
  auto g = BuildZooModel(GetParam().name);
  ASSERT_THAT(g, IsOk());
  TrainingOptions o;
  o.optimizer.kind = OptimizerSpec::Kind::kAdam;
  ASSERT_THAT(BuildTrainingGraph(&*g, o), IsOk());
  EXPECT_TRUE(g->has_backward);
  // One update per trainable parameter.
  int updates = 0;
  for (const Op& op : g->ops) updates += op.type == "AdamUpdate";
  int trainable = 0;
  for (const ParameterSpec& p : g->parameters) trainable += !p.frozen;
  EXPECT_EQ(updates, trainable);
  // Every batch tensor holds its samples in blocks (batch_layout.h), so
  // the planner may move any range of samples between devices.
  for (const TensorInfo& t : g->tensors()) EXPECT_FALSE(t.interleaved_batch) << t.name;
}

INSTANTIATE_TEST_SUITE_P(Zoo, ZooTest, ::testing::ValuesIn(ZooModels()),
                         [](const auto& info) { return info.param.name; });

TEST(Zoo, UnknownName_ListsKnownModels) {
  EXPECT_THAT(BuildZooModel("alexnet"),
              StatusIs(absl::StatusCode::kNotFound, ::testing::HasSubstr("resnet50")));
}

}  // namespace
}  // namespace quilt::zoo
