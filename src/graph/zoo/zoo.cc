#include "src/graph/zoo/zoo.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace quilt::zoo {

const std::vector<ZooModel>& ZooModels() {
  static const auto* models = new std::vector<ZooModel>{
      {"mlp", "MLP 784-512-512-10 (MNIST-sized)", 0},
      {"cnn", "small CNN for 3×32×32 images, 10 classes", 0},
      {"vgg19", "VGG-19, 224×224, 1000 classes", 143'667'240},
      {"resnet50", "ResNet-50, 224×224, 1000 classes", 25'557'032},
      {"resnet152", "ResNet-152, 224×224, 1000 classes", 60'192'808},
      {"inception_v3", "Inception-v3 (no auxiliary head), 299×299, 1000 classes", 23'834'568},
      {"transformer", "Transformer base: 6+6 layers, d 512, 8 heads, vocab 37000 shared, seq 128",
       0},
      {"bert_large", "BERT-large with MLM head: 24 layers, d 1024, 16 heads, seq 128", 335'000'000},
      {"gpt2", "GPT-2 (124M): 12 layers, d 768, 12 heads, seq 1024", 124'439'808},
      {"gpt2_xl", "GPT-2 XL (1.5B): 48 layers, d 1600, 25 heads, seq 1024", 1'557'611'200},
  };
  return *models;
}

absl::StatusOr<Graph> BuildZooModel(const std::string& name, uint64_t seed) {
  absl::StatusOr<Graph> g;
  if (name == "mlp") {
    g = BuildMlp(seed);
  } else if (name == "cnn") {
    g = BuildCnn(seed);
  } else if (name == "vgg19") {
    g = BuildVgg19(seed);
  } else if (name == "resnet50") {
    g = BuildResNet(50, seed);
  } else if (name == "resnet152") {
    g = BuildResNet(152, seed);
  } else if (name == "inception_v3") {
    g = BuildInceptionV3(seed);
  } else if (name == "transformer") {
    g = BuildTransformerBase(seed);
  } else if (name == "bert_large") {
    g = BuildBertLarge(seed);
  } else if (name == "gpt2") {
    g = BuildGpt2(12, 768, 12, seed);
  } else if (name == "gpt2_xl") {
    g = BuildGpt2(48, 1600, 25, seed);
  } else {
    std::vector<std::string> names;
    for (const ZooModel& m : ZooModels()) names.push_back(m.name);
    return absl::NotFoundError(
        absl::StrCat("no zoo model '", name, "'; known: ", absl::StrJoin(names, ", ")));
  }
  if (g.ok()) g->name = name;
  return g;
}

}  // namespace quilt::zoo
