// ModelNotes: what a user is told about how a model will train.
#include "src/graph/model_loader.h"

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/files.h"

namespace quilt {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

Graph WithParameters(const std::vector<std::string>& names) {
  Graph g;
  for (const std::string& n : names) {
    ParameterSpec p;
    p.tensor = n;
    g.parameters.push_back(p);
  }
  return g;
}

TEST(ModelNotes, ExporterFoldedTensorsAreNamedButTransposedWeightsAreNot) {
  // An eval-mode export: batch norm folded into the convolution.
  const std::string bn = absl::StrJoin(
      ModelNotes(WithParameters({"onnx::Conv_16", "onnx::Conv_17", "4.weight"})), "\n");
  EXPECT_THAT(bn, AllOf(HasSubstr("onnx::Conv_16, onnx::Conv_17"),
                        HasSubstr("folds batch norm into the convolutions"),
                        HasSubstr("TrainingMode.TRAINING")));
  // A weight scaled in forward (w * c, folded into a Gemm's operand) and a
  // folded buffer added to scores.
  const std::string scaled =
      absl::StrJoin(ModelNotes(WithParameters({"onnx::Gemm_31", "onnx::Add_4"})), "\n");
  EXPECT_THAT(scaled, AllOf(HasSubstr("onnx::Gemm_31, onnx::Add_4"),
                            HasSubstr("do_constant_folding=False"), Not(HasSubstr("batch norm"))));
  // A linear layer's transposed weight trains as the weight; frozen
  // tensors do not train.
  // (So do an LSTM's and a GRU's gate-reordered weights.)
  Graph plain =
      WithParameters({"onnx::MatMul_8", "onnx::LSTM_12", "onnx::GRU_3", "l.bias", "onnx::Add_5"});
  plain.parameters[4].frozen = true;
  EXPECT_THAT(ModelNotes(plain), ::testing::IsEmpty());
}

TEST(ModelNotes, WeightsOnlyTheLabelsMeet_AreNamedUnlessFrozen) {
  Graph g = WithParameters({"fc.weight", "pos_weight"});
  g.label_only_parameters = {"pos_weight"};
  EXPECT_THAT(absl::StrJoin(ModelNotes(g), "\n"),
              HasSubstr("weights 'pos_weight' are used only where the loss reads the labels"));
  g.parameters[1].frozen = true;  // --frozen pos_weight
  EXPECT_THAT(absl::StrJoin(ModelNotes(g), "\n"), Not(HasSubstr("pos_weight")));
}

TEST(ModelNotes, AnEmbeddingWithSeveralZeroRowsIsNamed) {
  // A table looked up by ids with rows 0 and 2 all zeros (padding and an
  // unknown token zeroed by hand): neither is taken for padding_idx.
  auto table_with_zero_rows = [](std::vector<int64_t> zero) {
    Graph g = WithParameters({"emb.weight"});
    std::vector<float> v(4 * 3, 1.0f);
    for (int64_t r : zero) std::fill(v.begin() + r * 3, v.begin() + r * 3 + 3, 0.0f);
    g.parameters[0].value = Tensor::FromF32({4, 3}, v);
    Op lookup;
    lookup.type = "Gather";
    lookup.inputs = {"emb.weight", "ids"};
    g.ops.push_back(lookup);
    return ModelNotes(g);
  };
  EXPECT_THAT(absl::StrJoin(table_with_zero_rows({0, 2}), "\n"),
              AllOf(HasSubstr("embedding emb.weight: rows 0, 2 are all zeros"),
                    HasSubstr("every row trains through the lookup")));
  EXPECT_THAT(table_with_zero_rows({}), ::testing::IsEmpty());
}

// Outputs beyond the first are named as the model names them (what
// --loss-output takes), not by the tensors the import made.
TEST(ModelNotes, OutputsAreNamedAsTheModelNamesThem) {
  Graph g;
  g.outputs = {"/cls/Gemm_output_0", "/box/Gemm_output_0"};
  g.output_names = {"logits", "box"};
  const std::string notes = absl::StrJoin(ModelNotes(g), "\n");
  EXPECT_THAT(notes, HasSubstr("the loss is computed on the first ('logits')"));
  g.output_names.clear();  // a graph not imported: its tensors' names
  EXPECT_THAT(absl::StrJoin(ModelNotes(g), "\n"), HasSubstr("('/cls/Gemm_output_0')"));
}

// PyTorch's default graph name gives way to the file's; a name the model
// was given stays, and so does the default where no file is named.
TEST(LoadModel, AnExportersDefaultGraphNameGivesWayToTheFilesName) {
  absl::StatusOr<std::string> bytes = ReadFile("test/fixtures/mlp/model.onnx");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<Graph> from_file = LoadModel("test/fixtures/mlp/model.onnx", 8, "");
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_EQ(from_file->name, "model");
  absl::StatusOr<Graph> from_bytes = LoadOnnxBytes(*bytes, 8, "the job's ONNX model");
  ASSERT_TRUE(from_bytes.ok()) << from_bytes.status();
  EXPECT_EQ(from_bytes->name, "torch_jit");
  absl::StatusOr<Graph> renamed = LoadOnnxBytes(*bytes, 8, "/data/resnet18.onnx");
  ASSERT_TRUE(renamed.ok()) << renamed.status();
  EXPECT_EQ(renamed->name, "resnet18");
}

// --loss-output picks an ONNX model's output: given for another model, it
// is refused rather than ignored.
TEST(LoadModel, ALossOutputForAModelThatIsNoOnnxIsRefused) {
  absl::StatusOr<Graph> zoo = LoadModel("zoo:mlp", 8, "nope");
  EXPECT_FALSE(zoo.ok());
  EXPECT_THAT(std::string(zoo.status().message()), HasSubstr("zoo:mlp is no ONNX model"));
  EXPECT_TRUE(LoadModel("zoo:mlp", 8, "").ok());
}

}  // namespace
}  // namespace quilt
