// The OneHot kernel: rows of labels at any axis, ignored labels, ONNX's
// negative labels, and the error naming a label that is not a class (by
// its position in the step's labels, on a replica's rows too).
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status.h"
#include "src/common/status_matchers.h"
#include "src/graph/graph_builder.h"
#include "src/runtime/graph_runner.h"
#include "src/runtime/kernels/kernel.h"

namespace quilt {
namespace {

using ::testing::HasSubstr;

// OneHot of int64 labels [B, 3] (`labels` holds B × 3) with `attrs`.
absl::StatusOr<Tensor> RunOneHot(const std::vector<int64_t>& labels, Attrs attrs) {
  Graph g;
  GraphBuilder b(&g);
  ASSIGN_OR_RETURN(std::string y,
                   b.AddInput("y", DType::kI64, Shape({Dim::Batch(), Dim::Fixed(3)})));
  ASSIGN_OR_RETURN(std::string rows, b.Add("OneHot", {y}, std::move(attrs), "rows"));
  ASSIGN_OR_RETURN(std::unique_ptr<GraphRunner> runner, GraphRunner::Create(g, {}));
  const int64_t batch = static_cast<int64_t>(labels.size()) / 3;
  ASSIGN_OR_RETURN(auto out, runner->Evaluate({{y, Tensor::FromI64({batch, 3}, labels)}}, {rows}));
  return out.at(rows);
}

std::vector<float> Values(const Tensor& t) { return {t.f32(), t.f32() + t.numel()}; }

Attrs OneHotAttrs(int64_t classes, int64_t axis) {
  Attrs a;
  a.SetInt("classes", classes);
  a.SetInt("axis", axis);
  return a;
}

TEST(OneHot, RowsAlongTheClassAxis) {
  // Axis 1 of [B, C, 3] (NLL's layout) and the last axis of [B, 3, C].
  const std::vector<int64_t> labels = {2, 0, 3, 1, 1, 0};
  for (int64_t axis : {1, -1}) {
    auto out = RunOneHot(labels, OneHotAttrs(4, axis));
    ASSERT_THAT(out, IsOk());
    const std::vector<int64_t> dims =
        axis == 1 ? std::vector<int64_t>{2, 4, 3} : std::vector<int64_t>{2, 3, 4};
    ASSERT_EQ(out->dims(), dims);
    for (int64_t s = 0; s < 2; ++s) {
      for (int64_t t = 0; t < 3; ++t) {
        for (int64_t c = 0; c < 4; ++c) {
          const int64_t at = axis == 1 ? (s * 4 + c) * 3 + t : (s * 3 + t) * 4 + c;
          EXPECT_EQ(out->f32()[at], labels[s * 3 + t] == c ? 1.0f : 0.0f)
              << "axis " << axis << " sample " << s << " position " << t << " class " << c;
        }
      }
    }
  }
}

TEST(OneHot, IgnoredLabelsGetZeroRowsAndNegativesWrapWhenAsked) {
  Attrs a = OneHotAttrs(4, -1);
  a.SetInt("ignore_index", 0);  // a class index, ignored (padding)
  auto out = RunOneHot({0, 3, 0}, a);
  ASSERT_THAT(out, IsOk());
  EXPECT_THAT(Values(*out), ::testing::ElementsAre(0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0));
  a = OneHotAttrs(4, -1);
  a.SetInt("wrap_negative", 1);
  out = RunOneHot({-1, -4, 2}, a);
  ASSERT_THAT(out, IsOk());
  EXPECT_THAT(Values(*out), ::testing::ElementsAre(0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1, 0));
}

TEST(OneHot, ALabelThatIsNotAClass_IsAnErrorNamingIt) {
  for (const auto& [labels, bad] : std::vector<std::pair<std::vector<int64_t>, std::string>>{
           {{1, 4, 0}, "label 4 at position 1 is not a class in [0, 4)"},
           {{1, 2, -1}, "label -1 at position 2 is not a class in [0, 4)"},
           {{-100, 2, 1}, "label -100 at position 0"}}) {
    auto out = RunOneHot(labels, OneHotAttrs(4, 1));
    EXPECT_THAT(out.status(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(bad)));
  }
}

TEST(OneHot, OnAReplicasRows_TheBadLabelsPositionIsTheSteps) {
  // Rows 4 and 5 of a step's labels [B, 3]: the replica's position 4 is
  // the step's 3 · 4 + 4 = 16, as one device would say.
  Op op;
  op.name = "rows";
  op.type = "OneHot";
  op.attrs = OneHotAttrs(4, -1);
  const Tensor labels = Tensor::FromI64({2, 3}, {1, 2, 3, 0, 7, 1});
  const Shape shape({Dim::Batch(), Dim::Fixed(3)});
  std::vector<Tensor> outs(1);
  KernelContext ctx(op, {&labels}, {&shape}, {{2, 3, 4}}, {DType::kF32}, &outs);
  ctx.local_batch = 2;
  ctx.batch_offset = 4;
  ctx.global_batch = 8;
  KernelFn kernel = KernelRegistry::Global().Find("cpu", "OneHot");
  ASSERT_NE(kernel, nullptr);
  EXPECT_THAT(kernel(ctx), StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr("label 7 at position 16 is not a class")));
}

}  // namespace
}  // namespace quilt
