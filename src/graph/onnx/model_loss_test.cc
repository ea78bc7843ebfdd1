// Which output of an imported model is its loss, what the labels are, and
// the notes that say so: hand-built graphs.
#include "src/graph/onnx/model_loss.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "src/common/status_matchers.h"
#include "src/graph/autodiff.h"
#include "src/graph/onnx/onnx_import.h"
#include "src/graph/onnx/onnx_test_graphs.h"

namespace quilt {
namespace {

using ::quilt::testing::AddNode;
using ::quilt::testing::Import;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

void AddInput(onnx::GraphProto* g, const std::string& name, int32_t type) {
  auto* in = g->add_input();
  in->set_name(name);
  in->mutable_type()->mutable_tensor_type()->set_elem_type(type);
  auto* shape = in->mutable_type()->mutable_tensor_type()->mutable_shape();
  shape->add_dim()->set_dim_param("batch");
  shape->add_dim()->set_dim_value(3);
}

void AddWeight(onnx::GraphProto* g, const std::string& name, std::vector<int64_t> dims) {
  auto* w = g->add_initializer();
  w->set_name(name);
  w->set_data_type(onnx::TensorProto::FLOAT);
  int64_t n = 1;
  for (int64_t d : dims) {
    w->add_dims(d);
    n *= d;
  }
  for (int64_t i = 0; i < n; ++i) w->add_float_data(0.1f * static_cast<float>(i + 1));
}

// forward(x, y) returning (metric, loss, z): z = x·W, loss = mean((z − y)²
// · pw) with keepdims (shape [1, 1]), metric = mean(y) (no weight).
onnx::ModelProto MetricLossAndPrediction(int32_t label_type = onnx::TensorProto::FLOAT) {
  onnx::ModelProto m;
  m.set_ir_version(7);
  m.add_opset_import()->set_version(14);
  auto* g = m.mutable_graph();
  AddInput(g, "x", onnx::TensorProto::FLOAT);
  AddInput(g, "y", label_type);
  AddWeight(g, "W", {3, 3});
  AddWeight(g, "pw", {3});
  AddNode(g, "MatMul", {"x", "W"}, "z");
  AddNode(g, "Sub", {"z", "y"}, "d");
  AddNode(g, "Mul", {"d", "d"}, "sq");
  AddNode(g, "Mul", {"sq", "pw"}, "weighted");
  AddNode(g, "ReduceMean", {"weighted"}, "loss");
  AddNode(g, "ReduceMean", {"y"}, "metric");
  g->mutable_node(g->node_size() - 1)->add_attribute()->set_name("keepdims");
  g->mutable_node(g->node_size() - 1)->mutable_attribute(0)->set_type(onnx::AttributeProto::INT);
  g->mutable_node(g->node_size() - 1)->mutable_attribute(0)->set_i(0);
  for (const char* out : {"metric", "loss", "z"}) g->add_output()->set_name(out);
  return m;
}

TEST(ModelLoss, TheFirstScalarThatReadsLabelsAndAWeight_IsTheLoss) {
  absl::StatusOr<Graph> g = Import(MetricLossAndPrediction().SerializeAsString());
  ASSERT_THAT(g, IsOk());
  EXPECT_EQ(g->loss.type, LossType::kModel);
  EXPECT_EQ(g->labels, std::vector<std::string>{"y"});
  EXPECT_EQ(g->inputs, std::vector<std::string>{"x"});
  // The [1, 1] mean is taken as its one value.
  ASSERT_NE(g->FindTensor(g->loss.output), nullptr);
  EXPECT_EQ(g->FindTensor(g->loss.output)->shape.rank(), 0);
  EXPECT_EQ(g->outputs, std::vector<std::string>{g->loss.output});
  const std::string notes = absl::StrJoin(g->import_notes, "\n");
  EXPECT_THAT(notes, AllOf(HasSubstr("the loss is output 'loss'"),
                           HasSubstr("outputs 'metric', 'z' are left out of training")));
  // pw meets the data only where the loss reads the labels; W does not.
  EXPECT_EQ(g->label_only_parameters, std::vector<std::string>{"pw"});
  TrainingOptions o;
  o.optimizer.kind = OptimizerSpec::Kind::kSgd;
  EXPECT_THAT(BuildTrainingGraph(&*g, o), IsOk());
}

// forward(x, y, m): z = (x · m) · W · V, loss = mean((z − y)²) [+ q, a
// fourth input the loss alone reads].
onnx::ModelProto LabelsBeforeAMask(bool with_q) {
  onnx::ModelProto m;
  m.set_ir_version(7);
  m.add_opset_import()->set_version(14);
  auto* g = m.mutable_graph();
  AddInput(g, "x", onnx::TensorProto::FLOAT);
  AddInput(g, "y", onnx::TensorProto::FLOAT);
  AddInput(g, "m", onnx::TensorProto::FLOAT);
  if (with_q) AddInput(g, "q", onnx::TensorProto::FLOAT);
  AddWeight(g, "W", {3, 3});
  AddWeight(g, "V", {3, 3});
  AddNode(g, "Mul", {"x", "m"}, "masked");
  AddNode(g, "MatMul", {"masked", "W"}, "h");
  AddNode(g, "MatMul", {"h", "V"}, "z");
  AddNode(g, "Sub", {"z", "y"}, "d");
  AddNode(g, "Mul", {"d", "d"}, "sq");
  if (with_q) {
    AddNode(g, "Add", {"sq", "q"}, "sq_q");
    AddNode(g, "ReduceMean", {"sq_q"}, "loss");
  } else {
    AddNode(g, "ReduceMean", {"sq"}, "loss");
  }
  g->mutable_node(g->node_size() - 1)->add_attribute()->set_name("keepdims");
  g->mutable_node(g->node_size() - 1)->mutable_attribute(0)->set_type(onnx::AttributeProto::INT);
  g->mutable_node(g->node_size() - 1)->mutable_attribute(0)->set_i(0);
  g->add_output()->set_name("loss");
  return m;
}

TEST(ModelLoss, TheInputOnlyTheLossReads_IsTheLabelsWhereverItComes) {
  absl::StatusOr<Graph> g = Import(LabelsBeforeAMask(false).SerializeAsString());
  ASSERT_THAT(g, IsOk());
  EXPECT_EQ(g->loss.type, LossType::kModel);
  EXPECT_EQ(g->labels, std::vector<std::string>{"y"});
  EXPECT_EQ(g->inputs, (std::vector<std::string>{"x", "m"}));
  EXPECT_THAT(absl::StrJoin(g->import_notes, "\n"),
              AllOf(HasSubstr("the last, 'm', feeds the model's layers, and 'y'"),
                    HasSubstr("then the labels")));
  // The last reads only the loss: it is the labels, as before.
  absl::StatusOr<Graph> two = Import(LabelsBeforeAMask(true).SerializeAsString());
  ASSERT_THAT(two, IsOk());
  EXPECT_EQ(two->labels, std::vector<std::string>{"q"});
  EXPECT_EQ(two->inputs, (std::vector<std::string>{"x", "y", "m"}));
  EXPECT_THAT(absl::StrJoin(two->import_notes, "\n"),
              HasSubstr("the last, 'q', is taken as the labels"));
}

TEST(ModelLoss, AFixedBatchExportsBatchSizeInTheLoss_IsNotedAtAnotherBatch) {
  // forward(x, y) exported at batch 4: ((x·W − y)²).sum() / x.shape[0],
  // the exporter's constant 4.
  onnx::ModelProto m = MetricLossAndPrediction();
  auto* g = m.mutable_graph();
  for (int i = 0; i < 2; ++i) {
    g->mutable_input(i)
        ->mutable_type()
        ->mutable_tensor_type()
        ->mutable_shape()
        ->mutable_dim(0)
        ->set_dim_value(4);
  }
  g->clear_output();
  AddNode(g, "ReduceSum", {"sq"}, "sum");
  auto* k = g->add_node();
  k->set_op_type("Constant");
  k->add_output("four");
  auto* v = k->add_attribute();
  v->set_name("value");
  v->set_type(onnx::AttributeProto::TENSOR);
  v->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
  v->mutable_t()->add_float_data(4.0f);
  AddNode(g, "Div", {"sum", "four"}, "per_sample");
  g->add_output()->set_name("per_sample");
  for (int64_t batch : {0, 4, 8}) {
    absl::StatusOr<Graph> imported = Import(m.SerializeAsString(), batch);
    ASSERT_THAT(imported, IsOk());
    EXPECT_EQ(imported->loss.type, LossType::kModel);
    const std::string notes = absl::StrJoin(imported->import_notes, "\n");
    if (batch == 8) {
      EXPECT_THAT(notes, HasSubstr("exported with a fixed batch of 4 and trains with 8"));
    } else {
      EXPECT_THAT(notes, Not(HasSubstr("fixed batch"))) << batch;
    }
  }
}

TEST(ModelLoss, AnOutputOfUnsupportedOps_IsLeftOutBesideALoss) {
  // (metric, loss, z, top): top = ArgMax(z), which the import does not
  // convert; the metric is declared a scalar.
  onnx::ModelProto m = MetricLossAndPrediction();
  auto* g = m.mutable_graph();
  AddNode(g, "ArgMax", {"z"}, "top");
  g->add_output()->set_name("top");
  absl::StatusOr<Graph> refused = Import(m.SerializeAsString());
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ArgMax")));
  g->mutable_output(0)->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto::FLOAT);
  g->mutable_output(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
  absl::StatusOr<Graph> imported = Import(m.SerializeAsString());
  ASSERT_THAT(imported, IsOk());
  EXPECT_EQ(imported->loss.type, LossType::kModel);
  EXPECT_THAT(absl::StrJoin(imported->import_notes, "\n"),
              HasSubstr("output 'top' uses ops the import does not support (ArgMax) and is left "
                        "out"));
}

TEST(ModelLoss, ScalarsTheExportFoldedIntoTheLoss_AreNoted) {
  // 0.5 · loss, the 0.5 an initializer named as the exporter names the
  // scalars it folds (a learned loss weight w[0] becomes one).
  onnx::ModelProto m = MetricLossAndPrediction();
  auto* g = m.mutable_graph();
  auto* w = g->add_initializer();
  w->set_name("onnx::Mul_7");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_float_data(0.5f);
  AddNode(g, "Mul", {"onnx::Mul_7", "loss"}, "scaled");
  g->clear_output();
  g->add_output()->set_name("scaled");
  absl::StatusOr<Graph> imported = Import(m.SerializeAsString());
  ASSERT_THAT(imported, IsOk());
  EXPECT_THAT(absl::StrJoin(imported->import_notes, "\n"),
              HasSubstr("the loss reads scalars the export folded (onnx::Mul_7)"));
  // Without it, no such note.
  absl::StatusOr<Graph> plain = Import(MetricLossAndPrediction().SerializeAsString());
  ASSERT_THAT(plain, IsOk());
  EXPECT_THAT(absl::StrJoin(plain->import_notes, "\n"), Not(HasSubstr("folded")));
}

TEST(ModelLoss, AnOutputAskedFor_IsTheLossOrTheImportSaysWhyNot) {
  // (metric, loss, z, second) with second = mean((z − y)²), unweighted.
  onnx::ModelProto m = MetricLossAndPrediction();
  auto* g = m.mutable_graph();
  AddNode(g, "ReduceMean", {"sq"}, "second");
  g->add_output()->set_name("second");
  auto import = [&](const std::string& wanted) {
    OnnxImportOptions o;
    o.loss_output = wanted;
    return ImportOnnx(m.SerializeAsString(), o);
  };
  absl::StatusOr<Graph> first = import("");
  ASSERT_THAT(first, IsOk());
  absl::StatusOr<Graph> second = import("second");
  ASSERT_THAT(second, IsOk());
  EXPECT_EQ(second->loss.type, LossType::kModel);
  EXPECT_NE(second->loss.output, first->loss.output);
  EXPECT_THAT(absl::StrJoin(second->import_notes, "\n"),
              HasSubstr("the loss is output 'second' (as asked)"));
  EXPECT_THAT(import("z"), StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr("output 'z' cannot be the loss")));
  EXPECT_THAT(import("metric"), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("output 'metric' cannot be the loss")));
  EXPECT_THAT(import("nope"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("no output 'nope' (its outputs: 'metric', 'loss', 'z', ")));
}

TEST(ModelLoss, LabelsOfAnotherType_AreNamedInTheError) {
  EXPECT_THAT(Import(MetricLossAndPrediction(onnx::TensorProto::INT32).SerializeAsString()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("input 'y'"), HasSubstr("element type int32"))));
}

}  // namespace
}  // namespace quilt
