// The class losses' import: class weights stay constants and weigh one-hot
// rows of the labels; NLL and F.one_hot become OneHot ops the synthetic
// data reads the class count from; weights the model computes, a count of
// weights other than the classes' and unknown reductions are refused.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "src/common/files.h"
#include "src/common/status_matchers.h"
#include "src/graph/autodiff.h"
#include "src/graph/onnx/onnx_test_graphs.h"
#include "src/testing/subprocess.h"

namespace quilt {
namespace {

using testing::AddNode;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::Import;

onnx::ModelProto Fixture(const std::string& name) {
  auto b = ReadFile(testing::RunfilePath("test/fixtures/" + name + "/model.onnx"));
  EXPECT_THAT(b, IsOk());
  onnx::ModelProto m;
  EXPECT_TRUE(b.ok() && m.ParseFromString(*b));
  return m;
}

const Op* OnlyOneHot(const Graph& g) {
  const Op* found = nullptr;
  int count = 0;
  for (const Op& op : g.ops) {
    if (op.type == "OneHot") {
      found = &op;
      ++count;
    }
  }
  EXPECT_EQ(count, 1);
  return found;
}

TEST(ClassLossImport, ClassWeightsAreConstantsWeighingTheLabelsRows) {
  absl::StatusOr<Graph> g = Import(Fixture("weighted_ce").SerializeAsString());
  ASSERT_THAT(g, IsOk());
  EXPECT_EQ(g->loss.type, LossType::kModel);
  EXPECT_EQ(g->loss.label, "y");
  int parameters = 0;
  for (const TensorInfo& t : g->tensors()) {
    if (t.role != TensorRole::kParameter) continue;
    ++parameters;
    EXPECT_EQ(t.name.find("class_weights"), std::string::npos) << t.name << " trains";
  }
  EXPECT_EQ(parameters, 4);  // the two layers' weights and biases
  const Op* rows = OnlyOneHot(*g);
  ASSERT_NE(rows, nullptr);
  EXPECT_EQ(rows->inputs[0], "y");
  EXPECT_EQ(rows->attrs.Int("classes", 0), 5);
  EXPECT_EQ(rows->attrs.Int("axis", 0), 1);
  EXPECT_EQ(rows->attrs.Int("ignore_index", 0), -100);
  TrainingOptions o;
  o.optimizer.kind = OptimizerSpec::Kind::kSgd;
  EXPECT_THAT(BuildTrainingGraph(&*g, o), IsOk());
}

TEST(ClassLossImport, NllAndOneHotReadTheLabelsAsClasses) {
  // NLL over [N, C, T] with class 0 ignored; F.one_hot's int64 rows.
  absl::StatusOr<Graph> nll = Import(Fixture("mixture_nll").SerializeAsString());
  ASSERT_THAT(nll, IsOk());
  const Op* rows = OnlyOneHot(*nll);
  ASSERT_NE(rows, nullptr);
  EXPECT_EQ(rows->attrs.Int("classes", 0), 4);
  EXPECT_EQ(rows->attrs.Int("ignore_index", -1), 0);
  EXPECT_EQ(nll->FindTensor(rows->outputs[0])->shape.ToString(), "[B,4,6]");
  absl::StatusOr<Graph> smoothed = Import(Fixture("smoothed_ce").SerializeAsString());
  ASSERT_THAT(smoothed, IsOk());
  EXPECT_EQ(smoothed->loss.type, LossType::kModel);
  rows = OnlyOneHot(*smoothed);
  ASSERT_NE(rows, nullptr);
  EXPECT_EQ(rows->attrs.Int("classes", 0), 5);
  EXPECT_EQ(rows->attrs.Int("wrap_negative", 1), 0);  // PyTorch refuses -1
  EXPECT_EQ(smoothed->FindTensor(rows->outputs[0])->shape.ToString(), "[B,5]");
}

TEST(ClassLossImport, OneHotWithoutAClassCount_AsksForNumClasses) {
  // F.one_hot(y) without num_classes exports depth -1.
  onnx::ModelProto m = Fixture("smoothed_ce");
  auto* nodes = m.mutable_graph()->mutable_node();
  onnx::NodeProto* one_hot = nullptr;
  for (onnx::NodeProto& n : *nodes) one_hot = n.op_type() == "OneHot" ? &n : one_hot;
  ASSERT_NE(one_hot, nullptr);
  one_hot->set_input(1, "no_depth");
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name("no_depth");
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_int64_data(-1);
  EXPECT_THAT(Import(m.SerializeAsString()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("depth -1"), HasSubstr("give num_classes"))));
}

onnx::NodeProto* Sce(onnx::ModelProto* m) {
  for (onnx::NodeProto& n : *m->mutable_graph()->mutable_node()) {
    if (n.op_type() == "SoftmaxCrossEntropyLoss") return &n;
  }
  ADD_FAILURE() << "no SoftmaxCrossEntropyLoss";
  return nullptr;
}

TEST(ClassLossImport, WeightsTheModelComputes_AWrongCountAndUnknownReductions_AreRefused) {
  onnx::ModelProto computed = Fixture("weighted_ce");
  AddNode(computed.mutable_graph(), "Mul", {"class_weights", "model.2.bias"}, "scaled_weights");
  onnx::NodeProto* sce = Sce(&computed);
  ASSERT_NE(sce, nullptr);
  sce->set_input(2, "scaled_weights");
  // (The new node goes last; the graph is put back in order.)
  auto* nodes = computed.mutable_graph()->mutable_node();
  nodes->SwapElements(nodes->size() - 1, nodes->size() - 2);
  EXPECT_THAT(Import(computed.SerializeAsString()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("class weights 'scaled_weights' are computed or trained")));

  onnx::ModelProto four = Fixture("weighted_ce");
  for (onnx::TensorProto& t : *four.mutable_graph()->mutable_initializer()) {
    if (t.name() != "class_weights") continue;
    t.set_dims(0, 4);
    if (t.float_data_size() > 0) t.mutable_float_data()->RemoveLast();
    if (!t.raw_data().empty()) t.mutable_raw_data()->resize(16);
  }
  EXPECT_THAT(Import(four.SerializeAsString()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("4 class weights for 5")));

  onnx::ModelProto odd = Fixture("weighted_ce");
  for (onnx::AttributeProto& a : *Sce(&odd)->mutable_attribute()) {
    if (a.name() == "reduction") a.set_s("average");
  }
  EXPECT_THAT(Import(odd.SerializeAsString()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("reduction 'average' is not one of mean, sum, none")));
}

}  // namespace
}  // namespace quilt
