// Validation errors name the op or tensor; the proto conversion is lossless.
#include "src/graph/validate.h"

#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/graph/graph_builder.h"
#include "src/graph/zoo/zoo.h"
#include "src/testing/make_op.h"

namespace quilt {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

Graph TwoInputs() {
  Graph g;
  GraphBuilder b(&g);
  EXPECT_THAT(b.AddInput("x", DType::kF32, Shape({Dim::Batch(), Dim::Fixed(3)})), IsOk());
  EXPECT_THAT(b.AddInput("i", DType::kI64, Shape({Dim::Batch(), Dim::Fixed(3)})), IsOk());
  return g;
}

TEST(Validate, Cycle_NamesAnOpOnIt) {
  Graph g = TwoInputs();
  g.ops.push_back(MakeOp("a", "Relu", {"b_out"}, {"a_out"}));
  g.ops.push_back(MakeOp("b", "Relu", {"a_out"}, {"b_out"}));
  EXPECT_THAT(ValidateGraph(&g),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cycle through op")));
}

TEST(Validate, DanglingInput_NamesTensorAndOp) {
  Graph g = TwoInputs();
  g.ops.push_back(MakeOp("a", "Relu", {"ghost"}, {"a_out"}));
  EXPECT_THAT(ValidateGraph(&g), StatusIs(absl::StatusCode::kInvalidArgument,
                                          AllOf(HasSubstr("'a'"), HasSubstr("'ghost'"))));
}

// Names go into protobuf string fields: bytes that are not UTF-8 are
// refused, naming the name (escaped).
TEST(Validate, NamesThatAreNotUtf8_Rejected) {
  {
    Graph g = TwoInputs();
    g.ops.push_back(MakeOp("/\xffRelu", "Relu", {"x"}, {"a_out"}));
    EXPECT_THAT(ValidateGraph(&g), StatusIs(absl::StatusCode::kInvalidArgument,
                                            AllOf(HasSubstr("op name '/\\xffRelu'"),
                                                  HasSubstr("is not valid UTF-8"))));
  }
  {
    Graph g = TwoInputs();
    g.ops.push_back(MakeOp("a", "Relu", {"x"}, {"out\xc3"}));
    EXPECT_THAT(ValidateGraph(&g), StatusIs(absl::StatusCode::kInvalidArgument,
                                            AllOf(HasSubstr("'out\\xc3'"), HasSubstr("op 'a'"),
                                                  HasSubstr("is not valid UTF-8"))));
  }
  {
    Graph g = TwoInputs();
    g.name = "model\xff";
    EXPECT_THAT(ValidateGraph(&g), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("the model's name 'model\\xff'")));
  }
  {
    Graph g = TwoInputs();
    g.ops.push_back(MakeOp("caf\xc3\xa9", "Relu", {"x"}, {"a_out"}));
    g.outputs.push_back("a_out");
    EXPECT_THAT(ValidateGraph(&g), IsOk());
  }
}

TEST(Validate, DuplicateNames_Rejected) {
  Graph g = TwoInputs();
  g.ops.push_back(MakeOp("a", "Relu", {"x"}, {"y"}));
  g.ops.push_back(MakeOp("a", "Relu", {"x"}, {"z"}));
  EXPECT_THAT(ValidateGraph(&g),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("op name 'a' is used twice")));
  Graph h = TwoInputs();
  h.ops.push_back(MakeOp("a", "Relu", {"x"}, {"y"}));
  h.ops.push_back(MakeOp("b", "Relu", {"x"}, {"y"}));
  EXPECT_THAT(ValidateGraph(&h), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("produced by both 'a' and 'b'")));
  Graph k = TwoInputs();
  EXPECT_THAT(k.AddTensor({"x", DType::kF32, Shape()}), StatusIs(absl::StatusCode::kAlreadyExists));
}

TEST(Validate, UnknownOpTypes_AllListed) {
  Graph g = TwoInputs();
  g.ops.push_back(MakeOp("a", "Frobnicate", {"x"}, {"y"}));
  g.ops.push_back(MakeOp("b", "Defrobnicate", {"y"}, {"z"}));
  EXPECT_THAT(ValidateGraph(&g), StatusIs(absl::StatusCode::kInvalidArgument,
                                          AllOf(HasSubstr("Frobnicate (op 'a')"),
                                                HasSubstr("Defrobnicate (op 'b')"))));
}

TEST(Validate, DtypeAndShapeMismatches_NameTheOp) {
  Graph g = TwoInputs();
  g.ops.push_back(MakeOp("mix", "Add", {"x", "i"}, {"y"}));
  EXPECT_THAT(ValidateGraph(&g), StatusIs(absl::StatusCode::kInvalidArgument,
                                          AllOf(HasSubstr("'mix'"), HasSubstr("i64"))));
  Graph h = TwoInputs();
  ASSERT_THAT(GraphBuilder(&h).AddConstant("c", Tensor::FromF32({4}, {1, 2, 3, 4})), IsOk());
  h.ops.push_back(MakeOp("add", "Add", {"x", "c"}, {"y"}));
  EXPECT_THAT(ValidateGraph(&h),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'add'"), HasSubstr("do not broadcast"))));
  Graph k = TwoInputs();
  k.ops.push_back(MakeOp("r", "Relu", {"x"}, {"y"}));
  ASSERT_THAT(k.AddTensor({"y", DType::kF32, Shape({Dim::Batch(), Dim::Fixed(4)})}), IsOk());
  EXPECT_THAT(ValidateGraph(&k), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("but the graph declares f32[B,4]")));
}

TEST(Validate, SoftmaxAlongTheBatch_Rejected) {
  for (const char* type : {"Softmax", "LogSoftmax"}) {
    Graph g = TwoInputs();
    Op op = MakeOp("sm", type, {"x"}, {"y"});
    op.attrs.SetInt("axis", 0);
    g.ops.push_back(op);
    EXPECT_THAT(ValidateGraph(&g),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("'sm'"), HasSubstr("softmax along the batch"))));
    Graph h = TwoInputs();
    h.ops.push_back(MakeOp("sm", type, {"x"}, {"y"}));  // the last axis
    EXPECT_THAT(ValidateGraph(&h), IsOk());
  }
}

TEST(Validate, WrongArity_Rejected) {
  Graph g = TwoInputs();
  g.ops.push_back(MakeOp("m", "MatMul", {"x"}, {"y"}));
  EXPECT_THAT(ValidateGraph(&g),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("has 1 inputs; expected 2")));
}

TEST(Validate, NegativeAndOverflowingDims_Rejected) {
  quilt::v1::TrainingGraph p;
  auto* t = p.add_tensors();
  t->set_name("x");
  t->set_dtype(quilt::v1::DATA_TYPE_FLOAT32);
  t->mutable_shape()->add_dims()->set_size(-3);
  EXPECT_THAT(Graph::FromProto(p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("negative dimension")));
  t->mutable_shape()->mutable_dims(0)->set_size(int64_t{1} << 31);
  t->mutable_shape()->add_dims()->set_size(int64_t{1} << 31);
  p.add_inputs("x");
  auto g = Graph::FromProto(p);
  ASSERT_THAT(g, IsOk());
  EXPECT_THAT(ValidateGraph(&*g),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("more than 2^40 elements")));
}

// A gradient op's attributes and inputs must describe the forward op they
// differentiate: its kernel loops over the groups, windows and axes they
// give (a group of 2^62 would loop for ever, an axis past the rank read
// out of bounds).
TEST(Validate, GradientOpsThatDisagreeWithTheirForwardShapes_Rejected) {
  const Shape x({Dim::Batch(), Dim::Fixed(4), Dim::Fixed(8), Dim::Fixed(8)});
  auto graph = [&](const std::string& type, const Shape& dy, const std::string& second,
                   Attrs attrs) {
    Graph g;
    GraphBuilder b(&g);
    EXPECT_THAT(b.AddInput("dy", DType::kF32, dy), IsOk());
    EXPECT_THAT(b.AddInput("x", DType::kF32, x), IsOk());
    EXPECT_THAT(b.AddInput("w", DType::kF32, Shape::Fixed({8, 4, 3, 3})), IsOk());
    EncodeShape(&attrs, "input_shape", x);
    Op op = MakeOp("g", type, {"dy"}, {"dx"});
    if (!second.empty()) op.inputs.push_back(second);
    op.attrs = std::move(attrs);
    g.ops.push_back(std::move(op));
    return g;
  };
  const Shape conv_y({Dim::Batch(), Dim::Fixed(8), Dim::Fixed(6), Dim::Fixed(6)});
  Graph conv = graph("ConvGradInput", conv_y, "w", Attrs());
  EXPECT_THAT(ValidateGraph(&conv), IsOk());
  Attrs groups;
  groups.SetInt("group", int64_t{1} << 62);
  conv = graph("ConvGradInput", conv_y, "w", groups);
  EXPECT_THAT(ValidateGraph(&conv),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'g' (ConvGradInput)"), HasSubstr("do not agree"))));
  conv = graph("ConvGradInput", Shape({Dim::Batch(), Dim::Fixed(8), Dim::Fixed(5), Dim::Fixed(5)}),
               "w", Attrs());
  EXPECT_THAT(ValidateGraph(&conv),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the gradient [B,8,5,5] is not the shape [B,8,6,6]")));

  Attrs window;
  window.SetInts("kernel_shape", {2, 2});
  window.SetInts("strides", {2, 2});
  const Shape pool_y({Dim::Batch(), Dim::Fixed(4), Dim::Fixed(4), Dim::Fixed(4)});
  Graph pool = graph("MaxPoolGrad", pool_y, "x", window);
  EXPECT_THAT(ValidateGraph(&pool), IsOk());
  Attrs padded = window;
  padded.SetInts("pads", {int64_t{1} << 62, 0, 0, 0});
  pool = graph("AveragePoolGrad", pool_y, "", padded);
  EXPECT_THAT(ValidateGraph(&pool), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("pads must be smaller than the kernel")));
  pool = graph("MaxPoolGrad", pool_y, "dy", window);
  EXPECT_THAT(ValidateGraph(&pool), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("the input [B,4,4,4] is not [B,4,8,8]")));

  Attrs axes;
  axes.SetInts("axes", {2, 3});
  axes.SetInt("keepdims", 0);
  Graph reduce = graph("ReduceGrad", Shape({Dim::Batch(), Dim::Fixed(4)}), "", axes);
  EXPECT_THAT(ValidateGraph(&reduce), IsOk());
  for (int64_t axis : {int64_t{4}, int64_t{1} << 62, int64_t{1}}) {
    Attrs bad = axes;
    bad.SetInts("axes", {axis, 3});
    reduce = graph("ReduceGrad", Shape({Dim::Batch(), Dim::Fixed(4)}), "", bad);
    EXPECT_THAT(ValidateGraph(&reduce),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'g' (ReduceGrad)")))
        << axis;
  }
}

TEST(Validate, ParameterValueMismatch_Rejected) {
  Graph g = TwoInputs();
  GraphBuilder b(&g);
  ASSERT_THAT(b.AddParameterValue("w", Tensor::FromF32({2}, {1, 2})), IsOk());
  g.MutableTensor("w")->shape = Shape::Fixed({3});
  EXPECT_THAT(ValidateGraph(&g), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("parameter 'w' has a value of f32[2]")));
}

TEST(GraphProto, ParameterEntriesMatchTheParameterTensors) {
  auto g = zoo::BuildZooModel("mlp");
  ASSERT_THAT(g, IsOk());
  const quilt::v1::TrainingGraph good = g->ToProto();
  ASSERT_GE(good.parameters_size(), 2);
  const std::string first = good.parameters(0).tensor();

  quilt::v1::TrainingGraph missing = good;  // a parameter tensor without its entry
  missing.mutable_parameters()->erase(missing.mutable_parameters()->begin());
  EXPECT_THAT(
      Graph::FromProto(missing),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("tensor '" + first + "' is a parameter, but no parameters entry")));

  quilt::v1::TrainingGraph renamed = good;  // an entry of no tensor
  renamed.mutable_parameters(1)->set_tensor("nope");
  EXPECT_THAT(Graph::FromProto(renamed),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a parameters entry names 'nope', which is no tensor")));

  quilt::v1::TrainingGraph unknown_kind = good;
  auto* init = unknown_kind.mutable_parameters(0)->mutable_initializer();
  unknown_kind.mutable_parameters(0)->clear_value();
  init->set_kind(static_cast<quilt::v1::Initializer::Kind>(99));
  EXPECT_THAT(Graph::FromProto(unknown_kind), StatusIs(absl::StatusCode::kInvalidArgument,
                                                       HasSubstr("unknown initializer kind 99")));
  EXPECT_THAT(Graph::FromProto(good), IsOk());
}

TEST(GraphProto, RoundTripIsLossless) {
  for (const char* name : {"cnn", "transformer", "resnet50"}) {
    auto g = zoo::BuildZooModel(name);
    ASSERT_THAT(g, IsOk());
    const quilt::v1::TrainingGraph first = g->ToProto();
    auto back = Graph::FromProto(first);
    ASSERT_THAT(back, IsOk());
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(first, back->ToProto())) << name;
    EXPECT_THAT(ValidateGraph(&*back), IsOk());
    EXPECT_EQ(back->ParameterCount(), g->ParameterCount());
  }
}

// Read for its structure, a graph has every op, tensor, input and label
// of the whole one, and none of its values.
TEST(GraphProto, StructureReadLeavesTheValuesOut) {
  auto g = zoo::BuildZooModel("transformer");
  ASSERT_THAT(g, IsOk());
  ASSERT_FALSE(g->constants.empty());
  ASSERT_FALSE(g->parameters.empty());
  ParameterSpec& first = g->parameters.front();
  std::vector<int64_t> dims;
  for (const Dim& d : g->FindTensor(first.tensor)->shape.dims()) dims.push_back(d.value);
  absl::StatusOr<Tensor> zeros = Tensor::Zeros(DType::kF32, dims);
  ASSERT_THAT(zeros, IsOk());
  first.value = *zeros;
  const quilt::v1::TrainingGraph proto = g->ToProto();
  ASSERT_TRUE(proto.parameters(0).has_value());
  auto whole = Graph::FromProto(proto);
  auto structure = Graph::FromProto(proto, Graph::Read::kStructure);
  ASSERT_THAT(whole, IsOk());
  ASSERT_THAT(structure, IsOk());
  EXPECT_TRUE(whole->parameters.front().value.has_value());
  EXPECT_FALSE(structure->parameters.front().value.has_value());
  EXPECT_FALSE(whole->constants.empty());
  EXPECT_TRUE(structure->constants.empty());
  ASSERT_EQ(structure->ops.size(), whole->ops.size());
  for (size_t i = 0; i < whole->ops.size(); ++i) {
    EXPECT_EQ(structure->ops[i].name, whole->ops[i].name);
    EXPECT_EQ(structure->ops[i].inputs, whole->ops[i].inputs);
  }
  ASSERT_EQ(structure->tensors().size(), whole->tensors().size());
  for (const TensorInfo& t : whole->tensors()) {
    const TensorInfo* s = structure->FindTensor(t.name);
    ASSERT_NE(s, nullptr) << t.name;
    EXPECT_EQ(s->shape, t.shape) << t.name;
  }
  EXPECT_EQ(structure->inputs, whole->inputs);
  EXPECT_EQ(structure->labels, whole->labels);
  EXPECT_EQ(structure->parameters.size(), whole->parameters.size());
}

}  // namespace
}  // namespace quilt
