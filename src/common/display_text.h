// Text a user gives that tables and logs show (a job's name, a cancel
// reason): printable, one line, bounded, so that it cannot forge a line or
// an escape sequence in them, and UTF-8 (messages carry it as a string).
#ifndef QUILT_SRC_COMMON_DISPLAY_TEXT_H_
#define QUILT_SRC_COMMON_DISPLAY_TEXT_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/common/utf8.h"

namespace quilt {

// Errors: INVALID_ARGUMENT naming `what` ("the job's name") and the fault.
inline absl::Status CheckDisplayText(const std::string& text, size_t max_bytes,
                                     const std::string& what) {
  if (text.size() > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has ", text.size(), " bytes; at most ", max_bytes));
  }
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " has a control character (a newline, an escape)"));
    }
  }
  if (!IsUtf8(text)) return absl::InvalidArgumentError(absl::StrCat(what, " is not valid UTF-8"));
  return absl::OkStatus();
}

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_DISPLAY_TEXT_H_
