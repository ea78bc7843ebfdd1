// A job's training graph: parameters the job names frozen are not
// updated; a name that is no parameter is refused; a loss other than the
// model's is refused; a model without a loss, in a job that sets none, is
// refused naming the choices; initial weights replace the parameters they
// name.
#include "src/coordinator/job_model.h"

#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/files.h"
#include "src/common/status_matchers.h"
#include "src/runtime/data/npz.h"

namespace quilt {
namespace {

using ::testing::AllOf;
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

// A loss the job names must be the model's: a model that computes its own
// loss, or a zoo model's softmax cross-entropy, is not trained with another
// without a word.
TEST(TrainingGraphForJob, RefusesALossOtherThanTheModels) {
  quilt::v1::JobSpec zoo = MlpJob();
  zoo.set_loss(quilt::v1::Loss::TYPE_SOFTMAX_CROSS_ENTROPY);
  EXPECT_THAT(TrainingGraphForJob(zoo).status(), IsOk());
  zoo.set_loss(quilt::v1::Loss::TYPE_MSE);
  EXPECT_THAT(TrainingGraphForJob(zoo).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("the job's loss mse")));

  absl::StatusOr<std::string> onnx = ReadFile("test/fixtures/lm_blocks/model.onnx");
  ASSERT_THAT(onnx.status(), IsOk());
  quilt::v1::JobSpec own = MlpJob();
  own.set_onnx(*onnx);
  own.set_global_batch(4);
  EXPECT_THAT(TrainingGraphForJob(own).status(), IsOk());
  // (Its own loss is a cross-entropy: asking for that is asking for it.)
  own.set_loss(quilt::v1::Loss::TYPE_SOFTMAX_CROSS_ENTROPY);
  EXPECT_THAT(TrainingGraphForJob(own).status(), IsOk());
  own.set_loss(quilt::v1::Loss::TYPE_MSE);
  EXPECT_THAT(TrainingGraphForJob(own).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("computes its own loss")));
}

// A batch past what a step may have is named as such, before the model's
// tensors are sized by it.
TEST(TrainingGraphForJob, RefusesABatchPastTheLimitNamingIt) {
  absl::StatusOr<std::string> onnx = ReadFile("test/fixtures/lm_blocks/model.onnx");
  ASSERT_THAT(onnx.status(), IsOk());
  quilt::v1::JobSpec spec = MlpJob();
  spec.set_onnx(*onnx);
  spec.set_global_batch(3000000000);
  EXPECT_THAT(TrainingGraphForJob(spec).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a global batch of 3000000000 is more than the")));
}

// An exported classifier computes no loss: the job must pick one, and the
// refusal says which there are and where to set it.
TEST(TrainingGraphForJob, AModelWithoutALossNeedsTheJobs) {
  absl::StatusOr<std::string> onnx = ReadFile("test/fixtures/mlp/model.onnx");
  ASSERT_THAT(onnx.status(), IsOk());
  quilt::v1::JobSpec spec = MlpJob();
  spec.set_onnx(*onnx);
  EXPECT_THAT(TrainingGraphForJob(spec).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("defines no loss"), HasSubstr("softmax_cross_entropy"),
                             HasSubstr("--loss"))));
  spec.set_loss(quilt::v1::Loss::TYPE_SOFTMAX_CROSS_ENTROPY);
  EXPECT_THAT(TrainingGraphForJob(spec).status(), IsOk());
}

// Initial weights replace the parameters they name (the others keep their
// initial values); a name that is no parameter, an array of another shape
// and bytes that are no .npz are refused, naming the problem.
TEST(TrainingGraphForJob, InitialWeightsReplaceTheParametersTheyName) {
  absl::StatusOr<Graph> plain = TrainingGraphForJob(MlpJob());
  ASSERT_THAT(plain.status(), IsOk());
  ASSERT_GE(plain->parameters.size(), 2u);
  const std::string first = plain->parameters[0].tensor;
  const std::vector<int64_t> dims = plain->FindTensor(first)->shape.Concrete(1);
  absl::StatusOr<Tensor> w = Tensor::Empty(DType::kF32, dims);
  ASSERT_THAT(w.status(), IsOk());
  for (int64_t i = 0; i < w->numel(); ++i) w->f32()[i] = 0.25f + static_cast<float>(i % 7);
  absl::StatusOr<std::string> npz = NpzArchive({{first, *w}});
  ASSERT_THAT(npz.status(), IsOk());
  quilt::v1::JobSpec spec = MlpJob();
  spec.set_initial_weights(*npz);
  absl::StatusOr<Graph> g = TrainingGraphForJob(spec);
  ASSERT_THAT(g.status(), IsOk());
  const ParameterSpec* p = g->FindParameter(first);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->value.has_value());
  ASSERT_EQ(p->value->dims(), dims);
  EXPECT_EQ(std::memcmp(p->value->raw(), w->raw(), static_cast<size_t>(w->bytes())), 0);
  const ParameterSpec* other = g->FindParameter(plain->parameters[1].tensor);
  EXPECT_EQ(other->value.has_value(), plain->parameters[1].value.has_value()) << "left as it was";

  auto refused = [&](const std::vector<std::pair<std::string, Tensor>>& arrays) {
    absl::StatusOr<std::string> bytes = NpzArchive(arrays);
    if (!bytes.ok()) return bytes.status();
    quilt::v1::JobSpec s = MlpJob();
    s.set_initial_weights(*bytes);
    return TrainingGraphForJob(s).status();
  };
  EXPECT_THAT(
      refused({{"no.such.weight", *w}}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("'no.such.weight', which is no parameter"), HasSubstr(first))));
  absl::StatusOr<Tensor> flat = Tensor::Empty(DType::kF32, {w->numel()});
  ASSERT_THAT(flat.status(), IsOk());
  EXPECT_THAT(refused({{first, *flat}}), StatusIs(absl::StatusCode::kInvalidArgument,
                                                  AllOf(HasSubstr("give '" + first + "' as f32["),
                                                        HasSubstr("but the model's is f32["))));
  absl::StatusOr<Tensor> ints = Tensor::Empty(DType::kI64, dims);
  ASSERT_THAT(ints.status(), IsOk());
  EXPECT_THAT(refused({{first, *ints}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("as i64["), HasSubstr("but the model's is f32["))));
  spec.set_initial_weights("not an archive");
  EXPECT_THAT(TrainingGraphForJob(spec).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("the job's initial weights")));
}

}  // namespace
}  // namespace quilt
