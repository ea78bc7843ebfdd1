// Option checks for quiltctl whose messages name the option's value and
// what it must be ("must be a positive number, got -4"), where CLI11's own
// print the whole range of a double.
#ifndef QUILT_SRC_CLI_VALIDATORS_H_
#define QUILT_SRC_CLI_VALIDATORS_H_

#include <cmath>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"

namespace quilt::cli {

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

}  // namespace quilt::cli

#endif  // QUILT_SRC_CLI_VALIDATORS_H_
