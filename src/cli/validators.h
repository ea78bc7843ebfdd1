// Option checks for quiltctl whose messages name the option's value and
// what it must be ("must be a positive number, got -4"), where CLI11's own
// print the whole range of a double.
#ifndef QUILT_SRC_CLI_VALIDATORS_H_
#define QUILT_SRC_CLI_VALIDATORS_H_

#include <cmath>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "src/common/utf8.h"

namespace quilt::cli {

// Text the coordinator receives (a name, an id, a path it reads): UTF-8,
// as its requests carry text (each value of a list option alike).
inline CLI::Validator Utf8Text() {
  return CLI::Validator(
      [](std::string& v) { return IsUtf8(v) ? std::string() : std::string("is not valid UTF-8"); },
      "TEXT");
}

// A finite number > 0 (or >= 0 with `zero_ok`).
inline CLI::Validator Positive(bool zero_ok = false) {
  return CLI::Validator(
      [zero_ok](std::string& v) {
        double d = 0;
        const bool ok = absl::SimpleAtod(v, &d) && std::isfinite(d) && (zero_ok ? d >= 0 : d > 0);
        return ok ? std::string()
                  : std::string("must be a ") +
                        (zero_ok ? "finite number >= 0" : "positive finite number") + ", got " + v;
      },
      zero_ok ? "NONNEGATIVE" : "POSITIVE");
}

inline CLI::Validator NonNegative() { return Positive(/*zero_ok=*/true); }

// A whole number > 0 (or >= 0 with `zero_ok`) that fits 64 bits (CLI11
// would clamp a larger one).
inline CLI::Validator PositiveInt(bool zero_ok = false) {
  return CLI::Validator(
      [zero_ok](std::string& v) {
        int64_t n = 0;
        const bool ok = absl::SimpleAtoi(v, &n) && (zero_ok ? n >= 0 : n > 0);
        return ok ? std::string()
                  : std::string("must be a whole number ") + (zero_ok ? ">= 0" : ">= 1") +
                        " (64-bit), got " + v;
      },
      zero_ok ? "NONNEGATIVE" : "POSITIVE");
}

inline CLI::Validator NonNegativeInt() { return PositiveInt(/*zero_ok=*/true); }

// A seed: a whole number in [0, 2^64 - 1].
inline CLI::Validator Seed() {
  return CLI::Validator(
      [](std::string& v) {
        uint64_t n = 0;
        return absl::SimpleAtoi(v, &n) ? std::string()
                                       : "must be a whole number from 0 to 2^64 - 1, got " + v;
      },
      "SEED");
}

// A non-empty value (a path).
inline CLI::Validator NonEmpty() {
  return CLI::Validator(
      [](std::string& v) { return v.empty() ? std::string("must not be empty") : std::string(); },
      "NONEMPTY");
}

}  // namespace quilt::cli

#endif  // QUILT_SRC_CLI_VALIDATORS_H_
