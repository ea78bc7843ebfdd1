#include "src/runtime/comm/rendezvous.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "src/common/files.h"
#include "src/common/status.h"

namespace quilt {

absl::StatusOr<std::vector<std::string>> DirectoryRendezvous::Exchange(int rank, int size,
                                                                       const std::string& address,
                                                                       absl::Duration timeout) {
  auto path = [&](int r) { return absl::StrCat(dir_, "/rank-", r, ".addr"); };
  RETURN_IF_ERROR(WriteFileAtomically(path(rank), address));
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<std::string> out(size);
  std::vector<bool> have(size, false);
  for (;;) {
    std::vector<int> missing;
    for (int r = 0; r < size; ++r) {
      if (have[r]) continue;
      absl::StatusOr<std::string> a = ReadFile(path(r));
      if (a.ok()) {
        out[r] = std::move(*a);
        have[r] = true;
      } else {
        missing.push_back(r);
      }
    }
    if (missing.empty()) return out;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("rendezvous in ", dir_, ": rank(s) ", absl::StrJoin(missing, ", "), " of ",
                       size, " did not appear within ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

}  // namespace quilt
