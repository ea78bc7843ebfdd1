#include "src/coordinator/checkpoint_dir.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace quilt {

std::vector<std::pair<int64_t, std::string>> CompleteSteps(const std::string& dir, int world) {
  std::vector<std::pair<int64_t, std::string>> steps;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!absl::StartsWith(name, "step-")) continue;
    const std::string digits = name.substr(5);
    int64_t step = 0;
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos ||
        !absl::SimpleAtoi(digits, &step)) {
      continue;
    }
    bool complete = true;
    for (int r = 0; r < world && complete; ++r) {
      complete =
          std::filesystem::exists(absl::StrCat(dir, "/", name, "/rank-", r, "/metrics.json"), ec);
    }
    if (complete) steps.emplace_back(step, name);
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

}  // namespace quilt
