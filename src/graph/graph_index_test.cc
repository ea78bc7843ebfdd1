// The index resolves every name of a training graph to the graph's own
// positions, orders producers before consumers, and refuses graphs it
// cannot resolve with the op named.
#include "src/graph/graph_index.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/graph/autodiff.h"
#include "src/graph/graph_builder.h"
#include "src/graph/zoo/zoo.h"
#include "src/testing/make_op.h"

namespace quilt {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

Graph Training(const std::string& model) {
  absl::StatusOr<Graph> g = zoo::BuildZooModel(model);
  EXPECT_THAT(g.status(), IsOk());
  TrainingOptions to;
  to.loss = LossType::kSoftmaxCrossEntropy;
  to.optimizer.kind = OptimizerSpec::Kind::kAdam;
  EXPECT_THAT(BuildTrainingGraph(&*g, to), IsOk());
  return *std::move(g);
}

class GraphIndexOnZoo : public ::testing::TestWithParam<const char*> {};

TEST_P(GraphIndexOnZoo, ResolvesEveryNameAndOrdersProducersFirst) {
  const Graph g = Training(GetParam());
  absl::StatusOr<GraphIndex> built = GraphIndex::Build(g);
  ASSERT_THAT(built.status(), IsOk());
  const GraphIndex& ix = *built;
  EXPECT_EQ(&ix.graph(), &g);
  for (size_t t = 0; t < g.tensors().size(); ++t) {
    const TensorInfo& info = g.tensors()[t];
    EXPECT_EQ(ix.Tensor(info.name), static_cast<int>(t)) << info.name;
    EXPECT_EQ(ix.Batched(static_cast<int>(t)), info.shape.HasBatch()) << info.name;
  }
  std::vector<int> position(g.ops.size(), -1);
  const std::vector<int>& order = ix.TopologicalOrder();
  ASSERT_EQ(order.size(), g.ops.size());
  for (size_t k = 0; k < order.size(); ++k) {
    ASSERT_EQ(position[order[k]], -1) << "op " << order[k] << " appears twice in the order";
    position[order[k]] = static_cast<int>(k);
  }
  std::vector<int> producer(g.tensors().size(), -1);
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const Op& op = g.ops[i];
    const int oi = static_cast<int>(i);
    EXPECT_EQ(ix.OpIndex(op.name), oi);
    EXPECT_EQ(&ix.Schema(oi), OpRegistry::Global().Find(op.type)) << op.name;
    ASSERT_EQ(ix.Inputs(oi).size(), op.inputs.size()) << op.name;
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      const int t = ix.Inputs(oi)[k];
      if (op.inputs[k].empty()) {
        EXPECT_EQ(t, -1) << op.name;
      } else {
        ASSERT_GE(t, 0) << op.name;
        EXPECT_EQ(g.tensors()[t].name, op.inputs[k]);
      }
    }
    ASSERT_EQ(ix.Outputs(oi).size(), op.outputs.size()) << op.name;
    for (size_t k = 0; k < op.outputs.size(); ++k) {
      EXPECT_EQ(g.tensors()[ix.Outputs(oi)[k]].name, op.outputs[k]);
      producer[ix.Outputs(oi)[k]] = oi;
    }
  }
  for (size_t i = 0; i < g.ops.size(); ++i) {
    for (int t : ix.Inputs(static_cast<int>(i))) {
      if (t >= 0 && producer[t] >= 0) {
        EXPECT_LT(position[producer[t]], position[i])
            << g.ops[producer[t]].name << " must come before " << g.ops[i].name;
      }
    }
  }
  EXPECT_EQ(ix.Tensor("no such tensor"), -1);
  EXPECT_EQ(ix.OpIndex("no such op"), -1);
}

INSTANTIATE_TEST_SUITE_P(Models, GraphIndexOnZoo, ::testing::Values("mlp", "cnn", "transformer"));

Graph OneInput() {
  Graph g;
  GraphBuilder b(&g);
  EXPECT_THAT(b.AddInput("x", DType::kF32, Shape({Dim::Batch(), Dim::Fixed(3)})), IsOk());
  for (const char* t : {"a_out", "b_out"}) {
    TensorInfo info;
    info.name = t;
    info.dtype = DType::kF32;
    info.shape = Shape({Dim::Batch(), Dim::Fixed(3)});
    EXPECT_THAT(g.AddTensor(info), IsOk());
  }
  return g;
}

TEST(GraphIndex, UnknownOpTypeNamesTheOpAndType) {
  Graph g = OneInput();
  g.ops.push_back(MakeOp("a", "NoSuchOp", {"x"}, {"a_out"}));
  EXPECT_THAT(GraphIndex::Build(g).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'a'"), HasSubstr("'NoSuchOp'"))));
}

TEST(GraphIndex, UnknownTensorsAndCyclesAreRefused) {
  Graph g = OneInput();
  g.ops.push_back(MakeOp("a", "Relu", {"ghost"}, {"a_out"}));
  EXPECT_THAT(
      GraphIndex::Build(g).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr("'a'"), HasSubstr("'ghost'"))));
  Graph h = OneInput();
  h.ops.push_back(MakeOp("a", "Relu", {"b_out"}, {"a_out"}));
  h.ops.push_back(MakeOp("b", "Relu", {"a_out"}, {"b_out"}));
  EXPECT_THAT(GraphIndex::Build(h).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cycle")));
}

}  // namespace
}  // namespace quilt
