#include <cmath>
#include <fstream>
#include <set>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status.h"
#include "src/common/status_matchers.h"
#include "src/graph/autodiff.h"
#include "src/graph/graph_builder.h"
#include "src/graph/zoo/zoo.h"
#include "src/graph/zoo_training.h"
#include "src/runtime/data/dataset.h"
#include "src/runtime/data/label_range.h"
#include "src/runtime/data/npy.h"
#include "src/testing/temp_dir.h"

namespace quilt {
namespace {

// A batch of a one-input dataset.
absl::Status OneInput(Dataset* d, int64_t start, int64_t count, Tensor* x, Tensor* y) {
  std::vector<Tensor> xs;
  RETURN_IF_ERROR(d->Batch(start, count, &xs, y));
  if (xs.size() != 1) return absl::InternalError("not one input");
  *x = std::move(xs[0]);
  return absl::OkStatus();
}

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(Npy, RoundTripF32AndI64) {
  testing::TempDir dir;
  Tensor f = Tensor::FromF32({2, 3}, {1, 2, 3, 4, 5, -6.5});
  ASSERT_THAT(WriteNpy(dir.File("f.npy"), f), IsOk());
  auto back = ReadNpy(dir.File("f.npy"));
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(back->dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(back->f32()[5], -6.5f);
  Tensor i = Tensor::FromI64({4}, {7, -1, 0, 1LL << 40});
  ASSERT_THAT(WriteNpy(dir.File("i.npy"), i), IsOk());
  auto bi = ReadNpy(dir.File("i.npy"));
  ASSERT_THAT(bi, IsOk());
  EXPECT_EQ(bi->i64()[3], 1LL << 40);
}

TEST(Npy, BadFiles_ClearErrors) {
  testing::TempDir dir;
  Tensor f = Tensor::FromF32({8}, std::vector<float>(8, 1));
  ASSERT_THAT(WriteNpy(dir.File("f.npy"), f), IsOk());
  std::ifstream in(dir.File("f.npy"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  EXPECT_THAT(ParseNpy(bytes.substr(0, bytes.size() - 4), "x.npy"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("x.npy: not a supported .npy file: truncated data")));
  EXPECT_THAT(ParseNpy("garbage", "x.npy"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad magic")));
  std::string fortran = bytes;
  const size_t at = fortran.find("False");
  fortran.replace(at, 5, "True ");
  EXPECT_THAT(ParseNpy(fortran, "x.npy"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("Fortran")));
  EXPECT_THAT(ReadNpy("/nonexistent.npy"), StatusIs(absl::StatusCode::kNotFound));
}

// A version 1.0 file with `header` (padded) and `data_bytes` zero bytes.
std::string NpyWith(const std::string& header, size_t data_bytes) {
  std::string h = header;
  while ((10 + h.size() + 1) % 64 != 0) h += ' ';
  h += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(h.size() & 0xff);
  out += static_cast<char>(h.size() >> 8);
  return out + h + std::string(data_bytes, '\0');
}

TEST(Npy, AShapeLargerThanTheFileIsRefusedWhateverItsProduct) {
  // 2^58 + 64 rows of 16 floats: the byte count wraps around to the 4096
  // bytes the file has.
  const std::string wraps = NpyWith(
      "{'descr': '<f4', 'fortran_order': False, 'shape': (288230376151711808, 16), }", 4096);
  EXPECT_THAT(ParseNpy(wraps, "x.npy"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs more than the 4096")));
  const std::string huge =
      NpyWith("{'descr': '<f8', 'fortran_order': False, 'shape': (9223372036854775807, 9), }", 64);
  EXPECT_THAT(ParseNpy(huge, "x.npy"), StatusIs(absl::StatusCode::kInvalidArgument));
  const std::string fits =
      NpyWith("{'descr': '<f4', 'fortran_order': False, 'shape': (64, 16), }", 4096);
  absl::StatusOr<Tensor> t = ParseNpy(fits, "x.npy");
  ASSERT_THAT(t.status(), IsOk());
  EXPECT_EQ(t->numel(), 1024);
  const std::string empty =
      NpyWith("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 9223372036854775807), }", 0);
  EXPECT_THAT(ParseNpy(empty, "x.npy").status(), IsOk());
}

TEST(NumpyDataset, LabelsOfAnotherShape_HintAtTheClassesAxisOnlyWhereItIsTheLast) {
  testing::TempDir dir;
  ASSERT_THAT(WriteNpy(dir.File("x.npy"), Tensor::FromF32({8, 4}, std::vector<float>(32, 0.5f))),
              IsOk());
  ASSERT_THAT(WriteNpy(dir.File("y.npy"), Tensor::FromI64({8, 7}, std::vector<int64_t>(56, 1))),
              IsOk());
  DataSignature sig;
  sig.inputs.resize(1);
  sig.inputs[0].dtype = DType::kF32;
  sig.inputs[0].shape = Shape({Dim::Batch(1), Dim::Fixed(4)});
  sig.label.dtype = DType::kI64;
  sig.label.shape = Shape({Dim::Batch(1), Dim::Fixed(6)});
  for (bool classes_last : {true, false}) {
    sig.classes_last = classes_last;
    auto d = OpenNumpyDataset({dir.File("x.npy")}, dir.File("y.npy"), sig);
    ASSERT_FALSE(d.ok());
    EXPECT_THAT(d.status().message(), HasSubstr("labels have shape [8,7]; the model needs [N,6]"));
    EXPECT_EQ(absl::StrContains(d.status().message(), "transposed to [N, T, C]"), classes_last);
  }
  // The zoo's GPT-2: per-token classes on its output's last axis.
  for (const auto& [model, classes_last] : {std::pair{"gpt2", true}, {"mlp", false}}) {
    absl::StatusOr<Graph> g = zoo::BuildZooModel(model);
    ASSERT_THAT(g, IsOk());
    TrainingOptions o;
    o.optimizer.kind = OptimizerSpec::Kind::kSgd;
    ASSERT_THAT(BuildTrainingGraph(&*g, o), IsOk());
    absl::StatusOr<DataSignature> s = DataSignatureOf(*g);
    ASSERT_THAT(s, IsOk());
    EXPECT_EQ(s->classes_last, classes_last) << model;
  }
}

// A graph (read from a program a user gives) whose input or label names no
// tensor: an error naming it, not a crash.
TEST(DataSignature, AnInputOrLabelThatIsNoTensor_Named) {
  absl::StatusOr<Graph> g = zoo::ZooTrainingGraph("mlp");
  ASSERT_THAT(g, IsOk());
  ASSERT_THAT(DataSignatureOf(*g), IsOk());
  Graph input = *g;
  input.inputs[0] = "momentum";
  EXPECT_THAT(DataSignatureOf(input),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the graph's input 'momentum' is not a tensor of the graph")));
  Graph label = *g;
  label.labels[0] = "nowhere";
  EXPECT_THAT(DataSignatureOf(label),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the graph's label 'nowhere' is not a tensor of the graph")));
}

// The synthetic set of the zoo's MLP (784 features, 10 classes).
absl::StatusOr<std::unique_ptr<Dataset>> MlpSynthetic(uint64_t seed) {
  ASSIGN_OR_RETURN(Graph g, zoo::ZooTrainingGraph("mlp"));
  ASSIGN_OR_RETURN(DataSignature sig, DataSignatureOf(g));
  return MakeSyntheticDataset(g, sig, seed);
}

TEST(Synthetic, SameSampleSameDataWhateverTheBatching) {
  auto d = MlpSynthetic(5);
  ASSERT_THAT(d, IsOk());
  Tensor x8, y8, x3, y3;
  ASSERT_THAT(OneInput(d->get(), 0, 8, &x8, &y8), IsOk());
  ASSERT_THAT(OneInput(d->get(), 5, 3, &x3, &y3), IsOk());
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(y3.i64()[k], y8.i64()[5 + k]);
    EXPECT_EQ(x3.f32()[k * 784 + 17], x8.f32()[(5 + k) * 784 + 17]);
    EXPECT_GE(y3.i64()[k], 0);
    EXPECT_LT(y3.i64()[k], 10);
  }
}

// The zoo MLP trained with MSE (targets in (−1, 1)), and the same graph
// whose loss is its own (targets in (0, 1), as probabilities are).
TEST(Synthetic, TargetsOfTheModelsOwnLossAreInTheUnitInterval) {
  for (bool own : {false, true}) {
    absl::StatusOr<Graph> g = zoo::BuildZooModel("mlp");
    ASSERT_THAT(g, IsOk());
    TrainingOptions o;
    o.loss = LossType::kMse;
    o.optimizer.kind = OptimizerSpec::Kind::kSgd;
    g->loss = LossSpec();
    ASSERT_THAT(BuildTrainingGraph(&*g, o), IsOk());
    if (own) g->loss.type = LossType::kModel;
    absl::StatusOr<DataSignature> sig = DataSignatureOf(*g);
    ASSERT_THAT(sig, IsOk());
    auto d = MakeSyntheticDataset(*g, *sig, 3);
    ASSERT_THAT(d, IsOk());
    Tensor x, y;
    ASSERT_THAT(OneInput(d->get(), 0, 256, &x, &y), IsOk());
    ASSERT_EQ(y.dtype(), DType::kF32);
    float lo = 1, hi = -1;
    for (int64_t i = 0; i < y.numel(); ++i) {
      lo = std::min(lo, y.f32()[i]);
      hi = std::max(hi, y.f32()[i]);
    }
    EXPECT_GT(hi, lo + 0.5f) << own;  // spread out, not constant
    if (own) {
      EXPECT_GT(lo, 0.0f);
      EXPECT_LT(hi, 1.0f);
    } else {
      EXPECT_LT(lo, 0.0f);
      EXPECT_GT(lo, -1.0f);
      EXPECT_LT(hi, 1.0f);
    }
  }
}

// A token model with float targets (a regression on the tokens): targets
// in (−1, 1), spread out, and a function of the sample's tokens alone.
TEST(Synthetic, TokenInputsWithFloatTargetsGetFloatTargetsOfTheTokens) {
  Graph g;
  GraphBuilder b(&g);
  ASSERT_THAT(b.AddInput("ids", DType::kI64, Shape({Dim::Batch(), Dim::Fixed(6)})), IsOk());
  InitializerSpec n;
  n.kind = InitializerSpec::Kind::kNormal;
  n.stddev = 0.1;
  ASSERT_THAT(b.AddParameter("emb", Shape::Fixed({50, 8}), n), IsOk());
  ASSERT_THAT(b.AddParameter("w", Shape::Fixed({8, 1}), n), IsOk());
  ASSERT_THAT(b.Add("Gather", {"emb", "ids"}, {}, "e"), IsOk());
  Attrs mean;
  mean.SetInts("axes", {1});
  mean.SetInt("keepdims", 0);
  ASSERT_THAT(b.Add("ReduceMean", {"e"}, std::move(mean), "m"), IsOk());
  ASSERT_THAT(b.Add("MatMul", {"m", "w"}, {}, "y"), IsOk());
  g.outputs = {"y"};
  TrainingOptions o;
  o.loss = LossType::kMse;
  o.optimizer.kind = OptimizerSpec::Kind::kSgd;
  ASSERT_THAT(BuildTrainingGraph(&g, o), IsOk());
  absl::StatusOr<DataSignature> sig = DataSignatureOf(g);
  ASSERT_THAT(sig, IsOk());
  auto d = MakeSyntheticDataset(g, *sig, 3);
  ASSERT_THAT(d, IsOk());
  Tensor x, y, x5, y5;
  ASSERT_THAT(OneInput(d->get(), 0, 256, &x, &y), IsOk());
  ASSERT_THAT(OneInput(d->get(), 10, 5, &x5, &y5), IsOk());
  ASSERT_EQ(y.dtype(), DType::kF32);
  ASSERT_EQ(y.numel(), 256);
  float lo = 1, hi = -1;
  for (int64_t i = 0; i < y.numel(); ++i) {
    lo = std::min(lo, y.f32()[i]);
    hi = std::max(hi, y.f32()[i]);
    for (int j = 0; j < 6; ++j) {
      ASSERT_GE(x.i64()[i * 6 + j], 0);
      ASSERT_LT(x.i64()[i * 6 + j], 50);
    }
  }
  EXPECT_GT(lo, -1.0f);
  EXPECT_LT(hi, 1.0f);
  EXPECT_GT(hi, lo + 0.5f);
  for (int k = 0; k < 5; ++k) EXPECT_EQ(y5.f32()[k], y.f32()[10 + k]);
  // Samples with the same tokens have the same target; others differ.
  int same = 0, differ = 0;
  for (int64_t i = 1; i < 256; ++i) {
    const bool tokens_equal = std::equal(x.i64() + i * 6, x.i64() + i * 6 + 6, x.i64());
    (y.f32()[i] == y.f32()[0]) == tokens_equal ? ++same : ++differ;
  }
  EXPECT_EQ(differ, 0);
}

// The inputs are unit normals around ±0.5 class centres: second moment
// 1 + 0.25, and cosine and sine elements alike.
TEST(Synthetic, InputsAreUnitNormalsAroundTheClassCentres) {
  auto d = MlpSynthetic(7);
  ASSERT_THAT(d, IsOk());
  Tensor x, y;
  constexpr int64_t kRows = 512;
  ASSERT_THAT(OneInput(d->get(), 1000, kRows, &x, &y), IsOk());
  const int64_t f = x.numel() / kRows;
  double even = 0, odd = 0;
  int64_t n_even = 0, n_odd = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    ASSERT_TRUE(std::isfinite(x.f32()[i])) << i;
    const double v = x.f32()[i];
    ((i % f) % 2 == 0 ? even : odd) += v * v;
    ++((i % f) % 2 == 0 ? n_even : n_odd);
  }
  EXPECT_NEAR(even / n_even, 1.25, 0.05);
  EXPECT_NEAR(odd / n_odd, 1.25, 0.05);
  // Two samples of one class differ (fresh noise), by about √2 per element.
  int64_t a = -1, b = -1;
  for (int64_t i = 0; i < kRows && b < 0; ++i) {
    if (a < 0) {
      a = i;
    } else if (y.i64()[i] == y.i64()[a]) {
      b = i;
    }
  }
  ASSERT_GE(b, 0);
  double diff = 0;
  for (int64_t e = 0; e < f; ++e) {
    const double t = x.f32()[a * f + e] - x.f32()[b * f + e];
    diff += t * t;
  }
  EXPECT_NEAR(diff / f, 2.0, 0.3);
}

// A classifier of three inputs: word ids (vocabulary 50), segment ids
// (vocabulary 3) and an attention mask no embedding reads, as a BERT-style
// export has them.
absl::StatusOr<Graph> ThreeInputClassifier() {
  Graph g;
  GraphBuilder b(&g);
  const Shape tokens({Dim::Batch(), Dim::Fixed(6)});
  RETURN_IF_ERROR(b.AddInput("ids", DType::kI64, tokens).status());
  RETURN_IF_ERROR(b.AddInput("segments", DType::kI64, tokens).status());
  RETURN_IF_ERROR(b.AddInput("mask", DType::kI64, tokens).status());
  InitializerSpec n;
  n.kind = InitializerSpec::Kind::kNormal;
  n.stddev = 0.1;
  RETURN_IF_ERROR(b.AddParameter("emb", Shape::Fixed({50, 8}), n).status());
  RETURN_IF_ERROR(b.AddParameter("seg", Shape::Fixed({3, 8}), n).status());
  RETURN_IF_ERROR(b.AddParameter("w", Shape::Fixed({8, 5}), n).status());
  RETURN_IF_ERROR(b.Add("Gather", {"emb", "ids"}, {}, "e").status());
  RETURN_IF_ERROR(b.Add("Gather", {"seg", "segments"}, {}, "s").status());
  RETURN_IF_ERROR(b.Add("Add", {"e", "s"}, {}, "es").status());
  Attrs mean;
  mean.SetInts("axes", {1});
  mean.SetInt("keepdims", 0);
  RETURN_IF_ERROR(b.Add("ReduceMean", {"es"}, mean, "m").status());
  RETURN_IF_ERROR(b.Add("MatMul", {"m", "w"}, {}, "logits").status());
  Attrs to_f32;
  to_f32.SetString("to", "f32");
  RETURN_IF_ERROR(b.Add("Cast", {"mask"}, std::move(to_f32), "maskf").status());
  mean.SetInt("keepdims", 1);
  RETURN_IF_ERROR(b.Add("ReduceMean", {"maskf"}, std::move(mean), "kept").status());
  RETURN_IF_ERROR(b.Add("Mul", {"logits", "kept"}, {}, "out").status());
  g.outputs = {"out"};
  TrainingOptions o;
  o.loss = LossType::kSoftmaxCrossEntropy;
  o.optimizer.kind = OptimizerSpec::Kind::kSgd;
  RETURN_IF_ERROR(BuildTrainingGraph(&g, o));
  return g;
}

TEST(Synthetic, SeveralInputsEachGetTheirKindAndTheLabelsFollowTheWords) {
  absl::StatusOr<Graph> g = ThreeInputClassifier();
  ASSERT_THAT(g, IsOk());
  absl::StatusOr<DataSignature> sig = DataSignatureOf(*g);
  ASSERT_THAT(sig, IsOk());
  ASSERT_EQ(sig->inputs.size(), 3u);
  EXPECT_EQ(sig->inputs[2].name, "mask");
  auto d = MakeSyntheticDataset(*g, *sig, 11);
  ASSERT_THAT(d, IsOk());
  std::vector<Tensor> xs, xs4;
  Tensor y, y4;
  ASSERT_THAT((*d)->Batch(0, 128, &xs, &y), IsOk());
  ASSERT_THAT((*d)->Batch(7, 4, &xs4, &y4), IsOk());
  ASSERT_EQ(xs.size(), 3u);
  std::set<int64_t> words, segments;
  for (int64_t e = 0; e < 128 * 6; ++e) {
    words.insert(xs[0].i64()[e]);
    segments.insert(xs[1].i64()[e]);
    EXPECT_EQ(xs[2].i64()[e], 1) << "the mask keeps every token";
  }
  EXPECT_EQ(*words.begin(), 0);
  EXPECT_EQ(*words.rbegin(), 49);
  EXPECT_EQ(segments, (std::set<int64_t>{0, 1, 2}));
  // Inputs are independent streams, and a sample is the same data in any
  // batch.
  EXPECT_FALSE(std::equal(xs[0].i64(), xs[0].i64() + 6, xs[1].i64()));
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(y4.i64()[k], y.i64()[7 + k]);
    EXPECT_EQ(xs4[1].i64()[k * 6 + 2], xs[1].i64()[(7 + k) * 6 + 2]);
  }
  // The labels are a function of the words (the largest vocabulary): of
  // the last word, which a recurrent or causal model's last state has just
  // read.
  for (int64_t i = 0; i < 128; ++i) EXPECT_EQ(y.i64()[i], (xs[0].i64()[i * 6 + 5] * 3 + 1) % 5);
}

TEST(NumpyDataset, AFilePerInputInTheModelsOrderAndACountThatMustMatch) {
  absl::StatusOr<Graph> g = ThreeInputClassifier();
  ASSERT_THAT(g, IsOk());
  absl::StatusOr<DataSignature> sig = DataSignatureOf(*g);
  ASSERT_THAT(sig, IsOk());
  testing::TempDir dir;
  std::vector<int64_t> ids(4 * 6), segments(4 * 6, 2), mask(4 * 6, 1);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
  ASSERT_THAT(WriteNpy(dir.File("ids.npy"), Tensor::FromI64({4, 6}, ids)), IsOk());
  ASSERT_THAT(WriteNpy(dir.File("seg.npy"), Tensor::FromI64({4, 6}, segments)), IsOk());
  ASSERT_THAT(WriteNpy(dir.File("mask.npy"), Tensor::FromI64({4, 6}, mask)), IsOk());
  ASSERT_THAT(WriteNpy(dir.File("y.npy"), Tensor::FromI64({4}, {0, 1, 2, 3})), IsOk());
  auto d = OpenNumpyDataset({dir.File("ids.npy"), dir.File("seg.npy"), dir.File("mask.npy")},
                            dir.File("y.npy"), *sig);
  ASSERT_THAT(d, IsOk());
  std::vector<Tensor> xs;
  Tensor y;
  ASSERT_THAT((*d)->Batch(3, 2, &xs, &y), IsOk());  // samples 3 and 0
  ASSERT_EQ(xs.size(), 3u);
  EXPECT_EQ(xs[0].i64()[0], 18);
  EXPECT_EQ(xs[0].i64()[6], 0);
  EXPECT_EQ(xs[1].i64()[0], 2);
  EXPECT_EQ(y.i64()[0], 3);
  // Two files for three inputs: named, in order.
  EXPECT_THAT(OpenNumpyDataset({dir.File("ids.npy"), dir.File("seg.npy")}, dir.File("y.npy"), *sig)
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("3 input(s) (ids, segments, mask), but 2 inputs file(s)")));
  // A file of another shape names its input.
  ASSERT_THAT(WriteNpy(dir.File("short.npy"), Tensor::FromI64({4, 5}, std::vector<int64_t>(20))),
              IsOk());
  EXPECT_THAT(OpenNumpyDataset({dir.File("ids.npy"), dir.File("short.npy"), dir.File("mask.npy")},
                               dir.File("y.npy"), *sig)
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("inputs 'segments' have shape [4,5]; the model needs [N,6]")));
}

// A label outside the model's classes is refused before a job starts,
// naming the file, the sample and the label; the loss's ignore_index is
// allowed; labels that reach the loss through a slice are left to it.
TEST(LabelRange, LabelsOutsideTheClassesAreRefusedNamingTheSample) {
  absl::StatusOr<Graph> g = zoo::ZooTrainingGraph("mlp");
  ASSERT_THAT(g, IsOk());
  absl::StatusOr<DataSignature> sig = DataSignatureOf(*g);
  ASSERT_THAT(sig, IsOk());
  const LabelUse use = LabelsAsTheLossReadsThem(*g, sig->label.name);
  EXPECT_EQ(use.classes, 10);
  EXPECT_TRUE(use.every_value);
  testing::TempDir dir;
  auto check = [&](const std::vector<int64_t>& labels) {
    const std::string path = dir.File("y.npy");
    EXPECT_THAT(WriteNpy(path, Tensor::FromI64({static_cast<int64_t>(labels.size())}, labels)),
                IsOk());
    return CheckLabelRange(*g, *sig, path);
  };
  EXPECT_THAT(check({0, 9, 3, 0}), IsOk());
  EXPECT_THAT(check({0, 9, 10, 0}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("y.npy"), HasSubstr("label 10 of sample 2"),
                             HasSubstr("not a class in [0, 10)"))));
  EXPECT_THAT(check({-1, 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("label -1 of sample 0")));
  // Labels many chunks long: the sample is counted across them.
  std::vector<int64_t> many(200000, 1);
  many[150001] = 1000;
  EXPECT_THAT(check(many), StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr("label 1000 of sample 150001")));
  // The loss skips its ignore_index.
  for (Op& op : g->ops) {
    if (op.type == "SoftmaxCrossEntropyLoss") op.attrs.SetInt("ignore_index", -100);
  }
  EXPECT_THAT(check({-100, 3}), IsOk());
  EXPECT_THAT(check({-5, 3}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("and skips -100")));
  // Through a slice, not every value reaches the loss: left to the loss.
  for (Op& op : g->ops) {
    if (op.type == "SoftmaxCrossEntropyLoss") {
      Op slice;
      slice.name = "label_slice";
      slice.type = "Slice";
      slice.inputs = {op.inputs[1]};
      slice.outputs = {"sliced_labels"};
      op.inputs[1] = "sliced_labels";
      g->ops.insert(g->ops.begin(), slice);
      break;
    }
  }
  EXPECT_FALSE(LabelsAsTheLossReadsThem(*g, sig->label.name).every_value);
  EXPECT_THAT(check({-5, 3}), IsOk());
}

}  // namespace
}  // namespace quilt
