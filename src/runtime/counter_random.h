// Counter-based random numbers: a value is a pure function of (seed,
// index), the same on every machine and for any split of the work, so
// initializers, the synthetic dataset and dropout agree across devices
// however a batch is split.
#ifndef QUILT_SRC_RUNTIME_COUNTER_RANDOM_H_
#define QUILT_SRC_RUNTIME_COUNTER_RANDOM_H_

#include <cstdint>

namespace quilt {

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

#endif  // QUILT_SRC_RUNTIME_COUNTER_RANDOM_H_
