// Import of opsets 9–12 on small graphs built by hand: Softmax over the
// trailing dims flattened (before 13), Dropout that trains without a mode
// input (before 12) and marks a training export, Clip's bounds, Pad's
// value and Slice's ranges as attributes. PyTorch's own exports at these
// opsets are fixtures trained against its losses (train_local_test).
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "src/common/status_matchers.h"
#include "src/graph/onnx/onnx_test_graphs.h"

namespace quilt {
namespace {

using testing::AddNode;
using ::testing::HasSubstr;
using testing::Import;

// x [batch, 3, 4] (a dynamic batch) at `opset`; nodes are added after.
onnx::ModelProto Model(int64_t opset) { return testing::WithBatchedInput(opset, {3, 4}); }

void SetInt(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

void SetFloat(onnx::NodeProto* n, const std::string& name, float v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

void SetInts(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

absl::StatusOr<Graph> ImportWithOutput(onnx::ModelProto m, const std::string& out) {
  m.mutable_graph()->add_output()->set_name(out);
  return Import(m.SerializeAsString());
}

std::vector<const Op*> OpsOf(const Graph& g, const std::string& type) {
  std::vector<const Op*> found;
  for (const Op& op : g.ops) {
    if (op.type == type) found.push_back(&op);
  }
  return found;
}

TEST(LegacyOpsetImport, SoftmaxBefore13_NormalizesOverTheTrailingDimsFlattened) {
  for (const std::string type : {"Softmax", "LogSoftmax"}) {
    onnx::ModelProto m = Model(11);
    SetInt(AddNode(m.mutable_graph(), type, {"x"}, "p"), "axis", 1);
    absl::StatusOr<Graph> g = ImportWithOutput(m, "p");
    ASSERT_THAT(g, IsOk()) << type;
    // [B,3,4] as [B,12] rows, normalized over 12, reshaped back.
    std::vector<const Op*> norm = OpsOf(*g, type);
    ASSERT_EQ(norm.size(), 1u);
    EXPECT_EQ(norm[0]->attrs.Int("axis", -5), 1);
    EXPECT_EQ(g->FindTensor(norm[0]->inputs[0])->shape.ToString(), "[B,12]");
    EXPECT_EQ(g->FindTensor(g->outputs[0])->shape.ToString(), "[B,3,4]");
    EXPECT_EQ(OpsOf(*g, "Reshape").size(), 2u);
  }
}

TEST(LegacyOpsetImport, SoftmaxOnItsLastAxisOrFrom13_IsOneSoftmax) {
  // Before 13 by default (axis 1) and at 13 on axis 1: not flattened.
  struct Case {
    int64_t opset;
    int64_t axis;  // -9: no attribute
    int64_t want_axis;
  };
  for (const Case& c : {Case{11, 2, 2}, Case{11, -1, 2}, Case{13, 1, 1}, Case{13, -9, 2}}) {
    onnx::ModelProto m = Model(c.opset);
    auto* n = AddNode(m.mutable_graph(), "Softmax", {"x"}, "p");
    if (c.axis != -9) SetInt(n, "axis", c.axis);
    absl::StatusOr<Graph> g = ImportWithOutput(m, "p");
    ASSERT_THAT(g, IsOk()) << c.opset << " " << c.axis;
    std::vector<const Op*> softmax = OpsOf(*g, "Softmax");
    ASSERT_EQ(softmax.size(), 1u);
    EXPECT_EQ(softmax[0]->attrs.Int("axis", -5), c.want_axis) << c.opset << " " << c.axis;
    EXPECT_TRUE(OpsOf(*g, "Reshape").empty());
  }
}

TEST(LegacyOpsetImport, SoftmaxBefore13OverTheBatch_IsRefused) {
  onnx::ModelProto m = Model(12);
  SetInt(AddNode(m.mutable_graph(), "Softmax", {"x"}, "p"), "axis", 0);
  EXPECT_THAT(ImportWithOutput(m, "p"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("samples would mix")));
}

TEST(LegacyOpsetImport, DropoutBefore12_TrainsAndFrom12WithoutAMode_DoesNot) {
  for (int64_t opset : {9, 11, 12, 13}) {
    onnx::ModelProto m = Model(opset);
    SetFloat(AddNode(m.mutable_graph(), "Dropout", {"x"}, "d"), "ratio", 0.25f);
    absl::StatusOr<Graph> g = ImportWithOutput(m, "d");
    ASSERT_THAT(g, IsOk()) << opset;
    std::vector<const Op*> dropout = OpsOf(*g, "Dropout");
    if (opset < 12) {
      ASSERT_EQ(dropout.size(), 1u) << opset;
      EXPECT_FLOAT_EQ(dropout[0]->attrs.Float("ratio", 0), 0.25f);
    } else {
      EXPECT_TRUE(dropout.empty()) << opset;
    }
  }
}

TEST(LegacyOpsetImport, ADropoutBefore12_MarksATrainingExport) {
  // An exporter-folded weight W used twice, the second use through an
  // Identity (a layer applied twice): one parameter in a training-mode
  // export, which a Dropout of one input says before opset 12.
  for (bool dropout : {true, false}) {
    onnx::ModelProto m = Model(11);
    auto* g = m.mutable_graph();
    auto* w = g->add_initializer();
    w->set_name("onnx::MatMul_1");
    w->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : {4, 4}) w->add_dims(d);
    for (int i = 0; i < 16; ++i) w->add_float_data(0.1f * static_cast<float>(i));
    AddNode(g, "Identity", {"onnx::MatMul_1"}, "onnx::MatMul_2");
    AddNode(g, "MatMul", {"x", "onnx::MatMul_1"}, "h");
    AddNode(g, dropout ? "Dropout" : "Identity", {"h"}, "d");
    AddNode(g, "MatMul", {"d", "onnx::MatMul_2"}, "z");
    absl::StatusOr<Graph> imported = ImportWithOutput(m, "z");
    ASSERT_THAT(imported, IsOk()) << dropout;
    int weights = 0;
    for (const ParameterSpec& p : imported->parameters) {
      weights += p.value.has_value() && p.value->numel() == 16;
    }
    EXPECT_EQ(weights, dropout ? 1 : 2) << dropout;
  }
}

TEST(LegacyOpsetImport, ClipBoundsAndPadValueBefore11_AreAttributes) {
  onnx::ModelProto m = Model(10);
  SetFloat(AddNode(m.mutable_graph(), "Clip", {"x"}, "c"), "min", -0.5f);
  auto* pad = AddNode(m.mutable_graph(), "Pad", {"c"}, "p");
  SetInts(pad, "pads", {0, 0, 1, 0, 0, 2});
  SetFloat(pad, "value", 1.5f);
  absl::StatusOr<Graph> g = ImportWithOutput(m, "p");
  ASSERT_THAT(g, IsOk());
  std::vector<const Op*> clip = OpsOf(*g, "Clip");
  ASSERT_EQ(clip.size(), 1u);
  EXPECT_FLOAT_EQ(clip[0]->attrs.Float("min", 0), -0.5f);
  EXPECT_FALSE(clip[0]->attrs.Has("max"));
  std::vector<const Op*> pads = OpsOf(*g, "Pad");
  ASSERT_EQ(pads.size(), 1u);
  EXPECT_FLOAT_EQ(pads[0]->attrs.Float("value", 0), 1.5f);
  EXPECT_EQ(g->FindTensor(g->outputs[0])->shape.ToString(), "[B,3,7]");
}

TEST(LegacyOpsetImport, SliceBefore10_TakesItsRangesFromAttributes) {
  onnx::ModelProto m = Model(9);
  auto* n = AddNode(m.mutable_graph(), "Slice", {"x"}, "s");
  SetInts(n, "starts", {1, -3});
  SetInts(n, "ends", {3, 100});
  SetInts(n, "axes", {2, 1});
  absl::StatusOr<Graph> g = ImportWithOutput(m, "s");
  ASSERT_THAT(g, IsOk());
  EXPECT_EQ(g->FindTensor(g->outputs[0])->shape.ToString(), "[B,3,2]");
  // From opset 10 the ranges are inputs: attributes alone are not enough.
  m.mutable_opset_import(0)->set_version(10);
  EXPECT_THAT(ImportWithOutput(m, "s"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must be a constant")));
}

}  // namespace
}  // namespace quilt
