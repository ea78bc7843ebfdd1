#include "src/coordinator/checkpoint_dir.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace quilt {

int MissingRank(const std::string& step_dir, int world) {
  for (int r = 0; r < world; ++r) {
    std::error_code ec;  // (a read error counts as missing)
    if (!std::filesystem::exists(absl::StrCat(step_dir, "/rank-", r, "/metrics.json"), ec)) {
      return r;
    }
  }
  return -1;
}

std::vector<std::pair<int64_t, std::string>> CompleteSteps(
    const std::string& dir, int world, std::vector<std::pair<int64_t, std::string>>* incomplete) {
  std::vector<std::pair<int64_t, std::string>> steps;
  std::error_code ec;
  // increment(ec): a range-for's ++ throws on a read error (shared storage
  // failing), which would end the coordinator.
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!absl::StartsWith(name, "step-")) continue;
    const std::string digits = name.substr(5);
    int64_t step = 0;
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos ||
        !absl::SimpleAtoi(digits, &step)) {
      continue;
    }
    const int missing = MissingRank(absl::StrCat(dir, "/", name), world);
    if (missing < 0) {
      steps.emplace_back(step, name);
    } else if (incomplete != nullptr) {
      incomplete->emplace_back(
          step, absl::StrCat(name, ": incomplete (no rank-", missing, "/metrics.json)"));
    }
  }
  std::sort(steps.rbegin(), steps.rend());
  if (incomplete != nullptr) std::sort(incomplete->rbegin(), incomplete->rend());
  return steps;
}

}  // namespace quilt
