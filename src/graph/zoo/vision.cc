// Vision models: MLP, small CNN, VGG-19, ResNet-50/152, Inception-v3 (the
// torchvision architectures, parameter for parameter).
#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/graph/zoo/layers.h"
#include "src/graph/zoo/zoo.h"

namespace quilt::zoo {
namespace {

absl::Status Classify(Graph* g, const std::string& logits) {
  g->outputs = {logits};
  g->loss.type = LossType::kSoftmaxCrossEntropy;
  g->loss.prediction = logits;
  return absl::OkStatus();
}

absl::StatusOr<std::string> ConvBnRelu(Layers& l, const std::string& name, const std::string& x,
                                       int64_t in, int64_t out, int64_t kh, int64_t kw,
                                       int64_t stride, std::vector<int64_t> pads) {
  ASSIGN_OR_RETURN(std::string y, l.Conv(name + ".conv", x, in, out, kh, kw, stride, pads, false));
  ASSIGN_OR_RETURN(y, l.BatchNorm(name + ".bn", y, out));
  return l.Relu(y);
}

absl::StatusOr<std::string> Dropout(Layers& l, const std::string& x) {
  Attrs a;
  a.SetFloat("ratio", 0.5);
  ASSIGN_OR_RETURN(std::vector<std::string> outs, l.b().AddOp("Dropout", {x}, std::move(a), 2));
  return outs[0];
}

}  // namespace

absl::StatusOr<Graph> BuildMlp(uint64_t seed) {
  Graph g;
  Layers l(&g, seed);
  ASSIGN_OR_RETURN(std::string x, l.Input("x", DType::kF32, {784}));
  ASSIGN_OR_RETURN(x, l.Linear("fc1", x, 784, 512));
  ASSIGN_OR_RETURN(x, l.Relu(x));
  ASSIGN_OR_RETURN(x, l.Linear("fc2", x, 512, 512));
  ASSIGN_OR_RETURN(x, l.Relu(x));
  ASSIGN_OR_RETURN(x, l.Linear("fc3", x, 512, 10));
  RETURN_IF_ERROR(Classify(&g, x));
  return g;
}

absl::StatusOr<Graph> BuildCnn(uint64_t seed) {
  Graph g;
  Layers l(&g, seed);
  ASSIGN_OR_RETURN(std::string x, l.Input("x", DType::kF32, {3, 32, 32}));
  ASSIGN_OR_RETURN(x, l.Conv("conv1", x, 3, 32, 3, 3, 1, {1, 1, 1, 1}));
  ASSIGN_OR_RETURN(x, l.Relu(x));
  ASSIGN_OR_RETURN(x, l.MaxPool(x, 2, 2));
  ASSIGN_OR_RETURN(x, l.Conv("conv2", x, 32, 64, 3, 3, 1, {1, 1, 1, 1}));
  ASSIGN_OR_RETURN(x, l.Relu(x));
  ASSIGN_OR_RETURN(x, l.MaxPool(x, 2, 2));
  ASSIGN_OR_RETURN(x, l.Op("Flatten", {x}));
  ASSIGN_OR_RETURN(x, l.Linear("fc1", x, 64 * 8 * 8, 256));
  ASSIGN_OR_RETURN(x, l.Relu(x));
  ASSIGN_OR_RETURN(x, l.Linear("fc2", x, 256, 10));
  RETURN_IF_ERROR(Classify(&g, x));
  return g;
}

absl::StatusOr<Graph> BuildVgg19(uint64_t seed) {
  Graph g;
  Layers l(&g, seed);
  ASSIGN_OR_RETURN(std::string x, l.Input("x", DType::kF32, {3, 224, 224}));
  const int64_t cfg[] = {64,  64,  0,   128, 128, 0,   256, 256, 256, 256, 0,
                         512, 512, 512, 512, 0,   512, 512, 512, 512, 0};
  int64_t in = 3, idx = 0;
  for (int64_t c : cfg) {
    if (c == 0) {
      ASSIGN_OR_RETURN(x, l.MaxPool(x, 2, 2));
    } else {
      ASSIGN_OR_RETURN(x,
                       l.Conv(absl::StrCat("features.", idx++), x, in, c, 3, 3, 1, {1, 1, 1, 1}));
      ASSIGN_OR_RETURN(x, l.Relu(x));
      in = c;
    }
  }
  ASSIGN_OR_RETURN(x, l.Op("Flatten", {x}));
  ASSIGN_OR_RETURN(x, l.Linear("classifier.0", x, 512 * 7 * 7, 4096));
  ASSIGN_OR_RETURN(x, l.Relu(x));
  ASSIGN_OR_RETURN(x, Dropout(l, x));
  ASSIGN_OR_RETURN(x, l.Linear("classifier.3", x, 4096, 4096));
  ASSIGN_OR_RETURN(x, l.Relu(x));
  ASSIGN_OR_RETURN(x, Dropout(l, x));
  ASSIGN_OR_RETURN(x, l.Linear("classifier.6", x, 4096, 1000));
  RETURN_IF_ERROR(Classify(&g, x));
  return g;
}

absl::StatusOr<Graph> BuildResNet(int depth, uint64_t seed) {
  std::vector<int> blocks;
  if (depth == 50) {
    blocks = {3, 4, 6, 3};
  } else if (depth == 152) {
    blocks = {3, 8, 36, 3};
  } else {
    return absl::InvalidArgumentError(absl::StrCat("no ResNet-", depth));
  }
  Graph g;
  Layers l(&g, seed);
  ASSIGN_OR_RETURN(std::string x, l.Input("x", DType::kF32, {3, 224, 224}));
  ASSIGN_OR_RETURN(x, ConvBnRelu(l, "stem", x, 3, 64, 7, 7, 2, {3, 3, 3, 3}));
  ASSIGN_OR_RETURN(x, l.MaxPool(x, 3, 2, {1, 1, 1, 1}));
  int64_t in = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t width = 64 << stage, out = width * 4;
    for (int b = 0; b < blocks[stage]; ++b) {
      const std::string n = absl::StrCat("layer", stage + 1, ".", b);
      const int64_t stride = (b == 0 && stage > 0) ? 2 : 1;
      ASSIGN_OR_RETURN(std::string y, ConvBnRelu(l, n + ".1", x, in, width, 1, 1, 1, {0, 0, 0, 0}));
      ASSIGN_OR_RETURN(y, ConvBnRelu(l, n + ".2", y, width, width, 3, 3, stride, {1, 1, 1, 1}));
      ASSIGN_OR_RETURN(y, l.Conv(n + ".3.conv", y, width, out, 1, 1, 1, {0, 0, 0, 0}, false));
      ASSIGN_OR_RETURN(y, l.BatchNorm(n + ".3.bn", y, out));
      std::string shortcut = x;
      if (b == 0) {
        ASSIGN_OR_RETURN(shortcut, l.Conv(n + ".downsample.conv", x, in, out, 1, 1, stride,
                                          {0, 0, 0, 0}, false));
        ASSIGN_OR_RETURN(shortcut, l.BatchNorm(n + ".downsample.bn", shortcut, out));
      }
      ASSIGN_OR_RETURN(y, l.Add(y, shortcut));
      ASSIGN_OR_RETURN(x, l.Relu(y));
      in = out;
    }
  }
  ASSIGN_OR_RETURN(x, l.Op("GlobalAveragePool", {x}));
  ASSIGN_OR_RETURN(x, l.Op("Flatten", {x}));
  ASSIGN_OR_RETURN(x, l.Linear("fc", x, 2048, 1000));
  RETURN_IF_ERROR(Classify(&g, x));
  return g;
}

namespace {

// torchvision's BasicConv2d: conv (no bias) + batch norm (eps 0.001) + relu.
absl::StatusOr<std::string> Basic(Layers& l, const std::string& name, const std::string& x,
                                  int64_t in, int64_t out, int64_t kh, int64_t kw,
                                  int64_t stride = 1, std::vector<int64_t> pads = {0, 0, 0, 0}) {
  return ConvBnRelu(l, name, x, in, out, kh, kw, stride, pads);
}

absl::StatusOr<std::string> AvgPool3(Layers& l, const std::string& x) {
  Attrs a;
  a.SetInts("kernel_shape", {3, 3});
  a.SetInts("strides", {1, 1});
  a.SetInts("pads", {1, 1, 1, 1});
  a.SetInt("count_include_pad", 1);
  return l.Op("AveragePool", {x}, std::move(a));
}

absl::StatusOr<std::string> Cat(Layers& l, std::vector<std::string> parts) {
  Attrs a;
  a.SetInt("axis", 1);
  return l.Op("Concat", std::move(parts), std::move(a));
}

absl::StatusOr<std::string> InceptionA(Layers& l, const std::string& n, const std::string& x,
                                       int64_t in, int64_t pool) {
  ASSIGN_OR_RETURN(std::string b1, Basic(l, n + ".b1x1", x, in, 64, 1, 1));
  ASSIGN_OR_RETURN(std::string b5, Basic(l, n + ".b5x5_1", x, in, 48, 1, 1));
  ASSIGN_OR_RETURN(b5, Basic(l, n + ".b5x5_2", b5, 48, 64, 5, 5, 1, {2, 2, 2, 2}));
  ASSIGN_OR_RETURN(std::string b3, Basic(l, n + ".b3x3dbl_1", x, in, 64, 1, 1));
  ASSIGN_OR_RETURN(b3, Basic(l, n + ".b3x3dbl_2", b3, 64, 96, 3, 3, 1, {1, 1, 1, 1}));
  ASSIGN_OR_RETURN(b3, Basic(l, n + ".b3x3dbl_3", b3, 96, 96, 3, 3, 1, {1, 1, 1, 1}));
  ASSIGN_OR_RETURN(std::string bp, AvgPool3(l, x));
  ASSIGN_OR_RETURN(bp, Basic(l, n + ".bpool", bp, in, pool, 1, 1));
  return Cat(l, {b1, b5, b3, bp});
}

absl::StatusOr<std::string> InceptionB(Layers& l, const std::string& n, const std::string& x,
                                       int64_t in) {
  ASSIGN_OR_RETURN(std::string b3, Basic(l, n + ".b3x3", x, in, 384, 3, 3, 2));
  ASSIGN_OR_RETURN(std::string bd, Basic(l, n + ".b3x3dbl_1", x, in, 64, 1, 1));
  ASSIGN_OR_RETURN(bd, Basic(l, n + ".b3x3dbl_2", bd, 64, 96, 3, 3, 1, {1, 1, 1, 1}));
  ASSIGN_OR_RETURN(bd, Basic(l, n + ".b3x3dbl_3", bd, 96, 96, 3, 3, 2));
  ASSIGN_OR_RETURN(std::string bp, l.MaxPool(x, 3, 2));
  return Cat(l, {b3, bd, bp});
}

absl::StatusOr<std::string> InceptionC(Layers& l, const std::string& n, const std::string& x,
                                       int64_t in, int64_t c7) {
  const std::vector<int64_t> p17 = {0, 3, 0, 3}, p71 = {3, 0, 3, 0};
  ASSIGN_OR_RETURN(std::string b1, Basic(l, n + ".b1x1", x, in, 192, 1, 1));
  ASSIGN_OR_RETURN(std::string b7, Basic(l, n + ".b7x7_1", x, in, c7, 1, 1));
  ASSIGN_OR_RETURN(b7, Basic(l, n + ".b7x7_2", b7, c7, c7, 1, 7, 1, p17));
  ASSIGN_OR_RETURN(b7, Basic(l, n + ".b7x7_3", b7, c7, 192, 7, 1, 1, p71));
  ASSIGN_OR_RETURN(std::string bd, Basic(l, n + ".b7x7dbl_1", x, in, c7, 1, 1));
  ASSIGN_OR_RETURN(bd, Basic(l, n + ".b7x7dbl_2", bd, c7, c7, 7, 1, 1, p71));
  ASSIGN_OR_RETURN(bd, Basic(l, n + ".b7x7dbl_3", bd, c7, c7, 1, 7, 1, p17));
  ASSIGN_OR_RETURN(bd, Basic(l, n + ".b7x7dbl_4", bd, c7, c7, 7, 1, 1, p71));
  ASSIGN_OR_RETURN(bd, Basic(l, n + ".b7x7dbl_5", bd, c7, 192, 1, 7, 1, p17));
  ASSIGN_OR_RETURN(std::string bp, AvgPool3(l, x));
  ASSIGN_OR_RETURN(bp, Basic(l, n + ".bpool", bp, in, 192, 1, 1));
  return Cat(l, {b1, b7, bd, bp});
}

absl::StatusOr<std::string> InceptionD(Layers& l, const std::string& n, const std::string& x,
                                       int64_t in) {
  ASSIGN_OR_RETURN(std::string b3, Basic(l, n + ".b3x3_1", x, in, 192, 1, 1));
  ASSIGN_OR_RETURN(b3, Basic(l, n + ".b3x3_2", b3, 192, 320, 3, 3, 2));
  ASSIGN_OR_RETURN(std::string b7, Basic(l, n + ".b7x7x3_1", x, in, 192, 1, 1));
  ASSIGN_OR_RETURN(b7, Basic(l, n + ".b7x7x3_2", b7, 192, 192, 1, 7, 1, {0, 3, 0, 3}));
  ASSIGN_OR_RETURN(b7, Basic(l, n + ".b7x7x3_3", b7, 192, 192, 7, 1, 1, {3, 0, 3, 0}));
  ASSIGN_OR_RETURN(b7, Basic(l, n + ".b7x7x3_4", b7, 192, 192, 3, 3, 2));
  ASSIGN_OR_RETURN(std::string bp, l.MaxPool(x, 3, 2));
  return Cat(l, {b3, b7, bp});
}

absl::StatusOr<std::string> InceptionE(Layers& l, const std::string& n, const std::string& x,
                                       int64_t in) {
  const std::vector<int64_t> p13 = {0, 1, 0, 1}, p31 = {1, 0, 1, 0};
  ASSIGN_OR_RETURN(std::string b1, Basic(l, n + ".b1x1", x, in, 320, 1, 1));
  ASSIGN_OR_RETURN(std::string b3, Basic(l, n + ".b3x3_1", x, in, 384, 1, 1));
  ASSIGN_OR_RETURN(std::string b3a, Basic(l, n + ".b3x3_2a", b3, 384, 384, 1, 3, 1, p13));
  ASSIGN_OR_RETURN(std::string b3b, Basic(l, n + ".b3x3_2b", b3, 384, 384, 3, 1, 1, p31));
  ASSIGN_OR_RETURN(std::string bd, Basic(l, n + ".b3x3dbl_1", x, in, 448, 1, 1));
  ASSIGN_OR_RETURN(bd, Basic(l, n + ".b3x3dbl_2", bd, 448, 384, 3, 3, 1, {1, 1, 1, 1}));
  ASSIGN_OR_RETURN(std::string bda, Basic(l, n + ".b3x3dbl_3a", bd, 384, 384, 1, 3, 1, p13));
  ASSIGN_OR_RETURN(std::string bdb, Basic(l, n + ".b3x3dbl_3b", bd, 384, 384, 3, 1, 1, p31));
  ASSIGN_OR_RETURN(std::string bp, AvgPool3(l, x));
  ASSIGN_OR_RETURN(bp, Basic(l, n + ".bpool", bp, in, 192, 1, 1));
  return Cat(l, {b1, b3a, b3b, bda, bdb, bp});
}

}  // namespace

absl::StatusOr<Graph> BuildInceptionV3(uint64_t seed) {
  Graph g;
  Layers l(&g, seed);
  ASSIGN_OR_RETURN(std::string x, l.Input("x", DType::kF32, {3, 299, 299}));
  ASSIGN_OR_RETURN(x, Basic(l, "Conv2d_1a", x, 3, 32, 3, 3, 2));
  ASSIGN_OR_RETURN(x, Basic(l, "Conv2d_2a", x, 32, 32, 3, 3));
  ASSIGN_OR_RETURN(x, Basic(l, "Conv2d_2b", x, 32, 64, 3, 3, 1, {1, 1, 1, 1}));
  ASSIGN_OR_RETURN(x, l.MaxPool(x, 3, 2));
  ASSIGN_OR_RETURN(x, Basic(l, "Conv2d_3b", x, 64, 80, 1, 1));
  ASSIGN_OR_RETURN(x, Basic(l, "Conv2d_4a", x, 80, 192, 3, 3));
  ASSIGN_OR_RETURN(x, l.MaxPool(x, 3, 2));
  ASSIGN_OR_RETURN(x, InceptionA(l, "Mixed_5b", x, 192, 32));
  ASSIGN_OR_RETURN(x, InceptionA(l, "Mixed_5c", x, 256, 64));
  ASSIGN_OR_RETURN(x, InceptionA(l, "Mixed_5d", x, 288, 64));
  ASSIGN_OR_RETURN(x, InceptionB(l, "Mixed_6a", x, 288));
  ASSIGN_OR_RETURN(x, InceptionC(l, "Mixed_6b", x, 768, 128));
  ASSIGN_OR_RETURN(x, InceptionC(l, "Mixed_6c", x, 768, 160));
  ASSIGN_OR_RETURN(x, InceptionC(l, "Mixed_6d", x, 768, 160));
  ASSIGN_OR_RETURN(x, InceptionC(l, "Mixed_6e", x, 768, 192));
  ASSIGN_OR_RETURN(x, InceptionD(l, "Mixed_7a", x, 768));
  ASSIGN_OR_RETURN(x, InceptionE(l, "Mixed_7b", x, 1280));
  ASSIGN_OR_RETURN(x, InceptionE(l, "Mixed_7c", x, 2048));
  ASSIGN_OR_RETURN(x, l.Op("GlobalAveragePool", {x}));
  ASSIGN_OR_RETURN(x, l.Op("Flatten", {x}));
  ASSIGN_OR_RETURN(x, Dropout(l, x));
  ASSIGN_OR_RETURN(x, l.Linear("fc", x, 2048, 1000));
  RETURN_IF_ERROR(Classify(&g, x));
  return g;
}

}  // namespace quilt::zoo
