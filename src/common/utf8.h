// Whether text is well-formed UTF-8 (no overlong forms, surrogates or code
// points past U+10FFFF). Quilt's messages carry names and user text in
// protobuf string fields, which must be UTF-8: a name that is not would
// be written into a program no reader can parse back. Checked where such
// text comes in (graph validation, quiltctl's flags, display text).
#ifndef QUILT_SRC_COMMON_UTF8_H_
#define QUILT_SRC_COMMON_UTF8_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace quilt {

// The length of the well-formed UTF-8 sequence that begins at `s[i]`
// (1–4), or 0 where none does.
inline size_t Utf8SequenceAt(std::string_view s, size_t i) {
  const size_t n = s.size();
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  int more = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (c >= 0xC2 && c <= 0xDF) {
    more = 1;
  } else if (c == 0xE0) {
    more = 2, lo = 0xA0;
  } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
    more = 2;
  } else if (c == 0xED) {
    more = 2, hi = 0x9F;  // no surrogates
  } else if (c == 0xF0) {
    more = 3, lo = 0x90;
  } else if (c >= 0xF1 && c <= 0xF3) {
    more = 3;
  } else if (c == 0xF4) {
    more = 3, hi = 0x8F;  // up to U+10FFFF
  } else {
    return 0;
  }
  if (n - i <= static_cast<size_t>(more)) return 0;
  const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
  if (c1 < lo || c1 > hi) return 0;
  for (int k = 2; k <= more; ++k) {
    const unsigned char ck = static_cast<unsigned char>(s[i + k]);
    if (ck < 0x80 || ck > 0xBF) return 0;
  }
  return static_cast<size_t>(more) + 1;
}

inline bool IsUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t len = Utf8SequenceAt(s, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

// `s` with each byte that begins no well-formed sequence replaced by '?'
// (text from outside, such as a log, made fit for a protobuf string).
inline std::string ToUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t len = Utf8SequenceAt(s, i);
    if (len == 0) {
      out.push_back('?');
      ++i;
    } else {
      out.append(s.substr(i, len));
      i += len;
    }
  }
  return out;
}

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_UTF8_H_
