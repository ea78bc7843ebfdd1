// `quiltctl train-local` reproduces PyTorch's per-step losses on the
// exported fixtures (MLP, CNN with batch norm, transformer block with
// LayerNorm written out or as one op, a language model whose embedding is
// tied to its output projection, loss inside or outside the model, an
// encoder layer exported with a dynamic batch and trained at a batch equal
// to its sequence length, with F.pad and a batch-sized constant, causal
// attention masked by masked_fill from a buffer, with ReLU6, LeakyReLU,
// clamp and abs, a per-pixel classifier whose classes are on axis 1, with
// group norm and nearest upsampling, a BERT-style classifier of three
// inputs (word and segment ids, an attention mask: a file each), with its
// loss outside or inside (the labels its last input); exports
// of opsets 9–11 among them), for
// 20 SGD (momentum, weight decay) and 20 Adam steps.
#include <cmath>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "src/common/status_matchers.h"
#include "src/runtime/data/npy.h"
#include "src/testing/subprocess.h"
#include "src/testing/temp_dir.h"

namespace quilt::testing {
namespace {

using ::testing::HasSubstr;

struct Fixture {
  std::string name;
  std::string optimizer;
};

void PrintTo(const Fixture& f, std::ostream* os) { *os << f.name << "/" << f.optimizer; }

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// --data: x.npy, or a file per input where the model has several
// ("inputs"), then y.npy.
std::string DataFiles(const std::string& dir, const nlohmann::json& expected) {
  std::string files;
  for (const auto& f : expected.value("inputs", nlohmann::json::array({"x.npy"}))) {
    absl::StrAppend(&files, dir, "/", f.get<std::string>(), ",");
  }
  return files + dir + "/y.npy";
}

class TrainLocalMatchesPyTorch : public ::testing::TestWithParam<Fixture> {};

TEST_P(TrainLocalMatchesPyTorch, LossesWithin1e4Relative) {
  const Fixture& f = GetParam();
  const std::string dir = RunfilePath("test/fixtures/" + f.name);
  const nlohmann::json expected = ReadJson(dir + "/losses.json");
  const nlohmann::json& cfg = expected[f.optimizer];
  std::vector<std::string> argv = {RunfilePath("src/cli/quiltctl"),
                                   "train-local",
                                   dir + "/model.onnx",
                                   "--data",
                                   DataFiles(dir, expected),
                                   "--batch",
                                   std::to_string(expected["batch"].get<int>()),
                                   "--steps",
                                   std::to_string(expected["steps"].get<int>()),
                                   "--optimizer",
                                   f.optimizer,
                                   "--lr",
                                   std::to_string(cfg["lr"].get<double>()),
                                   "--threads",
                                   "1",
                                   "-o",
                                   "json"};
  if (!expected["loss_in_model"].get<bool>()) {
    argv.insert(argv.end(), {"--loss", expected["loss"].get<std::string>()});
  }
  // Buffers PyTorch does not train (ONNX writes them as initializers).
  std::vector<std::string> frozen;
  for (const auto& name : expected.value("frozen", nlohmann::json::array())) {
    frozen.push_back(name.get<std::string>());
  }
  if (!frozen.empty()) argv.insert(argv.end(), {"--frozen", absl::StrJoin(frozen, ",")});
  if (f.optimizer == "sgd") {
    argv.insert(argv.end(), {"--momentum", std::to_string(cfg["momentum"].get<double>()),
                             "--weight-decay", std::to_string(cfg["weight_decay"].get<double>())});
  }
  auto r = RunCommand(argv, absl::Seconds(120));
  ASSERT_THAT(r, IsOk());
  ASSERT_EQ(r->exit_code, 0) << r->err;
  const nlohmann::json got = nlohmann::json::parse(r->out);
  const auto& want = cfg["losses"];
  ASSERT_EQ(got["losses"].size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const double w = want[i].get<double>(), q = got["losses"][i].get<double>();
    EXPECT_LE(std::fabs(q - w), 1e-4 * std::fabs(w))
        << "step " << i + 1 << ": quilt " << q << ", pytorch " << w;
  }
  // The loss falls: these are learnable tasks.
  EXPECT_LT(got["losses"].back().get<double>(), got["losses"].front().get<double>());
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, TrainLocalMatchesPyTorch,
    ::testing::Values(
        Fixture{"mlp", "sgd"}, Fixture{"mlp", "adam"}, Fixture{"mlp_loss_in_model", "sgd"},
        Fixture{"mlp_loss_in_model", "adam"}, Fixture{"mlp_regression", "sgd"},
        Fixture{"mlp_regression", "adam"}, Fixture{"cnn", "sgd"}, Fixture{"cnn", "adam"},
        Fixture{"transformer", "sgd"}, Fixture{"transformer", "adam"},
        Fixture{"transformer_opset17", "sgd"}, Fixture{"transformer_opset17", "adam"},
        Fixture{"tied_lm", "sgd"}, Fixture{"tied_lm", "adam"}, Fixture{"cls_token", "sgd"},
        Fixture{"cls_token", "adam"}, Fixture{"tied_lm_folded", "sgd"},
        Fixture{"tied_lm_folded", "adam"}, Fixture{"buffer_scale", "sgd"},
        Fixture{"buffer_scale", "adam"}, Fixture{"dynamic_encoder", "sgd"},
        Fixture{"dynamic_encoder", "adam"}, Fixture{"masked_attention", "sgd"},
        Fixture{"masked_attention", "adam"}, Fixture{"segmenter", "sgd"},
        Fixture{"segmenter", "adam"}, Fixture{"causal_lm", "sgd"}, Fixture{"causal_lm", "adam"},
        Fixture{"causal_lm_static", "sgd"}, Fixture{"causal_lm_static", "adam"},
        Fixture{"causal_lm_inline", "sgd"}, Fixture{"causal_lm_inline", "adam"},
        Fixture{"hard_activations", "sgd"}, Fixture{"hard_activations", "adam"},
        Fixture{"text_cnn", "sgd"}, Fixture{"text_cnn", "adam"}, Fixture{"multi_input", "sgd"},
        Fixture{"multi_input", "adam"}, Fixture{"multi_input_loss_in_model", "sgd"},
        Fixture{"multi_input_loss_in_model", "adam"}, Fixture{"multi_input_labels_second", "sgd"},
        Fixture{"padded_encoder", "sgd"}, Fixture{"padded_encoder", "adam"},
        Fixture{"activations", "sgd"}, Fixture{"activations", "adam"},
        Fixture{"bilinear_segmenter", "sgd"}, Fixture{"bilinear_segmenter", "adam"},
        Fixture{"autoencoder", "sgd"}, Fixture{"autoencoder", "adam"}, Fixture{"norms", "sgd"},
        Fixture{"norms", "adam"}, Fixture{"recurrent", "sgd"}, Fixture{"recurrent", "adam"},
        Fixture{"position_ids", "sgd"}, Fixture{"position_ids", "adam"}, Fixture{"min_max", "sgd"},
        Fixture{"min_max", "adam"}, Fixture{"pads_repeats", "sgd"}, Fixture{"pads_repeats", "adam"},
        // Newer opsets' forms of the same models (tools/fixtures/upgrade_opset.py).
        Fixture{"causal_lm_opset20", "sgd"}, Fixture{"causal_lm_opset20", "adam"},
        Fixture{"segmenter_opset18", "sgd"}, Fixture{"segmenter_opset21", "adam"},
        Fixture{"einsum_attention", "sgd"}, Fixture{"einsum_attention", "adam"},
        Fixture{"gather_elements", "sgd"}, Fixture{"gather_elements", "adam"},
        Fixture{"zeros_and_kinks", "sgd"}, Fixture{"zeros_and_kinks", "adam"},
        Fixture{"bool_mask_lm", "sgd"}, Fixture{"recurrent_fixed", "sgd"},
        Fixture{"pixel_shuffler", "sgd"}, Fixture{"pixel_shuffler", "adam"},
        Fixture{"swin_blocks", "sgd"}, Fixture{"swin_blocks", "adam"}, Fixture{"lm_blocks", "sgd"},
        Fixture{"lm_blocks", "adam"}, Fixture{"shared_layers", "sgd"},
        Fixture{"shared_layers", "adam"}, Fixture{"mask_ops", "sgd"}, Fixture{"mask_ops", "adam"},
        Fixture{"multilabel_bce", "sgd"}, Fixture{"multilabel_bce", "adam"},
        Fixture{"mixed_losses", "sgd"}, Fixture{"mixed_losses", "adam"},
        Fixture{"batch_size_losses", "sgd"}, Fixture{"batch_size_losses", "adam"},
        Fixture{"ignored_labels", "sgd"}, Fixture{"ignored_labels", "adam"},
        Fixture{"weighted_ce", "sgd"}, Fixture{"weighted_ce", "adam"},
        Fixture{"smoothed_ce", "sgd"}, Fixture{"smoothed_ce", "adam"}, Fixture{"focal_loss", "sgd"},
        Fixture{"focal_loss", "adam"}, Fixture{"mixture_nll", "sgd"},
        Fixture{"mixture_nll", "adam"}, Fixture{"soft_targets", "sgd"},
        Fixture{"soft_targets", "adam"}, Fixture{"masked_attention_opset9", "sgd"},
        Fixture{"masked_attention_opset9", "adam"}, Fixture{"pads_repeats_opset9", "sgd"},
        Fixture{"pads_repeats_opset9", "adam"}, Fixture{"recurrent_opset9", "sgd"},
        Fixture{"recurrent_opset9", "adam"}, Fixture{"segmenter_opset9", "sgd"},
        Fixture{"segmenter_opset9", "adam"}, Fixture{"segmenter_opset10", "sgd"},
        Fixture{"segmenter_opset10", "adam"}, Fixture{"text_cnn_opset11", "sgd"},
        Fixture{"text_cnn_opset11", "adam"}, Fixture{"upsampler_1d", "sgd"},
        Fixture{"upsampler_1d", "adam"}, Fixture{"einsum_bilinear", "sgd"},
        Fixture{"einsum_bilinear", "adam"}, Fixture{"integer_ops", "sgd"},
        Fixture{"integer_ops", "adam"}, Fixture{"elman_rnn", "sgd"}, Fixture{"elman_rnn", "adam"},
        Fixture{"cropping_pads", "sgd"}, Fixture{"cropping_pads", "adam"},
        Fixture{"downsampler", "sgd"}, Fixture{"downsampler", "adam"},
        Fixture{"gqa_attention", "sgd"}, Fixture{"gqa_attention", "adam"}),
    [](const auto& info) { return info.param.name + "_" + info.param.optimizer; });

TEST(TrainLocal, SyntheticData_LossFalls) {
  // A zoo model, and exported ones whose loss is inside them (their labels
  // reach the loss through a reshape; through a slice, labels[:, 1:]).
  for (const std::string& model :
       {std::string("zoo:mlp"), RunfilePath("test/fixtures/mlp_loss_in_model/model.onnx"),
        RunfilePath("test/fixtures/lm_blocks/model.onnx")}) {
    auto r = RunCommand({RunfilePath("src/cli/quiltctl"), "train-local", model, "--data",
                         "synthetic", "--batch", "32", "--steps", "30", "--optimizer", "adam",
                         "--lr", "0.003", "--threads", "1", "-o", "json"},
                        absl::Seconds(120));
    ASSERT_THAT(r, IsOk());
    ASSERT_EQ(r->exit_code, 0) << model << ": " << r->err;
    const auto losses = nlohmann::json::parse(r->out)["losses"];
    double first = 0, last = 0;
    for (int i = 0; i < 5; ++i) first += losses[i].get<double>() / 5;
    for (int i = 25; i < 30; ++i) last += losses[i].get<double>() / 5;
    EXPECT_LT(last, 0.8 * first) << model;
  }
}

TEST(TrainLocal, AStepWhoseLabelsAreAllIgnored_HasLossZeroAndGoesOn) {
  // ignored_labels ignores rows 0–5 and 9 of every 16: at batch 3, steps 1
  // and 2 (rows 0–5) keep no label. PyTorch's loss is NaN there and its
  // gradient 0; Quilt's loss is 0 (and the gradient 0), and training goes on.
  const std::string dir = RunfilePath("test/fixtures/ignored_labels");
  auto r = RunCommand({RunfilePath("src/cli/quiltctl"), "train-local", dir + "/model.onnx",
                       "--data", dir + "/x.npy," + dir + "/y.npy", "--batch", "3", "--steps", "6",
                       "--threads", "1", "-o", "json"});
  ASSERT_THAT(r, IsOk());
  ASSERT_EQ(r->exit_code, 0) << r->err;
  const auto losses = nlohmann::json::parse(r->out)["losses"];
  ASSERT_EQ(losses.size(), 6u);
  EXPECT_EQ(losses[0].get<double>(), 0.0);
  EXPECT_EQ(losses[1].get<double>(), 0.0);
  EXPECT_FALSE(std::signbit(losses[0].get<double>()));  // 0, not −0
  for (int i = 2; i < 6; ++i) EXPECT_GT(losses[i].get<double>(), 0.1) << "step " << i + 1;
}

TEST(TrainLocal, BadData_ClearErrors) {
  const std::string dir = RunfilePath("test/fixtures/mlp");
  // Inputs of another model (CNN images) do not fit the MLP.
  auto r = RunCommand({RunfilePath("src/cli/quiltctl"), "train-local", dir + "/model.onnx",
                       "--loss", "softmax_cross_entropy", "--data",
                       RunfilePath("test/fixtures/cnn/x.npy") + "," + dir + "/y.npy", "--batch",
                       "4", "--steps", "1"});
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->err, HasSubstr("the model needs [N,20]"));
  r = RunCommand({RunfilePath("src/cli/quiltctl"), "train-local", dir + "/model.onnx", "--loss",
                  "softmax_cross_entropy", "--data", "/nonexistent/x.npy,/nonexistent/y.npy",
                  "--batch", "4", "--steps", "1"});
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->err, HasSubstr("/nonexistent/x.npy"));
  r = RunCommand({RunfilePath("src/cli/quiltctl"), "train-local", dir + "/model.onnx", "--data",
                  dir + "/x.npy," + dir + "/y.npy", "--batch", "4", "--steps", "1"});
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->err, HasSubstr("--loss"));
  // A batch larger than the dataset.
  r = RunCommand({RunfilePath("src/cli/quiltctl"), "train-local", dir + "/model.onnx", "--loss",
                  "softmax_cross_entropy", "--data", dir + "/x.npy," + dir + "/y.npy", "--batch",
                  "100000", "--steps", "1"});
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->err, HasSubstr("fewer than one batch of 100000"));
  // More threads than any machine runs: a usage error, not an abort.
  r = RunCommand({RunfilePath("src/cli/quiltctl"), "train-local", dir + "/model.onnx", "--loss",
                  "softmax_cross_entropy", "--data", dir + "/x.npy," + dir + "/y.npy", "--batch",
                  "4", "--steps", "1", "--threads", "100000"});
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_code, 2);
  EXPECT_THAT(r->err, HasSubstr("--threads"));
}

TEST(TrainLocal, NonFiniteLoss_FailsNamingTheStep) {
  const std::string dir = RunfilePath("test/fixtures/mlp");
  absl::StatusOr<Tensor> x = ReadNpy(dir + "/x.npy");
  ASSERT_THAT(x.status(), IsOk());
  x->f32()[3] = std::nanf("");  // in the first batch
  testing::TempDir tmp;
  ASSERT_THAT(WriteNpy(tmp.File("x.npy"), *x), IsOk());
  auto r = RunCommand({RunfilePath("src/cli/quiltctl"), "train-local", dir + "/model.onnx",
                       "--loss", "softmax_cross_entropy", "--data",
                       tmp.File("x.npy") + "," + dir + "/y.npy", "--batch", "4", "--steps", "3"});
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_code, 1) << r->out;
  EXPECT_THAT(r->err, HasSubstr("the loss is nan at step 1"));
}

TEST(TrainLocal, ANegativeLabelOfOneHot_IsRefusedNamingIt) {
  // smoothed_ce's labels go through F.one_hot, which PyTorch refuses a
  // negative class to (ONNX's OneHot would count it from the end).
  const std::string dir = RunfilePath("test/fixtures/smoothed_ce");
  absl::StatusOr<Tensor> y = ReadNpy(dir + "/y.npy");
  ASSERT_THAT(y.status(), IsOk());
  ASSERT_EQ(y->dtype(), DType::kI64);
  y->i64()[2] = -1;  // in the first batch
  testing::TempDir tmp;
  ASSERT_THAT(WriteNpy(tmp.File("y.npy"), *y), IsOk());
  auto r = RunCommand({RunfilePath("src/cli/quiltctl"), "train-local", dir + "/model.onnx",
                       "--data", dir + "/x.npy," + tmp.File("y.npy"), "--batch", "4", "--steps",
                       "2", "--threads", "1"});
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_code, 1) << r->out;
  EXPECT_THAT(r->err, HasSubstr("label -1 at position 2 is not a class in [0, 5)"));
}

TEST(TrainLocal, ANegativeTokenIdInTheData_IsRefusedNamingIt) {
  // ONNX's Gather counts a negative index from the end; ids the model's
  // input looks up (nn.Embedding) are refused instead, as PyTorch does.
  const std::string dir = RunfilePath("test/fixtures/elman_rnn");
  absl::StatusOr<Tensor> x = ReadNpy(dir + "/x.npy");
  ASSERT_THAT(x.status(), IsOk());
  ASSERT_EQ(x->dtype(), DType::kI64);
  ASSERT_EQ(x->dim(1), 6);
  x->i64()[6 + 2] = -1;  // sample 1, position 2: the step's 9th id
  testing::TempDir tmp;
  ASSERT_THAT(WriteNpy(tmp.File("x.npy"), *x), IsOk());
  auto r =
      RunCommand({RunfilePath("src/cli/quiltctl"), "train-local", dir + "/model.onnx", "--loss",
                  "softmax_cross_entropy", "--data", tmp.File("x.npy") + "," + dir + "/y.npy",
                  "--batch", "4", "--steps", "2", "--threads", "1"});
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_code, 1) << r->out;
  EXPECT_THAT(r->err, HasSubstr("id -1 at position 8 of the step's input ids is negative"));

  // One past the table: the same valid range named, not ONNX's [-n, n).
  x->i64()[6 + 2] = 1000000;
  ASSERT_THAT(WriteNpy(tmp.File("x.npy"), *x), IsOk());
  r = RunCommand({RunfilePath("src/cli/quiltctl"), "train-local", dir + "/model.onnx", "--loss",
                  "softmax_cross_entropy", "--data", tmp.File("x.npy") + "," + dir + "/y.npy",
                  "--batch", "4", "--steps", "2", "--threads", "1"});
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_code, 1) << r->out;
  EXPECT_THAT(r->err, HasSubstr("id 1000000 at position 8 of the step's input ids is past the "
                                "table's end: an embedding lookup takes ids in [0, "));
}

TEST(GraphInspect, ZooResNet50_ReportsParametersAndFlops) {
  auto r = RunCommand({RunfilePath("src/cli/quiltctl"), "graph", "inspect", "zoo:resnet50",
                       "--batch", "8", "-o", "json"});
  ASSERT_THAT(r, IsOk());
  ASSERT_EQ(r->exit_code, 0) << r->err;
  const auto j = nlohmann::json::parse(r->out);
  EXPECT_EQ(j["parameters"].get<int64_t>(), 25557032);
  // ResNet-50 forward: ~4.1 GMACs = ~8.2 GFLOP per 224×224 image.
  EXPECT_GT(j["forward_flops_per_sample"].get<double>(), 7.5e9);
  EXPECT_LT(j["forward_flops_per_sample"].get<double>(), 9.0e9);
  EXPECT_GT(j["training_graph"]["ops"].get<int>(), 2 * j["ops"].get<int>());
  EXPECT_EQ(j["ops_by_type"]["Conv"].get<int>(), 53);

  // A batch no step may have is refused, not summed past 64 bits.
  r = RunCommand({RunfilePath("src/cli/quiltctl"), "graph", "inspect", "zoo:resnet50", "--batch",
                  "70000000000"});
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_code, 1) << r->out;
  EXPECT_THAT(r->err, HasSubstr("a global batch of 70000000000 is more than the"));
}

TEST(GraphInspect, ListsParametersByNameAndNotesThoseThatMayBeBuffers) {
  // buffer_scale's `scale` is a registered buffer ONNX writes as an
  // initializer like any weight: a note names it and the flag that keeps it.
  const std::string model = RunfilePath("test/fixtures/buffer_scale/model.onnx");
  auto r = RunCommand({RunfilePath("src/cli/quiltctl"), "graph", "inspect", model, "-o", "json"});
  ASSERT_THAT(r, IsOk());
  ASSERT_EQ(r->exit_code, 0) << r->err;
  const auto j = nlohmann::json::parse(r->out);
  std::vector<std::string> names;
  for (const auto& p : j["parameter_list"]) names.push_back(p["name"].get<std::string>());
  EXPECT_THAT(names, ::testing::Contains("scale"));
  EXPECT_THAT(names, ::testing::Contains("lin.weight"));
  ASSERT_EQ(j["notes"].size(), 1u);
  EXPECT_THAT(j["notes"][0].get<std::string>(), HasSubstr("--frozen scale"));
  // Frozen, it is no longer noted.
  r = RunCommand({RunfilePath("src/cli/quiltctl"), "train-local", model, "--data", "synthetic",
                  "--batch", "4", "--steps", "1", "--loss", "softmax_cross_entropy"});
  ASSERT_THAT(r, IsOk());
  EXPECT_THAT(r->err, HasSubstr("note: trained as weights: scale"));
  r = RunCommand({RunfilePath("src/cli/quiltctl"), "train-local", model, "--data", "synthetic",
                  "--batch", "4", "--steps", "1", "--loss", "softmax_cross_entropy", "--frozen",
                  "scale"});
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_code, 0) << r->err;
  EXPECT_THAT(r->err, ::testing::Not(HasSubstr("note:")));
}

}  // namespace
}  // namespace quilt::testing
