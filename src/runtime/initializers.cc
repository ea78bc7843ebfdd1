#include "src/runtime/initializers.h"

#include <cmath>

#include "src/common/status.h"

namespace quilt {

absl::StatusOr<Tensor> InitialValue(const ParameterSpec& spec, const std::vector<int64_t>& dims) {
  if (spec.value.has_value()) return spec.value->Clone();
  ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(DType::kF32, dims));
  float* p = t.f32();
  const InitializerSpec& s = spec.init;
  const uint64_t seed = s.seed ^ 0x51a7e5eedULL;
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (s.kind) {
      case InitializerSpec::Kind::kZeros:
        p[i] = 0;
        break;
      case InitializerSpec::Kind::kOnes:
        p[i] = 1;
        break;
      case InitializerSpec::Kind::kConstant:
        p[i] = static_cast<float>(s.value);
        break;
      case InitializerSpec::Kind::kUniform:
        p[i] = static_cast<float>(s.low + (s.high - s.low) * CounterUniform(seed, i));
        break;
      case InitializerSpec::Kind::kNormal: {
        // Box-Muller on two counter uniforms.
        const double u1 = std::max(1e-12, static_cast<double>(CounterUniform(seed, 2 * i)));
        const double u2 = CounterUniform(seed, 2 * i + 1);
        const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
        p[i] = static_cast<float>(s.mean + s.stddev * z);
        break;
      }
    }
  }
  return t;
}

}  // namespace quilt
