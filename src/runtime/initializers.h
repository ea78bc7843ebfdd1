// Initial values of parameters from their InitializerSpec: deterministic
// for a given seed on every machine (counter-based generator, no library
// distributions).
#ifndef QUILT_SRC_RUNTIME_INITIALIZERS_H_
#define QUILT_SRC_RUNTIME_INITIALIZERS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "src/graph/graph.h"
#include "src/graph/tensor.h"

namespace quilt {

// The explicit value, or a new tensor generated from the spec.
absl::StatusOr<Tensor> InitialValue(const ParameterSpec& spec, const std::vector<int64_t>& dims);

// SplitMix64's finalizer: the counter-based generator's hash.
inline uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) from Mix(seed) and an index, for loops that draw many
// values of one seed.
inline float CounterUniformMixed(uint64_t mixed_seed, uint64_t index) {
  return static_cast<float>(Mix(mixed_seed ^ index) >> 40) * (1.0f / 16777216.0f);
}

// Uniform in [0, 1) from (seed, index).
inline float CounterUniform(uint64_t seed, uint64_t index) {
  return CounterUniformMixed(Mix(seed), index);
}

}  // namespace quilt

#endif  // QUILT_SRC_RUNTIME_INITIALIZERS_H_
