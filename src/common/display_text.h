// Text a user gives that tables and logs show (a job's name, a cancel
// reason): printable, one line, bounded, so that it cannot forge a line or
// an escape sequence in them, and UTF-8 (messages carry it as a string).
// Checked where it comes in, or, where it is quoted from a file (a
// model's names in an error), made so.
#ifndef QUILT_SRC_COMMON_DISPLAY_TEXT_H_
#define QUILT_SRC_COMMON_DISPLAY_TEXT_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/common/utf8.h"

namespace quilt {

// A control character: a newline, an escape, DEL.
inline bool IsControlByte(unsigned char c) { return c < 0x20 || c == 0x7f; }

// `text` made display text, but for its length: bytes that begin no
// well-formed UTF-8 sequence and control characters become '?'.
inline std::string ToDisplayText(std::string_view text) {
  std::string out = ToUtf8(text);
  for (char& c : out) {
    if (IsControlByte(static_cast<unsigned char>(c))) c = '?';
  }
  return out;
}

// Errors: INVALID_ARGUMENT naming `what` ("the job's name") and the fault.
inline absl::Status CheckDisplayText(const std::string& text, size_t max_bytes,
                                     const std::string& what) {
  if (text.size() > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has ", text.size(), " bytes; at most ", max_bytes));
  }
  for (unsigned char c : text) {
    if (IsControlByte(c)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " has a control character (a newline, an escape)"));
    }
  }
  if (!IsUtf8(text)) return absl::InvalidArgumentError(absl::StrCat(what, " is not valid UTF-8"));
  return absl::OkStatus();
}

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_DISPLAY_TEXT_H_
