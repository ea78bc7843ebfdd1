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
#include "src/runtime/counter_random.h"

namespace quilt {

// The explicit value, or a new tensor generated from the spec.
absl::StatusOr<Tensor> InitialValue(const ParameterSpec& spec, const std::vector<int64_t>& dims);

}  // namespace quilt

#endif  // QUILT_SRC_RUNTIME_INITIALIZERS_H_
