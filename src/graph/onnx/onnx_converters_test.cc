// ONNX converters on small graphs built by hand: Pad and Split of newer
// opsets, folds of constants (Mod, ReduceProd, broadcasting arithmetic,
// ScatterND), Identity-merged weights, shared or apart by the export's
// mode, logs of sigmoids, and the batch size used as a value.
#include <cmath>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "src/common/status_matchers.h"
#include "src/graph/onnx/onnx_test_graphs.h"

namespace quilt {
namespace {

using testing::AddFloatConstant;
using testing::AddNode;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::Import;
using testing::SetDynamicBatch;
using testing::Tiny;

TEST(OnnxImport, PadWithAxes_PadsTheListedAxesOnly) {
  // Opset 18: y [2, 3] padded by 1 before and 2 after on axis 1 (as -1).
  onnx::ModelProto m = Tiny(18);
  auto* g = m.mutable_graph();
  for (const auto& [name, v] : {std::pair{"pads", std::vector<int64_t>{1, 2}},
                                std::pair{"axes", std::vector<int64_t>{-1}}}) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) t->add_int64_data(x);
  }
  auto* n = g->add_node();
  n->set_op_type("Pad");
  for (const char* in : {"y", "pads", "", "axes"}) n->add_input(in);
  n->add_output("z");
  g->mutable_output(0)->set_name("z");
  absl::StatusOr<Graph> imported = Import(m.SerializeAsString());
  ASSERT_THAT(imported, IsOk());
  EXPECT_EQ(imported->FindTensor(imported->outputs[0])->shape.ToString(), "[B,6]");
  const Op* pad = nullptr;
  for (const Op& op : imported->ops) pad = op.type == "Pad" ? &op : pad;
  ASSERT_NE(pad, nullptr);
  EXPECT_EQ(pad->attrs.Ints("pads"), (std::vector<int64_t>{0, 1, 0, 2}));
}

TEST(OnnxImport, NearestDownsamplingByWholeFactors_IsAStridedSlice) {
  // x [B, 1, 8, 8] by 1/4: rows 4·i + 3/2 rounded as nearest_mode says
  // (half_pixel), or 4·i (asymmetric).
  struct Case {
    const char* coords;
    const char* rounding;
    int64_t first;
  };
  for (const Case& c :
       {Case{"half_pixel", "round_prefer_floor", 1}, Case{"half_pixel", "round_prefer_ceil", 2},
        Case{"asymmetric", "floor", 0}}) {
    onnx::ModelProto m = testing::WithBatchedInput(14, {1, 8, 8});
    auto* g = m.mutable_graph();
    AddFloatConstant(g, "scales", {4}, {1, 1, 0.25f, 0.25f});
    auto* n = AddNode(g, "Resize", {"x", "", "scales"}, "y");
    for (const auto& [name, value] :
         {std::pair{"mode", "nearest"}, std::pair{"coordinate_transformation_mode", c.coords},
          std::pair{"nearest_mode", c.rounding}}) {
      auto* a = n->add_attribute();
      a->set_name(name);
      a->set_type(onnx::AttributeProto::STRING);
      a->set_s(value);
    }
    g->add_output()->set_name("y");
    absl::StatusOr<Graph> imported = Import(m.SerializeAsString());
    ASSERT_THAT(imported, IsOk()) << c.coords << " " << c.rounding;
    const Op* slice = nullptr;
    for (const Op& op : imported->ops) slice = op.type == "Slice" ? &op : slice;
    ASSERT_NE(slice, nullptr);
    EXPECT_EQ(slice->attrs.Ints("starts"), (std::vector<int64_t>{c.first, c.first})) << c.coords;
    EXPECT_EQ(slice->attrs.Ints("steps"), (std::vector<int64_t>{4, 4}));
    EXPECT_EQ(imported->FindTensor(imported->outputs[0])->shape.ToString(), "[B,1,2,2]");
  }
}

TEST(OnnxImport, LogOfASigmoid_IsAStableSoftplus) {
  // log σ(y), log(1 − σ(y)) (binary cross-entropy with logits exports
  // both) and log(1 − y): only the last is a plain Log of its input; the
  // others read no sigmoid (which rounds to 0 or 1 for large |y|).
  onnx::ModelProto m = Tiny(14);
  auto* g = m.mutable_graph();
  AddFloatConstant(g, "one", {}, {1.0f});
  auto node = [&](const std::string& type, const std::vector<std::string>& in,
                  const std::string& out) { return AddNode(g, type, in, out); };
  node("Sigmoid", {"y"}, "s");
  node("Log", {"s"}, "log_s");
  node("Sub", {"one", "s"}, "one_minus_s");
  node("Log", {"one_minus_s"}, "log_one_minus_s");
  node("Sub", {"one", "y"}, "one_minus_y");
  node("Log", {"one_minus_y"}, "log_one_minus_y");
  node("Add", {"log_s", "log_one_minus_s"}, "sum");
  node("Add", {"sum", "log_one_minus_y"}, "out");
  g->mutable_output(0)->set_name("out");
  absl::StatusOr<Graph> imported = Import(m.SerializeAsString());
  ASSERT_THAT(imported, IsOk());
  const auto producers = imported->Producers();
  int plain_logs = 0;
  for (const Op& op : imported->ops) {
    if (op.type != "Log") continue;
    auto p = producers.find(op.inputs[0]);
    ASSERT_NE(p, producers.end());
    const Op& in = imported->ops[p->second];
    EXPECT_NE(in.type, "Sigmoid") << op.name;
    if (in.type == "Sub") {
      ++plain_logs;
      auto y = producers.find(in.inputs[1]);
      ASSERT_NE(y, producers.end());
      EXPECT_EQ(imported->ops[y->second].type, "Relu");  // log(1 − y) as it is
    }
  }
  EXPECT_EQ(plain_logs, 1);
  // Each stable form is a negated softplus: the log of 1 + exp(−|·|).
  int negs_of_softplus = 0;
  for (const Op& op : imported->ops) {
    if (op.type == "Neg" && absl::StrContains(op.inputs[0], "softplus")) ++negs_of_softplus;
  }
  EXPECT_EQ(negs_of_softplus, 2);
}

// x [batch, 3] (a dynamic batch) → Relu → y; `value` computed from
// Shape(y) by `nodes` (type, inputs, output), and out = ReduceSum(y) ·
// value, the graph's output.
onnx::ModelProto BatchValue(
    const std::vector<std::tuple<std::string, std::vector<std::string>, std::string>>& nodes) {
  onnx::ModelProto m = Tiny(14);
  auto* g = m.mutable_graph();
  SetDynamicBatch(&m);
  auto* shape = g->add_node();
  shape->set_op_type("Shape");
  shape->add_input("y");
  shape->add_output("shape");
  AddFloatConstant(g, "one", {}, {1.0f});
  auto* zero = g->add_initializer();
  zero->set_name("zero");
  zero->set_data_type(onnx::TensorProto::INT64);
  zero->add_int64_data(0);
  auto* one_i = g->add_initializer();
  one_i->set_name("one_i");
  one_i->set_data_type(onnx::TensorProto::INT64);
  one_i->add_int64_data(1);
  AddFloatConstant(g, "two", {}, {2.0f});
  for (const auto& [type, ins, out] : nodes) {
    auto* n = g->add_node();
    n->set_op_type(type);
    n->set_name(out);
    for (const std::string& in : ins) n->add_input(in);
    n->add_output(out);
    if (type == "Cast") {
      auto* to = n->add_attribute();
      to->set_name("to");
      to->set_type(onnx::AttributeProto::INT);
      to->set_i(onnx::TensorProto::FLOAT);
    }
  }
  auto* sum = g->add_node();
  sum->set_op_type("ReduceSum");
  sum->add_input("y");
  sum->add_output("sum");
  auto* mul = g->add_node();
  mul->set_op_type("Mul");
  mul->add_input("sum");
  mul->add_input("value");
  mul->add_output("out");
  g->mutable_output(0)->set_name("out");
  return m;
}

TEST(OnnxImport, TheBatchSizeAsAValue_IsComputedFromTheStepsBatch) {
  // (x.shape[0] − 1) / 2, as data: a BatchAffine op of a = ½, c = −½, not
  // the placeholder batch the import folds shapes with.
  absl::StatusOr<Graph> g = Import(BatchValue({{"Gather", {"shape", "zero"}, "b"},
                                               {"Cast", {"b"}, "bf"},
                                               {"Sub", {"bf", "one"}, "b1"},
                                               {"Div", {"b1", "two"}, "value"}})
                                       .SerializeAsString());
  ASSERT_THAT(g, IsOk());
  const Op* affine = nullptr;
  for (const Op& op : g->ops) affine = op.type == "BatchAffine" ? &op : affine;
  ASSERT_NE(affine, nullptr);
  EXPECT_EQ(affine->attrs.Floats("a"), std::vector<double>{0.5});
  EXPECT_EQ(affine->attrs.Floats("c"), std::vector<double>{-0.5});
  EXPECT_EQ(g->FindTensor(affine->outputs[0])->dtype, DType::kF32);

  // B · B is not followed: refused by name, not folded.
  EXPECT_THAT(Import(BatchValue({{"Gather", {"shape", "zero"}, "b"},
                                 {"Cast", {"b"}, "bf"},
                                 {"Mul", {"bf", "bf"}, "value"}})
                         .SerializeAsString()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'value' is computed from the batch size"),
                             HasSubstr("does not follow"))));
  // The feature count (Shape's element 1) is a plain constant.
  absl::StatusOr<Graph> features =
      Import(BatchValue({{"Gather", {"shape", "one_i"}, "d"}, {"Cast", {"d"}, "value"}})
                 .SerializeAsString());
  ASSERT_THAT(features, IsOk());
  for (const Op& op : features->ops) EXPECT_NE(op.type, "BatchAffine");
}

TEST(OnnxImport, AFixedBatchExportsSquareConstant_IsNotTakenForTheBatch) {
  // x [4, 4, 4] exported at batch 4 plus ConstantOfShape([4, 4]): a causal
  // mask's [T, T] whose T equals the batch; it is a constant, not [B, 4].
  onnx::ModelProto m = Tiny(14);
  auto* g = m.mutable_graph();
  auto* shape = g->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
  shape->mutable_dim(0)->set_dim_value(4);
  shape->mutable_dim(1)->set_dim_value(4);
  shape->add_dim()->set_dim_value(4);
  auto* dims = g->add_initializer();
  dims->set_name("dims");
  dims->set_data_type(onnx::TensorProto::INT64);
  dims->add_dims(2);
  dims->add_int64_data(4);
  dims->add_int64_data(4);
  auto* c = g->add_node();
  c->set_op_type("ConstantOfShape");
  c->add_input("dims");
  c->add_output("mask");
  auto* add = g->add_node();
  add->set_op_type("Add");
  add->add_input("y");
  add->add_input("mask");
  add->add_output("z");
  g->mutable_output(0)->set_name("z");
  absl::StatusOr<Graph> imported = Import(m.SerializeAsString());
  ASSERT_THAT(imported, IsOk());
  EXPECT_EQ(imported->FindTensor(imported->outputs[0])->shape.ToString(), "[B,4,4]");
}

TEST(OnnxImport, SplitByNumOutputs_TheLastPartIsSmaller) {
  // Opset 18: y [B, 3] in 2 parts along axis 1 is [B, 2] and [B, 1].
  onnx::ModelProto m = Tiny(18);
  auto* g = m.mutable_graph();
  auto* n = g->add_node();
  n->set_op_type("Split");
  n->add_input("y");
  n->add_output("p0");
  n->add_output("p1");
  for (const auto& [name, v] : {std::pair{"axis", 1}, std::pair{"num_outputs", 2}}) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  g->mutable_output(0)->set_name("p0");
  g->add_output()->set_name("p1");
  absl::StatusOr<Graph> imported = Import(m.SerializeAsString());
  ASSERT_THAT(imported, IsOk());
  ASSERT_EQ(imported->outputs.size(), 2u);
  EXPECT_EQ(imported->FindTensor(imported->outputs[0])->shape.ToString(), "[B,2]");
  EXPECT_EQ(imported->FindTensor(imported->outputs[1])->shape.ToString(), "[B,1]");
  // More parts than the dim has: an empty one, refused.
  n->mutable_attribute(1)->set_i(4);
  n->add_output("p2");
  n->add_output("p3");
  EXPECT_THAT(Import(m.SerializeAsString()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("leaves an empty one")));
}

TEST(OnnxImport, TileBeyondWhatAGraphHolds_IsRefusedNotAllocated) {
  // y [B, 3] tiled along dim 1.
  auto model = [](int64_t repeats) {
    onnx::ModelProto m = Tiny(13);
    SetDynamicBatch(&m);
    auto* g = m.mutable_graph();
    testing::AddInt64Constant(g, "repeats", {1, repeats});
    AddNode(g, "Tile", {"y", "repeats"}, "t");
    g->mutable_output(0)->set_name("t");
    return m.SerializeAsString();
  };
  absl::StatusOr<Graph> tiled = Import(model(3));
  ASSERT_THAT(tiled, IsOk());
  EXPECT_EQ(tiled->FindTensor(tiled->outputs[0])->shape.ToString(), "[B,9]");
  for (int64_t r : {int64_t{1} << 20, int64_t{1} << 61}) {
    EXPECT_THAT(Import(model(r)), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("are more than Quilt takes")))
        << r;
  }
}

TEST(OnnxImport, AWeightHoldingNaN_IsRefusedNamingIt) {
  onnx::ModelProto m = Tiny(13);
  auto* g = m.mutable_graph();
  auto* w = g->add_initializer();
  w->set_name("bias");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(3);
  for (float v : {0.5f, std::nanf(""), 1.0f}) w->add_float_data(v);
  AddNode(g, "Add", {"y", "bias"}, "z");
  g->mutable_output(0)->set_name("z");
  EXPECT_THAT(Import(m.SerializeAsString()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("initializer 'bias' holds NaN (element 1 of 3)")));
  w->set_float_data(1, 2.0f);
  EXPECT_THAT(Import(m.SerializeAsString()), IsOk());
}

TEST(OnnxImport, AnInputDimOfZeroOrLess_IsNamedAsSuch) {
  for (int64_t size : {int64_t{0}, int64_t{-5}}) {
    onnx::ModelProto m = testing::WithBatchedInput(13, {size});
    AddNode(m.mutable_graph(), "Relu", {"x"}, "y");
    m.mutable_graph()->add_output()->set_name("y");
    EXPECT_THAT(Import(m.SerializeAsString()),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("input 'x' has dimension 1 of ", size))));
  }
}

TEST(OnnxImport, ModAndReduceProdOfConstants_Fold) {
  // y + float(Mod(a, b)) * ReduceProd(c): Python's % (the divisor's sign)
  // by default, C's fmod with fmod=1.
  for (int fmod : {0, 1}) {
    onnx::ModelProto m = Tiny(14);
    auto* g = m.mutable_graph();
    auto ints = [&](const std::string& name, std::vector<int64_t> v) {
      auto* t = g->add_initializer();
      t->set_name(name);
      t->set_data_type(onnx::TensorProto::INT64);
      t->add_dims(static_cast<int64_t>(v.size()));
      for (int64_t x : v) t->add_int64_data(x);
    };
    ints("a", {-7, 7, 8});
    ints("b", {3, -3, 3});
    ints("c", {2, 1, 2});
    auto node = [&](const std::string& type, const std::vector<std::string>& in,
                    const std::string& out) { return AddNode(g, type, in, out); };
    auto* mod = node("Mod", {"a", "b"}, "r");
    auto* attr = mod->add_attribute();
    attr->set_name("fmod");
    attr->set_type(onnx::AttributeProto::INT);
    attr->set_i(fmod);
    node("ReduceProd", {"c"}, "p");
    node("Mul", {"r", "p"}, "rp");
    auto* cast = node("Cast", {"rp"}, "rf");
    auto* to = cast->add_attribute();
    to->set_name("to");
    to->set_type(onnx::AttributeProto::INT);
    to->set_i(onnx::TensorProto::FLOAT);
    node("Add", {"y", "rf"}, "z");
    g->mutable_output(0)->set_name("z");
    absl::StatusOr<Graph> imported = Import(m.SerializeAsString());
    ASSERT_THAT(imported, IsOk()) << fmod;
    const std::vector<float> want =
        fmod ? std::vector<float>{-4, 4, 8} : std::vector<float>{8, -8, 8};
    bool found = false;
    for (const auto& [name, t] : imported->constants) {
      found = found || (t.dtype() == DType::kF32 && t.numel() == 3 &&
                        std::vector<float>(t.f32(), t.f32() + 3) == want);
    }
    EXPECT_TRUE(found) << "fmod=" << fmod;
  }
}

TEST(OnnxImport, ArithmeticOfConstants_Broadcasts) {
  // y · (a + b) with Constant nodes a [3, 1] and b [3]: a + b is [3, 3]
  // (it was taken element by element, as [3, 1], when the counts matched).
  onnx::ModelProto m = Tiny(14);
  auto* g = m.mutable_graph();
  AddFloatConstant(g, "a", {3, 1}, {0, 1, 2});
  AddFloatConstant(g, "b", {3}, {0, 10, 20});
  auto node = [&](const std::string& type, const std::vector<std::string>& in,
                  const std::string& out) { return AddNode(g, type, in, out); };
  node("Add", {"a", "b"}, "ab");
  node("MatMul", {"y", "ab"}, "z");
  g->mutable_output(0)->set_name("z");
  absl::StatusOr<Graph> imported = Import(m.SerializeAsString());
  ASSERT_THAT(imported, IsOk());
  const std::vector<float> want = {0, 10, 20, 1, 11, 21, 2, 12, 22};
  bool found = false;
  for (const auto& [name, t] : imported->constants) {
    found = found || (t.dtype() == DType::kF32 && t.dims() == std::vector<int64_t>{3, 3} &&
                      std::vector<float>(t.f32(), t.f32() + 9) == want);
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(imported->FindTensor(imported->outputs[0])->shape.ToString(), "[B,3]");
}

TEST(OnnxImport, IdentitiesOfAFoldedWeight_AreOneParameterOnlyInATrainingModeExport) {
  // z = (y · W) · W2 + a.bias + c.bias with W2 = Identity(W), W an
  // exporter-folded [3, 3] (a layer applied twice). A training-mode export
  // leaves equal initializers apart (a.bias and c.bias both zeros): W2 is
  // W. An eval-mode export merges them (c.bias = Identity(a.bias)); one that
  // shows neither (the biases differ) cannot say: the copies train apart
  // and a note names them.
  enum Mode { kTraining, kEval, kUnknown };
  for (Mode mode : {kTraining, kEval, kUnknown}) {
    onnx::ModelProto m = Tiny(14);
    auto* g = m.mutable_graph();
    auto init = [&](const std::string& name, std::vector<int64_t> dims, float v, float step) {
      auto* t = g->add_initializer();
      t->set_name(name);
      t->set_data_type(onnx::TensorProto::FLOAT);
      int64_t n = 1;
      for (int64_t d : dims) {
        t->add_dims(d);
        n *= d;
      }
      for (int64_t i = 0; i < n; ++i) t->add_float_data(v + step * static_cast<float>(i));
    };
    init("onnx::MatMul_1", {3, 3}, 0.5f, 0.1f);
    init("a.bias", {3}, 0.0f, 0.0f);
    if (mode != kEval) init("c.bias", {3}, mode == kTraining ? 0.0f : 1.0f, 0.0f);
    auto node = [&](const std::string& type, const std::vector<std::string>& in,
                    const std::string& out) { return AddNode(g, type, in, out); };
    node("Identity", {"onnx::MatMul_1"}, "onnx::MatMul_2");
    if (mode == kEval) node("Identity", {"a.bias"}, "c.bias");
    node("MatMul", {"y", "onnx::MatMul_1"}, "h");
    node("MatMul", {"h", "onnx::MatMul_2"}, "h2");
    node("Add", {"h2", "a.bias"}, "h3");
    node("Add", {"h3", "c.bias"}, "z");
    g->mutable_output(0)->set_name("z");
    absl::StatusOr<Graph> imported = Import(m.SerializeAsString());
    ASSERT_THAT(imported, IsOk()) << mode;
    int weights = 0;
    for (const ParameterSpec& p : imported->parameters) {
      weights += p.value.has_value() && p.value->numel() == 9;
    }
    EXPECT_EQ(weights, mode == kTraining ? 1 : 2) << mode;
    EXPECT_EQ(imported->import_notes.size(), mode == kTraining ? 0u : 1u) << mode;
    if (mode != kTraining && !imported->import_notes.empty()) {
      EXPECT_THAT(imported->import_notes[0], HasSubstr("onnx::MatMul_2 (of onnx::MatMul_1)"));
    }
  }
}

TEST(OnnxImport, ScatterNDOfConstants_FoldsAndOfDataIsRefused) {
  // y + ScatterND(data, indices, updates) with data and updates Constant
  // nodes: a slice assignment (negative index included), then with
  // reduction "add", where repeated indices accumulate.
  struct Case {
    std::string reduction;
    std::vector<float> data;
    std::vector<int64_t> indices;
    std::vector<float> updates;
    std::vector<float> want;
  };
  for (const Case& c : {Case{"none", {0, 0, 0}, {2, -3}, {5, 7}, {7, 0, 5}},
                        Case{"add", {1, 1, 1}, {0, 0, 2}, {1, 2, 3}, {4, 1, 4}}}) {
    onnx::ModelProto m = Tiny(16);
    auto* g = m.mutable_graph();
    AddFloatConstant(g, "data", {static_cast<int64_t>(c.data.size())}, c.data);
    AddFloatConstant(g, "updates", {static_cast<int64_t>(c.updates.size())}, c.updates);
    auto* idx = g->add_initializer();
    idx->set_name("indices");
    idx->set_data_type(onnx::TensorProto::INT64);
    idx->add_dims(static_cast<int64_t>(c.indices.size()));
    idx->add_dims(1);
    for (int64_t x : c.indices) idx->add_int64_data(x);
    auto* scatter = g->add_node();
    scatter->set_op_type("ScatterND");
    for (const char* in : {"data", "indices", "updates"}) scatter->add_input(in);
    scatter->add_output("s");
    auto* r = scatter->add_attribute();
    r->set_name("reduction");
    r->set_type(onnx::AttributeProto::STRING);
    r->set_s(c.reduction);
    auto* add = g->add_node();
    add->set_op_type("Add");
    add->add_input("y");
    add->add_input("s");
    add->add_output("z");
    g->mutable_output(0)->set_name("z");
    absl::StatusOr<Graph> imported = Import(m.SerializeAsString());
    ASSERT_THAT(imported, IsOk()) << c.reduction;
    bool found = false;
    for (const auto& [name, t] : imported->constants) {
      found = found || (t.dtype() == DType::kF32 && t.numel() == 3 &&
                        std::vector<float>(t.f32(), t.f32() + 3) == c.want);
    }
    EXPECT_TRUE(found) << c.reduction;
    // The same into the model's data: refused, naming the input.
    scatter->set_input(0, "y");
    EXPECT_THAT(Import(m.SerializeAsString()),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("ScatterND: input 0 ('y')"),
                               HasSubstr("only a ScatterND of constants"))));
  }
}

}  // namespace
}  // namespace quilt
