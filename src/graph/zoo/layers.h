// Building blocks for model-zoo graphs on top of GraphBuilder, with PyTorch's
// default initializations (uniform ±1/sqrt(fan_in) for linear and
// convolution weights and biases; ones/zeros for norms; N(0, 0.02) for
// transformer embeddings). Each parameter's seed is derived from its name,
// so graphs are reproducible.
#ifndef QUILT_SRC_GRAPH_ZOO_LAYERS_H_
#define QUILT_SRC_GRAPH_ZOO_LAYERS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/graph/graph_builder.h"

namespace quilt::zoo {

class Layers {
 public:
  Layers(Graph* graph, uint64_t seed) : b_(graph), seed_(seed) {}
  GraphBuilder& b() { return b_; }

  absl::StatusOr<std::string> Input(const std::string& name, DType dtype,
                                    std::vector<int64_t> per_sample_dims);
  // y = x·W + b over the last dim; W [in, out].
  absl::StatusOr<std::string> Linear(const std::string& name, const std::string& x, int64_t in,
                                     int64_t out, bool bias = true);
  absl::StatusOr<std::string> Conv(const std::string& name, const std::string& x, int64_t in,
                                   int64_t out, int64_t kh, int64_t kw, int64_t stride = 1,
                                   std::vector<int64_t> pads = {0, 0, 0, 0}, bool bias = true,
                                   int64_t group = 1);
  absl::StatusOr<std::string> BatchNorm(const std::string& name, const std::string& x,
                                        int64_t channels);
  absl::StatusOr<std::string> LayerNorm(const std::string& name, const std::string& x, int64_t dim);
  absl::StatusOr<std::string> Embedding(const std::string& name, const std::string& ids,
                                        int64_t vocab, int64_t dim);
  absl::StatusOr<std::string> Op(const std::string& type, std::vector<std::string> in,
                                 Attrs attrs = {}, const std::string& hint = "");
  absl::StatusOr<std::string> Relu(const std::string& x) { return Op("Relu", {x}); }
  absl::StatusOr<std::string> Gelu(const std::string& x, bool tanh = false);
  absl::StatusOr<std::string> Add(const std::string& a, const std::string& b) {
    return Op("Add", {a, b});
  }
  absl::StatusOr<std::string> MaxPool(const std::string& x, int64_t k, int64_t s,
                                      std::vector<int64_t> pads = {0, 0, 0, 0});
  absl::StatusOr<std::string> AvgPool(const std::string& x, int64_t k, int64_t s,
                                      std::vector<int64_t> pads = {0, 0, 0, 0});
  absl::StatusOr<std::string> Reshape(const std::string& x, std::vector<int64_t> shape);
  absl::StatusOr<std::string> Transpose(const std::string& x, std::vector<int64_t> perm);
  // Multi-head attention over [B, S, D] (self when kv == q), with an
  // optional additive mask tensor [S_q, S_kv] ("" = none). Returns the output
  // projection.
  absl::StatusOr<std::string> Attention(const std::string& name, const std::string& q_in,
                                        const std::string& kv_in, int64_t d, int64_t heads,
                                        int64_t s_q, int64_t s_kv, const std::string& mask);
  // A [s, s] constant with -1e9 above the diagonal (causal attention).
  absl::StatusOr<std::string> CausalMask(int64_t s);
  // Parameter with an explicit initializer.
  absl::StatusOr<std::string> Param(const std::string& name, std::vector<int64_t> dims,
                                    InitializerSpec init);

 private:
  InitializerSpec Uniform(double bound, const std::string& name) const;
  uint64_t SeedFor(const std::string& name) const;

  GraphBuilder b_;
  uint64_t seed_;
};

}  // namespace quilt::zoo

#endif  // QUILT_SRC_GRAPH_ZOO_LAYERS_H_
