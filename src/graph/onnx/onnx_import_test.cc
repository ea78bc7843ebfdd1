// ONNX import: the fixtures import with the right parameters and symbolic
// batch; bad files get clear errors; random corruptions never crash.
#include "src/graph/onnx/onnx_import.h"

#include <random>
#include <set>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "src/common/files.h"
#include "src/common/status_matchers.h"
#include "src/common/utf8.h"
#include "src/graph/autodiff.h"
#include "src/graph/onnx/onnx_test_graphs.h"
#include "src/graph/validate.h"
#include "src/testing/proto_mutator.h"
#include "src/testing/subprocess.h"

namespace quilt {
namespace {

using testing::Import;
using testing::SetDynamicBatch;
using testing::Tiny;

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string FixtureBytes(const std::string& name) {
  auto b = ReadFile(testing::RunfilePath("test/fixtures/" + name + "/model.onnx"));
  EXPECT_THAT(b, IsOk());
  return b.ok() ? *b : "";
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
  // F.cross_entropy exports with ignore_index -100: its mean is the sum
  // over the labels kept divided by their count (both summed over
  // replicas), so the model's own loss.
  auto g = Import(FixtureBytes("mlp_loss_in_model"));
  ASSERT_THAT(g, IsOk());
  EXPECT_EQ(g->loss.type, LossType::kModel);
  const Op* sce = nullptr;
  for (const Op& op : g->ops) sce = op.type == "SoftmaxCrossEntropyLoss" ? &op : sce;
  ASSERT_NE(sce, nullptr);
  EXPECT_EQ(sce->attrs.String("reduction"), "sum");
  EXPECT_EQ(sce->attrs.Int("ignore_index", 0), -100);
  const auto producers = g->Producers();
  EXPECT_EQ(g->ops[producers.at(g->loss.output)].type, "Div");
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

TEST(OnnxImport, ALossComputedFromTheCrossEntropy_TrainsAsTheModelsOwnLoss) {
  // A factor on the cross-entropy is part of the loss: the whole scalar is
  // differentiated, so the factor reaches the cross-entropy's gradient.
  absl::StatusOr<Graph> g = Import(LossFollowedBy("Mul"));
  ASSERT_THAT(g, IsOk());
  EXPECT_EQ(g->loss.type, LossType::kModel);
  EXPECT_EQ(g->outputs, std::vector<std::string>{g->loss.output});
  EXPECT_EQ(g->labels, std::vector<std::string>{"y"});
  EXPECT_EQ(g->loss.label, "y");
  const std::string loss = g->loss.output;
  TrainingOptions o;
  o.optimizer.kind = OptimizerSpec::Kind::kSgd;
  ASSERT_THAT(BuildTrainingGraph(&*g, o), IsOk());
  EXPECT_EQ(g->loss.output, loss);
  const auto producers = g->Producers();
  int sce_grads = 0;
  for (const Op& op : g->ops) {
    if (op.type != "SoftmaxCrossEntropyLossGrad") continue;
    ++sce_grads;
    // Its dLoss is computed from the factor (2 · the seed / the count).
    std::set<std::string> seen;
    std::vector<std::string> todo = {op.inputs[0]};
    while (!todo.empty()) {
      const std::string t = todo.back();
      todo.pop_back();
      if (!seen.insert(t).second) continue;
      auto p = producers.find(t);
      if (p == producers.end()) continue;
      for (const std::string& in : g->ops[p->second].inputs) todo.push_back(in);
    }
    EXPECT_TRUE(seen.count("two")) << "the factor does not reach the cross-entropy's gradient";
  }
  EXPECT_EQ(sce_grads, 1);

  // A cross-entropy of a cross-entropy's scores returned as it is, or a
  // copy of the loss, is the loss.
  for (const char* op : {"SoftmaxCrossEntropyLoss", "Identity"}) {
    absl::StatusOr<Graph> same = Import(LossFollowedBy(op));
    ASSERT_THAT(same, IsOk()) << op;
    EXPECT_NE(same->loss.type, LossType::kNone) << op;
    EXPECT_EQ(same->labels, std::vector<std::string>{"y"}) << op;
  }
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
                HasSubstr("NonMaxSuppression (node 'nms')"),
                // What exports an op, where its name would not tell.
                HasSubstr("Unique (node 'uniq') [torch.unique: a shape that depends on the data]"),
                HasSubstr(absl::StrCat("Det (node #", m.graph().node_size() - 4, " (unnamed))")),
                // One entry per op: how many nodes, a few named.
                HasSubstr("NonZero (4 nodes: node 's1', node 's2', node 's3', …)"))));
}

TEST(OnnxImport, EinsumsItCannotComputeAreRefusedSayingWhy) {
  // y is [B, 3].
  for (const auto& [equation, why] :
       {std::pair{"ii->i", "a diagonal"}, std::pair{"bi->i", "sums over the batch dim"},
        std::pair{"bi,bj->ij", "contracts over the batch dim"},
        std::pair{"bi,bj,bk->ijk", "contracts over the batch dim"},
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

TEST(OnnxImport, AStaticExportBatch_NamedWhenAConcatOfABatchSizedConstantFails) {
  // torch.cat([h, torch.ones(x.shape[0], 1)], 1) exported at batch 2: the
  // ones stay [2, 1] while h has the batch.
  onnx::ModelProto m = Tiny(14);
  auto* g = m.mutable_graph();
  auto* ones = g->add_initializer();
  ones->set_name("ones");
  ones->set_data_type(onnx::TensorProto::FLOAT);
  ones->add_dims(2);
  ones->add_dims(1);
  ones->add_float_data(1);
  ones->add_float_data(1);
  auto* c = g->add_node();
  c->set_op_type("Concat");
  c->set_name("cat");
  c->add_input("y");
  c->add_input("ones");
  c->add_output("z");
  auto* axis = c->add_attribute();
  axis->set_name("axis");
  axis->set_type(onnx::AttributeProto::INT);
  axis->set_i(1);
  g->clear_output();
  g->add_output()->set_name("z");
  EXPECT_THAT(Import(m.SerializeAsString()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("node 'cat'"), HasSubstr("does not match"),
                             HasSubstr("exported with a fixed batch of 2"))));
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
  // A model whose scalar output reads no labels (a loss of the input alone,
  // as an autoencoder's): it is no loss Quilt can train, nor a prediction.
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
  EXPECT_THAT(CheckLossTarget(*imported),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("output 'mean' is a scalar that reads no labels"),
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
    SetDynamicBatch(&m);
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
  EXPECT_THAT(Import(Tiny(8).SerializeAsString()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("opset 8 is not supported")));
  EXPECT_THAT(Import(Tiny(23).SerializeAsString()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("opset 23 is not supported (supported: 9–22)")));
  for (int64_t opset : {9, 10, 11, 12, 13, 17, 18, 21, 22}) {
    EXPECT_THAT(Import(Tiny(opset).SerializeAsString()), IsOk()) << opset;
  }
}

TEST(OnnxImport, AnEvalModeBatchNorm_TrainsWithBatchStatisticsAndSaysSo) {
  for (const int64_t training_mode : {0, 1}) {
    onnx::ModelProto m = testing::WithBatchedInput(14, {2});
    auto* g = m.mutable_graph();
    for (const std::string name : {"scale", "bias", "mean", "var"}) {
      auto* t = g->add_initializer();
      t->set_name(name);
      t->set_data_type(onnx::TensorProto::FLOAT);
      t->add_dims(2);
      const float v = name == "bias" || name == "mean" ? 0 : 1;
      t->add_float_data(v);
      t->add_float_data(v);
    }
    onnx::NodeProto* bn =
        testing::AddNode(g, "BatchNormalization", {"x", "scale", "bias", "mean", "var"}, "y");
    bn->set_name("bn1");
    auto* mode = bn->add_attribute();
    mode->set_name("training_mode");
    mode->set_type(onnx::AttributeProto::INT);
    mode->set_i(training_mode);
    g->add_output()->set_name("y");
    absl::StatusOr<Graph> imported = Import(m.SerializeAsString());
    ASSERT_THAT(imported.status(), IsOk());
    const auto note = ::testing::Contains(
        AllOf(HasSubstr("batch norm bn1 was exported in eval mode"), HasSubstr("model.train()")));
    if (training_mode == 0) {
      EXPECT_THAT(imported->import_notes, note);
    } else {
      EXPECT_THAT(imported->import_notes, ::testing::Not(note));
    }
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
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("('seq') is dynamic"), HasSubstr("batch_first=True"))));
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

TEST(OnnxImport, ANameWrittenTwice_RejectedNamingBothWriters) {
  onnx::ModelProto m = Tiny(14);
  testing::AddNode(m.mutable_graph(), "Relu", {"x"}, "y")->set_name("relu2");
  EXPECT_THAT(Import(m.SerializeAsString()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("m.onnx"), HasSubstr("'y' is written by both node 'relu' "
                                                            "and node 'relu2'"))));
  onnx::ModelProto over_input = Tiny(14);
  testing::AddNode(over_input.mutable_graph(), "Relu", {"y"}, "x");
  EXPECT_THAT(Import(over_input.SerializeAsString()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'x' is written by both the graph's input and node #2")));
}

// ONNX's strings are bytes; Quilt's programs carry names as UTF-8: a node
// or tensor name that is not is refused at import, naming it (the program
// written with it could not be read back by an executor).
TEST(OnnxImport, NamesThatAreNotUtf8_Rejected) {
  onnx::ModelProto node = Tiny(14);
  node.mutable_graph()->mutable_node(0)->set_name("/\xffRelu");
  EXPECT_THAT(Import(node.SerializeAsString()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("m.onnx"), HasSubstr("'/\\xffRelu' is not valid UTF-8"))));
  onnx::ModelProto weight;
  ASSERT_TRUE(weight.ParseFromString(FixtureBytes("mlp")));
  const std::string old_name = weight.graph().initializer(0).name();
  const std::string bad = old_name + "\xc3";
  weight.mutable_graph()->mutable_initializer(0)->set_name(bad);
  for (auto& n : *weight.mutable_graph()->mutable_node()) {
    for (auto& in : *n.mutable_input()) {
      if (in == old_name) in = bad;
    }
  }
  EXPECT_THAT(Import(weight.SerializeAsString()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is not valid UTF-8")));
}

TEST(OnnxImport, AWeightWithoutElements_Rejected) {
  onnx::ModelProto m = testing::WithBatchedInput(14, {16});
  auto* w = m.mutable_graph()->add_initializer();
  w->set_name("fc.weight");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(16);
  w->add_dims(0);
  testing::AddNode(m.mutable_graph(), "MatMul", {"x", "fc.weight"}, "y");
  m.mutable_graph()->add_output()->set_name("y");
  EXPECT_THAT(Import(m.SerializeAsString()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'fc.weight' has no elements"), HasSubstr("[16,0]"))));
}

// A constant folded at a size the model's text makes up (a ConstantOfShape
// of 2^31 x 2^10 floats, 8 TiB) is refused naming the node, before any of
// it is allocated; one under the bound imports.
TEST(OnnxImport, AConstantFoldedPastItsBound_RefusedNamingTheNode) {
  for (int64_t rows : {int64_t{1} << 31, int64_t{4}}) {
    onnx::ModelProto m = Tiny(14);
    auto* g = m.mutable_graph();
    testing::AddInt64Constant(g, "dims", {rows, 1024});
    testing::AddNode(g, "ConstantOfShape", {"dims"}, "big")->set_name("/big/ConstantOfShape");
    g->add_output()->set_name("big");
    absl::StatusOr<Graph> imported = Import(m.SerializeAsString());
    if (rows == 4) {
      EXPECT_THAT(imported, IsOk());
      continue;
    }
    EXPECT_THAT(imported, StatusIs(absl::StatusCode::kInvalidArgument,
                                   AllOf(HasSubstr("m.onnx: node '/big/ConstantOfShape'"),
                                         HasSubstr("f32[2147483648,1024] would take 8192.0 GiB"),
                                         HasSubstr("at most 1.0 GiB each"))));
  }
}

// The model's own text in an error (an op type here) cannot carry a
// terminal escape, a newline or bytes that are not UTF-8 to whoever reads
// it: they are shown as '?'.
TEST(OnnxImport, ControlCharactersInAnError_ShownAsQuestionMarks) {
  onnx::ModelProto m = Tiny(14);
  m.mutable_graph()->mutable_node(0)->set_op_type("Re\x1b[2Jlu\n\xff");
  absl::StatusOr<Graph> imported = Import(m.SerializeAsString());
  ASSERT_THAT(imported, StatusIs(absl::StatusCode::kInvalidArgument,
                                 HasSubstr("unsupported ONNX ops: Re?[2Jlu??")));
  for (char c : imported.status().message()) {
    EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20 || c == 0x7f) << int(c);
  }
  EXPECT_TRUE(IsUtf8(std::string(imported.status().message())));
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

// Well-formed models that say wrong things (a dim of 2^31, an input
// dropped, an op type or attribute changed, weights cut short): each
// imports to a valid graph or fails naming the file, never crashes, and
// never asks for memory the model's own size does not justify (the
// constants folded are bounded).
TEST(OnnxImport, StructuredMutations_NeverCrash) {
  std::mt19937 rng(11);
  int errors = 0, ok = 0;
  for (const char* name : {"mlp", "cnn", "transformer", "recurrent", "lm_blocks", "segmenter"}) {
    onnx::ModelProto clean;
    ASSERT_TRUE(clean.ParseFromString(FixtureBytes(name)));
    for (int trial = 0; trial < 120; ++trial) {
      onnx::ModelProto m = clean;
      std::vector<std::string> did;
      for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k) {
        did.push_back(testing::MutateMessage(&m, &rng));
      }
      absl::StatusOr<Graph> g = Import(m.SerializeAsString());
      if (g.ok()) {
        ++ok;
        EXPECT_THAT(ValidateGraph(&*g), IsOk()) << name << ": " << absl::StrJoin(did, "; ");
      } else {
        ++errors;
        EXPECT_THAT(std::string(g.status().message()), HasSubstr("m.onnx"))
            << name << ": " << absl::StrJoin(did, "; ");
      }
    }
  }
  EXPECT_GT(errors, 100);
  EXPECT_GT(ok, 50);
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
