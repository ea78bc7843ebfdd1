// ONNX import: the fixtures import with the right parameters and symbolic
// batch; bad files get clear errors; random corruptions never crash.
#include "src/graph/onnx/onnx_import.h"

#include <random>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "src/common/files.h"
#include "src/common/status_matchers.h"
#include "src/graph/autodiff.h"
#include "src/graph/validate.h"
#include "src/testing/subprocess.h"

namespace quilt {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string FixtureBytes(const std::string& name) {
  auto b = ReadFile(testing::RunfilePath("test/fixtures/" + name + "/model.onnx"));
  EXPECT_THAT(b, IsOk());
  return b.ok() ? *b : "";
}

absl::StatusOr<Graph> Import(const std::string& bytes, int64_t batch = 0) {
  OnnxImportOptions o;
  o.source = "m.onnx";
  o.batch = batch;
  return ImportOnnx(bytes, o);
}

TEST(OnnxImport, Mlp_ParametersAndSymbolicBatch) {
  auto g = Import(FixtureBytes("mlp"));
  ASSERT_THAT(g, IsOk());
  EXPECT_EQ(g->ParameterCount(), 20 * 32 + 32 + 32 * 32 + 32 + 32 * 5 + 5);
  ASSERT_EQ(g->inputs.size(), 1u);
  EXPECT_EQ(g->FindTensor("x")->shape.ToString(), "[B,20]");
  ASSERT_EQ(g->outputs.size(), 1u);
  EXPECT_EQ(g->FindTensor(g->outputs[0])->shape.ToString(), "[B,5]");
  EXPECT_EQ(g->reference_batch, 16);
}

TEST(OnnxImport, Transformer_UntiesDeduplicatedParametersAndFreesBatchFromReshapes) {
  auto g = Import(FixtureBytes("transformer"), 4);
  ASSERT_THAT(g, IsOk());
  // PyTorch's parameter count: the exporter shares equal LayerNorm weights
  // through Identity nodes, which must become separate parameters again.
  EXPECT_EQ(g->ParameterCount(), 10695);
  EXPECT_EQ(g->FindTensor(g->outputs[0])->shape.ToString(), "[B,8,7]");
  EXPECT_EQ(g->reference_batch, 4);
  for (const Op& op : g->ops) {
    if (op.type != "Reshape") continue;
    const std::vector<int64_t> t = op.attrs.Ints("shape");
    EXPECT_TRUE(std::find(t.begin(), t.end(), 16) == t.end()) << op.name;
  }
}

TEST(OnnxImport, DynamicBatch_TheGraphDoesNotDependOnTheBatchItIsImportedFor) {
  // An encoder layer (sequence 8) whose shape arithmetic reads the batch,
  // F.pad, and ones(x.shape[0], 1): a batch of 8 (the sequence's length),
  // 1 or 2 (dividing it) was taken for the sequence.
  std::string reference;
  for (int64_t batch : {0, 1, 2, 8, 16}) {
    absl::StatusOr<Graph> g = Import(FixtureBytes("dynamic_encoder"), batch);
    ASSERT_THAT(g.status(), IsOk()) << batch;
    EXPECT_EQ(g->FindTensor(g->outputs[0])->shape.ToString(), "[B,5]") << batch;
    EXPECT_EQ(g->reference_batch, batch > 0 ? batch : 1);
    std::string ops;
    for (const Op& op : g->ops) {
      ops += op.type + "(" + absl::StrJoin(op.inputs, ",") + ")";
      for (const std::string& out : op.outputs) ops += " " + g->FindTensor(out)->shape.ToString();
      ops += "\n";
    }
    if (reference.empty()) reference = ops;
    EXPECT_EQ(ops, reference) << "imported for batch " << batch;
  }
}

TEST(OnnxImport, LossInModel_BecomesTheGraphLossWithALabelInput) {
  auto g = Import(FixtureBytes("mlp_loss_in_model"));
  ASSERT_THAT(g, IsOk());
  EXPECT_EQ(g->loss.type, LossType::kSoftmaxCrossEntropy);
  EXPECT_FALSE(g->loss.output.empty());
  ASSERT_EQ(g->labels.size(), 1u);
  EXPECT_EQ(g->labels[0], "y");
  EXPECT_EQ(g->FindTensor("y")->role, TensorRole::kLabel);
  TrainingOptions o;
  o.optimizer.kind = OptimizerSpec::Kind::kSgd;
  EXPECT_THAT(BuildTrainingGraph(&*g, o), IsOk());
}

// The loss-in-model fixture with `op` (Mul by 2, Identity, or a second
// SoftmaxCrossEntropyLoss) applied to its loss, whose result is the output.
std::string LossFollowedBy(const std::string& op) {
  onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromString(FixtureBytes("mlp_loss_in_model")));
  onnx::GraphProto* g = m.mutable_graph();
  const onnx::NodeProto* sce = nullptr;
  for (const onnx::NodeProto& n : g->node()) {
    if (n.op_type() == "SoftmaxCrossEntropyLoss") sce = &n;
  }
  EXPECT_NE(sce, nullptr);
  onnx::NodeProto next = *sce;  // a copy: another loss of the same scores
  next.set_name("after_loss");
  next.clear_output();
  next.add_output("after");
  if (op == "Mul") {
    onnx::TensorProto* two = g->add_initializer();
    two->set_name("two");
    two->set_data_type(onnx::TensorProto::FLOAT);
    two->add_float_data(2);
    next.clear_input();
    next.add_input(sce->output(0));
    next.add_input("two");
  } else if (op == "Identity") {
    next.clear_input();
    next.add_input(sce->output(0));
  }
  next.set_op_type(op);
  next.clear_attribute();
  if (op == "SoftmaxCrossEntropyLoss") *next.mutable_attribute() = sce->attribute();
  *g->add_node() = next;
  g->mutable_output(0)->set_name("after");
  return m.SerializeAsString();
}

TEST(OnnxImport, ALossTheModelChangesAfterTheCrossEntropy_IsRefusedNotDropped) {
  // Training the cross-entropy alone would drop the factor.
  EXPECT_THAT(Import(LossFollowedBy("Mul")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("output 'after' is computed from the cross-entropy loss"),
                             HasSubstr("(by Mul)"))));
  EXPECT_THAT(
      Import(LossFollowedBy("SoftmaxCrossEntropyLoss")),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("computes 2 cross-entropy losses")));
  // A copy of the loss is the loss.
  absl::StatusOr<Graph> g = Import(LossFollowedBy("Identity"));
  ASSERT_THAT(g, IsOk());
  EXPECT_EQ(g->loss.type, LossType::kSoftmaxCrossEntropy);
}

onnx::ModelProto Tiny(int64_t opset) {
  onnx::ModelProto m;
  m.set_ir_version(7);
  m.add_opset_import()->set_version(opset);
  auto* g = m.mutable_graph();
  auto* in = g->add_input();
  in->set_name("x");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  in->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(2);
  in->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(3);
  auto* n = g->add_node();
  n->set_op_type("Relu");
  n->set_name("relu");
  n->add_input("x");
  n->add_output("y");
  g->add_output()->set_name("y");
  return m;
}

// x [B, 8, 6] → Transpose → [8, B, 6] → Reshape to the exported [8·B, E]
// with E equal to the exported batch → Softmax over E.
onnx::ModelProto SequenceFirstReshape(int64_t export_batch, int64_t e) {
  onnx::ModelProto m;
  m.set_ir_version(7);
  m.add_opset_import()->set_version(14);
  auto* g = m.mutable_graph();
  auto* in = g->add_input();
  in->set_name("x");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : {export_batch, int64_t{8}, e}) tt->mutable_shape()->add_dim()->set_dim_value(d);
  auto* tr = g->add_node();
  tr->set_op_type("Transpose");
  tr->set_name("t");
  tr->add_input("x");
  tr->add_output("xt");
  auto* perm = tr->add_attribute();
  perm->set_name("perm");
  perm->set_type(onnx::AttributeProto::INTS);
  for (int64_t p : {1, 0, 2}) perm->add_ints(p);
  auto* shape = g->add_initializer();
  shape->set_name("shape");
  shape->set_data_type(onnx::TensorProto::INT64);
  shape->add_dims(2);
  shape->add_int64_data(8 * export_batch);
  shape->add_int64_data(e);
  auto* r = g->add_node();
  r->set_op_type("Reshape");
  r->set_name("r");
  r->add_input("xt");
  r->add_input("shape");
  r->add_output("flat");
  auto* sm = g->add_node();
  sm->set_op_type("Softmax");
  sm->set_name("sm");
  sm->add_input("flat");
  sm->add_output("y");
  g->add_output()->set_name("y");
  return m;
}

TEST(OnnxImport, ReshapeTarget_BatchIsTheDimRowMajorOrderPutsItIn) {
  // E = 16 = the exported batch: the batch is still in dim 0 ([8·B, 16]),
  // not in the dim of the same size.
  for (int64_t e : {16, 12}) {
    absl::StatusOr<Graph> g = Import(SequenceFirstReshape(16, e).SerializeAsString());
    ASSERT_THAT(g.status(), IsOk()) << e;
    const TensorInfo* flat = nullptr;
    for (const Op& op : g->ops) {
      if (op.type == "Reshape") flat = g->FindTensor(op.outputs[0]);
    }
    ASSERT_NE(flat, nullptr);
    EXPECT_EQ(flat->shape.BatchAxis(), 0) << flat->shape.ToString();
    EXPECT_EQ(flat->shape.dim(1).Concrete(5), e) << flat->shape.ToString();
    EXPECT_EQ(flat->shape.dim(0).Concrete(5), 40) << flat->shape.ToString();
  }
}

TEST(OnnxImport, Tiny_Imports) { EXPECT_THAT(Import(Tiny(14).SerializeAsString()), IsOk()); }

// x → Dropout (training, with its mask output named) → y; with
// `mask_read`, the mask is also a graph output.
onnx::ModelProto DropoutWithMask(bool mask_read) {
  onnx::ModelProto m = Tiny(14);
  auto* g = m.mutable_graph();
  g->clear_node();
  g->clear_output();
  auto* ratio = g->add_initializer();
  ratio->set_name("ratio");
  ratio->set_data_type(onnx::TensorProto::FLOAT);
  ratio->add_float_data(0.2f);
  auto* training = g->add_initializer();
  training->set_name("training");
  training->set_data_type(onnx::TensorProto::BOOL);
  training->add_int32_data(1);
  auto* n = g->add_node();
  n->set_op_type("Dropout");
  n->set_name("drop");
  for (const char* in : {"x", "ratio", "training"}) n->add_input(in);
  n->add_output("y");
  n->add_output("mask");
  g->add_output()->set_name("y");
  if (mask_read) g->add_output()->set_name("mask");
  return m;
}

TEST(OnnxImport, DropoutMask_IgnoredUnlessRead) {
  absl::StatusOr<Graph> g = Import(DropoutWithMask(false).SerializeAsString());
  ASSERT_THAT(g.status(), IsOk());
  int dropouts = 0;
  for (const Op& op : g->ops) dropouts += op.type == "Dropout";
  EXPECT_EQ(dropouts, 1);
  EXPECT_THAT(Import(DropoutWithMask(true).SerializeAsString()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("Dropout's mask output is read by another node")));
}

TEST(OnnxImport, UnsupportedOps_AllListedByTypeAndNode) {
  onnx::ModelProto m = Tiny(14);
  for (auto [type, name] :
       {std::pair{"NonMaxSuppression", "nms"}, std::pair{"Unique", "uniq"}, std::pair{"Det", ""},
        std::pair{"NonZero", "s1"}, std::pair{"NonZero", "s2"}, std::pair{"NonZero", "s3"},
        std::pair{"NonZero", "s4"}}) {
    auto* n = m.mutable_graph()->add_node();
    n->set_op_type(type);
    n->set_name(name);
    n->add_input("y");
    n->add_output(std::string(name) + "_out");
  }
  EXPECT_THAT(
      Import(m.SerializeAsString()),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          AllOf(HasSubstr("m.onnx: unsupported ONNX ops"),
                HasSubstr("NonMaxSuppression (node 'nms')"), HasSubstr("Unique (node 'uniq')"),
                HasSubstr(absl::StrCat("Det (node #", m.graph().node_size() - 4, " (unnamed))")),
                // One entry per op: how many nodes, a few named.
                HasSubstr("NonZero (4 nodes: node 's1', node 's2', node 's3', …)"))));
}

TEST(OnnxImport, EinsumsItCannotComputeAreRefusedSayingWhy) {
  // y is [B, 3].
  for (const auto& [equation, why] :
       {std::pair{"ii->i", "a diagonal"}, std::pair{"bi->i", "sums over the batch dim"},
        std::pair{"bi,bj->ij", "contracts over the batch dim"},
        std::pair{"bi,bj,bk->ijk", "one or two are supported"},
        std::pair{"b1->b", "only letters"}}) {
    onnx::ModelProto m = Tiny(14);
    auto* g = m.mutable_graph();
    auto* n = g->add_node();
    n->set_op_type("Einsum");
    const int operands =
        static_cast<int>(std::count(equation, equation + strlen(equation), ',')) + 1;
    for (int i = 0; i < operands; ++i) n->add_input("y");
    n->add_output("z");
    auto* a = n->add_attribute();
    a->set_name("equation");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(equation);
    g->mutable_output(0)->set_name("z");
    EXPECT_THAT(Import(m.SerializeAsString()),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(why)))
        << equation;
  }
}

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
    auto node = [&](const std::string& type, std::vector<std::string> in, const std::string& out) {
      auto* n = g->add_node();
      n->set_op_type(type);
      for (const auto& i : in) n->add_input(i);
      n->add_output(out);
      return n;
    };
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

// A Constant node `name` holding float32 `v` of `dims`.
void AddFloatConstant(onnx::GraphProto* g, const std::string& name,
                      const std::vector<int64_t>& dims, const std::vector<float>& v) {
  auto* n = g->add_node();
  n->set_op_type("Constant");
  n->add_output(name);
  auto* a = n->add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) a->mutable_t()->add_dims(d);
  for (float x : v) a->mutable_t()->add_float_data(x);
}

TEST(OnnxImport, ArithmeticOfConstants_Broadcasts) {
  // y · (a + b) with Constant nodes a [3, 1] and b [3]: a + b is [3, 3]
  // (it was taken element by element, as [3, 1], when the counts matched).
  onnx::ModelProto m = Tiny(14);
  auto* g = m.mutable_graph();
  AddFloatConstant(g, "a", {3, 1}, {0, 1, 2});
  AddFloatConstant(g, "b", {3}, {0, 10, 20});
  auto node = [&](const std::string& type, std::vector<std::string> in, const std::string& out) {
    auto* n = g->add_node();
    n->set_op_type(type);
    for (const auto& i : in) n->add_input(i);
    n->add_output(out);
  };
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
    auto node = [&](const std::string& type, std::vector<std::string> in, const std::string& out) {
      auto* n = g->add_node();
      n->set_op_type(type);
      for (const auto& i : in) n->add_input(i);
      n->add_output(out);
    };
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

TEST(OnnxImport, AnInitializerHoldingInfinities_IsAConstantNotAParameter) {
  onnx::ModelProto m = Tiny(14);
  auto* g = m.mutable_graph();
  for (const auto& [name, v] : {std::pair{"mask", -INFINITY}, std::pair{"w", 0.5f}}) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(3);
    for (int i = 0; i < 3; ++i) t->add_float_data(i == 1 ? v : 0.0f);
    auto* n = g->add_node();
    n->set_op_type("Add");
    n->set_name(std::string("add_") + name);
    n->add_input("y");
    n->add_input(name);
    n->add_output(std::string("y_") + name);
    g->add_output()->set_name(std::string("y_") + name);
  }
  absl::StatusOr<Graph> imported = Import(m.SerializeAsString());
  ASSERT_THAT(imported, IsOk());
  std::vector<std::string> params;
  for (const ParameterSpec& p : imported->parameters) params.push_back(p.tensor);
  // The additive mask (as attention exports it) is no weight; w is.
  EXPECT_THAT(params, ::testing::ElementsAre(::testing::HasSubstr("w")));
}

// y + w·(keep == 1), where `keep` (a float buffer, as a causal mask is
// registered) reaches the output only through the comparison, and `w`
// both through it and as data; `dead` feeds a node no output reads.
TEST(OnnxImport, AFloatInitializerNoGradientReaches_IsAConstantNotAParameter) {
  onnx::ModelProto m = Tiny(14);
  auto* g = m.mutable_graph();
  for (const char* name : {"keep", "w", "one", "dead"}) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(3);
    for (int i = 0; i < 3; ++i) t->add_float_data(i == 1 ? 0.0f : 1.0f);
  }
  auto node = [&](const char* type, std::vector<std::string> ins, const char* out) {
    auto* n = g->add_node();
    n->set_op_type(type);
    n->set_name(std::string(type) + "_" + out);
    for (const std::string& in : ins) n->add_input(in);
    n->add_output(out);
  };
  node("Equal", {"keep", "one"}, "kept");
  node("Cast", {"kept"}, "kept_f");
  auto* to = g->mutable_node(g->node_size() - 1)->add_attribute();
  to->set_name("to");
  to->set_type(onnx::AttributeProto::INT);
  to->set_i(onnx::TensorProto::FLOAT);
  node("Mul", {"w", "kept_f"}, "scaled");
  node("Add", {"y", "scaled"}, "out");
  node("Add", {"y", "dead"}, "unused");
  g->clear_output();
  g->add_output()->set_name("out");
  absl::StatusOr<Graph> imported = Import(m.SerializeAsString());
  ASSERT_THAT(imported, IsOk());
  std::vector<std::string> params;
  for (const ParameterSpec& p : imported->parameters) params.push_back(p.tensor);
  EXPECT_THAT(params, ::testing::ElementsAre(::testing::HasSubstr("w")));
}

TEST(OnnxImport, AStaticExportBatch_NamedWhenImportFails) {
  // Reshape to a target that cannot hold the exported batch of 2.
  onnx::ModelProto m = Tiny(14);
  auto* g = m.mutable_graph();
  auto* shape = g->add_initializer();
  shape->set_name("shape");
  shape->set_data_type(onnx::TensorProto::INT64);
  shape->add_dims(2);
  shape->add_int64_data(5);
  shape->add_int64_data(-1);
  auto* r = g->add_node();
  r->set_op_type("Reshape");
  r->set_name("r");
  r->add_input("y");
  r->add_input("shape");
  r->add_output("z");
  EXPECT_THAT(Import(m.SerializeAsString()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("node 'r'"), HasSubstr("exported with a fixed batch of 2"),
                             HasSubstr("dynamic_axes"))));
}

TEST(OnnxImport, ComparisonsAndWhereOnData_BecomeMasksOfZerosAndOnes) {
  // y (softmax output) > 0.5 as a mask selecting y or -inf: the infinity
  // becomes the largest finite float, so that 0 · fill is 0, not NaN.
  onnx::ModelProto m = Tiny(14);
  auto* g = m.mutable_graph();
  for (const auto& [name, v] : {std::pair{"half", 0.5f}, std::pair{"fill", -INFINITY}}) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_float_data(v);
  }
  auto node = [&](const char* type, std::vector<std::string> ins, const char* out) {
    auto* n = g->add_node();
    n->set_op_type(type);
    n->set_name(out);
    for (const std::string& in : ins) n->add_input(in);
    n->add_output(out);
  };
  node("Greater", {"y", "half"}, "big");
  node("Where", {"big", "y", "fill"}, "kept");
  g->clear_output();
  g->add_output()->set_name("kept");
  absl::StatusOr<Graph> imported = Import(m.SerializeAsString());
  ASSERT_THAT(imported.status(), IsOk());
  std::map<std::string, int> types;
  for (const Op& op : imported->ops) ++types[op.type];
  EXPECT_EQ(types["CompareMask"], 1);
  for (const auto& [name, c] : imported->constants) {
    if (c.dtype() != DType::kF32) continue;
    for (int64_t i = 0; i < c.numel(); ++i) EXPECT_TRUE(std::isfinite(c.f32()[i])) << name;
  }
}

TEST(OnnxImport, AScalarOutputIsNotTakenForPredictions) {
  // A model that computes a loss Quilt does not recognize (BCE with logits
  // exports as arithmetic and a mean): its output is a scalar.
  onnx::ModelProto m = Tiny(14);
  auto* g = m.mutable_graph();
  auto* n = g->add_node();
  n->set_op_type("ReduceMean");
  n->set_name("mean");
  n->add_input("y");
  n->add_output("loss");
  auto* keep = n->add_attribute();
  keep->set_name("keepdims");
  keep->set_type(onnx::AttributeProto::INT);
  keep->set_i(0);
  g->clear_output();
  g->add_output()->set_name("loss");
  absl::StatusOr<Graph> imported = Import(m.SerializeAsString());
  ASSERT_THAT(imported.status(), IsOk());
  EXPECT_THAT(CheckLossTarget(*imported), StatusIs(absl::StatusCode::kInvalidArgument,
                                                   AllOf(HasSubstr("output 'mean' is a scalar"),
                                                         HasSubstr("export the model without "
                                                                   "its loss"))));
  TrainingOptions o;
  o.loss = LossType::kMse;
  o.optimizer.kind = OptimizerSpec::Kind::kSgd;
  EXPECT_THAT(BuildTrainingGraph(&*imported, o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is a scalar")));
}

TEST(OnnxImport, ReduceMax_OverFeaturesImportsAndOverTheBatchIsRefused) {
  for (int64_t axis : {1, 0}) {
    onnx::ModelProto m = Tiny(14);
    auto* g = m.mutable_graph();
    // A dynamic batch: dim 0 of x is the batch.
    g->mutable_input(0)
        ->mutable_type()
        ->mutable_tensor_type()
        ->mutable_shape()
        ->mutable_dim(0)
        ->set_dim_param("batch");
    auto* n = g->add_node();
    n->set_op_type("ReduceMax");
    n->set_name("max");
    n->add_input("y");
    n->add_output("m");
    auto* axes = n->add_attribute();
    axes->set_name("axes");
    axes->set_type(onnx::AttributeProto::INTS);
    axes->add_ints(axis);
    g->clear_output();
    g->add_output()->set_name("m");
    absl::StatusOr<Graph> imported = Import(m.SerializeAsString());
    if (axis == 1) {
      ASSERT_THAT(imported.status(), IsOk());
      EXPECT_EQ(imported->FindTensor(imported->outputs[0])->shape.ToString(), "[B,1]");
    } else {
      EXPECT_THAT(imported.status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                              AllOf(HasSubstr("'max'"), HasSubstr("batch dim"))));
    }
  }
}

TEST(OnnxImport, UnsupportedOpset_Named) {
  EXPECT_THAT(Import(Tiny(11).SerializeAsString()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("opset 11 is not supported")));
  EXPECT_THAT(Import(Tiny(23).SerializeAsString()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("opset 23 is not supported (supported: 13–22)")));
  for (int64_t opset : {13, 17, 18, 21, 22}) {
    EXPECT_THAT(Import(Tiny(opset).SerializeAsString()), IsOk()) << opset;
  }
}

TEST(OnnxImport, DynamicNonBatchDim_Rejected) {
  onnx::ModelProto m = Tiny(14);
  m.mutable_graph()
      ->mutable_input(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(1)
      ->set_dim_param("seq");
  EXPECT_THAT(Import(m.SerializeAsString()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("('seq') is dynamic")));
}

TEST(OnnxImport, TruncatedAndEmptyFiles_ClearErrors) {
  const std::string bytes = FixtureBytes("cnn");
  EXPECT_THAT(Import(bytes.substr(0, bytes.size() / 2)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("m.onnx")));
  EXPECT_THAT(Import(""), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty")));
  EXPECT_THAT(Import("this is not onnx"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("truncated or corrupt")));
}

TEST(OnnxImport, WeightDataSizeMismatch_Rejected) {
  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(FixtureBytes("mlp")));
  auto* w = m.mutable_graph()->mutable_initializer(0);
  w->set_raw_data(w->raw_data().substr(0, 12));
  EXPECT_THAT(Import(m.SerializeAsString()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("its dims need")));
}

// Many random corruptions of every fixture: each import either succeeds
// with a valid graph or fails with an error naming the file — never a crash.
TEST(OnnxImport, RandomCorruptions_NeverCrash) {
  std::mt19937 rng(42);
  int errors = 0, ok = 0;
  for (const char* name : {"mlp", "cnn", "transformer", "mlp_loss_in_model"}) {
    const std::string clean = FixtureBytes(name);
    for (int trial = 0; trial < 250; ++trial) {
      std::string b = clean;
      const int mode = trial % 3;
      if (mode == 0) {  // flip bytes
        for (int k = 0; k < 1 + static_cast<int>(rng() % 8); ++k)
          b[rng() % b.size()] ^= (1 + rng() % 255);
      } else if (mode == 1) {  // truncate
        b.resize(rng() % b.size());
      } else {  // splice garbage
        const size_t at = rng() % b.size();
        std::string junk(1 + rng() % 32, '\0');
        for (char& c : junk) c = static_cast<char>(rng());
        b.insert(at, junk);
      }
      absl::StatusOr<Graph> g = Import(b);
      if (g.ok()) {
        ++ok;
        EXPECT_THAT(ValidateGraph(&*g), IsOk());
      } else {
        ++errors;
        EXPECT_THAT(std::string(g.status().message()), HasSubstr("m.onnx"));
      }
    }
  }
  EXPECT_GT(errors, 100);
  RecordProperty("imported_ok", ok);
}

TEST(TrainingGraphProto, RandomCorruptions_NeverCrash) {
  auto clean_graph = Import(FixtureBytes("transformer"));
  ASSERT_THAT(clean_graph, IsOk());
  const std::string clean = clean_graph->ToProto().SerializeAsString();
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    std::string b = clean;
    for (int k = 0; k < 1 + static_cast<int>(rng() % 6); ++k)
      b[rng() % b.size()] ^= (1 + rng() % 255);
    if (trial % 4 == 0) b.resize(rng() % b.size());
    quilt::v1::TrainingGraph p;
    if (!p.ParseFromString(b)) continue;
    absl::StatusOr<Graph> g = Graph::FromProto(p);
    if (!g.ok()) continue;
    (void)ValidateGraph(&*g);
  }
}

}  // namespace
}  // namespace quilt
