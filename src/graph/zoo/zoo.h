// The model zoo: forward graphs of well-known models, named "zoo:NAME"
// wherever a model is expected. Each has a classification loss on its
// logits (the label input is added with the loss). Parameters carry seeded
// initializers, not values, so even GPT-2 XL builds in a fraction of a
// second and a few MB.
#ifndef QUILT_SRC_GRAPH_ZOO_ZOO_H_
#define QUILT_SRC_GRAPH_ZOO_ZOO_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/graph/graph.h"

namespace quilt::zoo {

struct ZooModel {
  std::string name;
  std::string description;
  // Published parameter count this model reproduces (0 if none).
  int64_t published_parameters;
};

const std::vector<ZooModel>& ZooModels();

// Errors: NOT_FOUND listing the known names.
absl::StatusOr<Graph> BuildZooModel(const std::string& name, uint64_t seed = 0);

// Builders (one file per family).
absl::StatusOr<Graph> BuildMlp(uint64_t seed);
absl::StatusOr<Graph> BuildCnn(uint64_t seed);
absl::StatusOr<Graph> BuildVgg19(uint64_t seed);
absl::StatusOr<Graph> BuildResNet(int depth, uint64_t seed);
absl::StatusOr<Graph> BuildInceptionV3(uint64_t seed);
absl::StatusOr<Graph> BuildTransformerBase(uint64_t seed);
absl::StatusOr<Graph> BuildBertLarge(uint64_t seed);
absl::StatusOr<Graph> BuildGpt2(int64_t layers, int64_t d, int64_t heads, uint64_t seed);

}  // namespace quilt::zoo

#endif  // QUILT_SRC_GRAPH_ZOO_ZOO_H_
