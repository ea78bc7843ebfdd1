// A job's training graph: parameters the job names frozen are not
// updated; a name that is no parameter is refused.
#include "src/coordinator/job_model.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"

namespace quilt {
namespace {

using ::testing::HasSubstr;

quilt::v1::JobSpec MlpJob() {
  quilt::v1::JobSpec spec;
  spec.set_zoo("mlp");
  spec.set_global_batch(8);
  spec.set_steps(1);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1);
  return spec;
}

TEST(TrainingGraphForJob, FrozenParametersAreNotUpdated) {
  absl::StatusOr<Graph> all = TrainingGraphForJob(MlpJob());
  ASSERT_THAT(all.status(), IsOk());
  ASSERT_GE(all->parameters.size(), 2u);
  const std::string kept = all->parameters[0].tensor;
  auto updated = [](const Graph& g, const std::string& param) {
    for (const Op& op : g.ops) {
      if (op.type == "SgdUpdate" && !op.inputs.empty() && op.inputs[0] == param) return true;
    }
    return false;
  };
  EXPECT_TRUE(updated(*all, kept));
  quilt::v1::JobSpec spec = MlpJob();
  spec.add_frozen(kept);
  absl::StatusOr<Graph> g = TrainingGraphForJob(spec);
  ASSERT_THAT(g.status(), IsOk());
  EXPECT_FALSE(updated(*g, kept));
  EXPECT_TRUE(updated(*g, all->parameters[1].tensor));
  spec.add_frozen("no.such.weight");
  EXPECT_THAT(TrainingGraphForJob(spec).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no.such.weight")));
}

}  // namespace
}  // namespace quilt
