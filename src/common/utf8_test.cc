// IsUtf8 (and ToUtf8) against hand-picked cases and, for every sequence of up to three
// bytes, against a decoder that computes the code point and checks its
// range and shortest form.
#include "src/common/utf8.h"

#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace quilt {
namespace {

TEST(IsUtf8, AcceptsWellFormedText) {
  for (const std::string& s :
       std::vector<std::string>{"", "plain", "caf\xC3\xA9", "\xE2\x82\xAC 5", "\xF0\x9D\x84\x9E",
                                "\xF4\x8F\xBF\xBF", "\xED\x9F\xBF", std::string("a\0b", 3)}) {
    EXPECT_TRUE(IsUtf8(s)) << s;
  }
}

TEST(IsUtf8, RefusesMalformedText) {
  for (const std::string s :
       {"\xFF",
        "/\xFF"
        "elu",
        "\x80", "\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80",
        "\xF5\x80\x80\x80", "\xE2\x82", "\xF0\x9D\x84", "\xC3", "\xC3\x28", "ok\xE2\x28\xA1"}) {
    EXPECT_FALSE(IsUtf8(s)) << s;
  }
}

// The code point of a single UTF-8 sequence decoded the long way; nullopt
// when it is not one well-formed sequence.
std::optional<int> Decode(const std::string& s) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  size_t len;
  int cp;
  if (b(0) < 0x80) {
    len = 1, cp = b(0);
  } else if ((b(0) >> 5) == 0x6) {
    len = 2, cp = b(0) & 0x1F;
  } else if ((b(0) >> 4) == 0xE) {
    len = 3, cp = b(0) & 0x0F;
  } else if ((b(0) >> 3) == 0x1E) {
    len = 4, cp = b(0) & 0x07;
  } else {
    return std::nullopt;
  }
  if (s.size() != len) return std::nullopt;
  for (size_t i = 1; i < len; ++i) {
    if ((b(i) >> 6) != 0x2) return std::nullopt;
    cp = (cp << 6) | (b(i) & 0x3F);
  }
  const int least[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < least[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return std::nullopt;
  return cp;
}

TEST(IsUtf8, AgreesWithADecoderOnEverySequenceOfUpToThreeBytes) {
  for (int a = 0; a < 256; ++a) {
    const std::string one(1, static_cast<char>(a));
    ASSERT_EQ(IsUtf8(one), Decode(one).has_value()) << a;
    for (int b = 0; b < 256; ++b) {
      const std::string two = one + static_cast<char>(b);
      // Two bytes may also be two sequences of one.
      const bool two_ok = Decode(two).has_value() ||
                          (Decode(one).has_value() && Decode(std::string(1, b)).has_value());
      ASSERT_EQ(IsUtf8(two), two_ok) << a << " " << b;
      if (a < 0xE0 || a > 0xEF) continue;  // three-byte leads only
      for (int c = 0; c < 256; ++c) {
        const std::string three = two + static_cast<char>(c);
        ASSERT_EQ(IsUtf8(three), Decode(three).has_value()) << a << " " << b << " " << c;
      }
    }
  }
}

// Each byte that begins no well-formed sequence becomes '?'; the
// sequences around it are kept.
TEST(ToUtf8, ReplacesWhatIsNotUtf8ByteByByte) {
  EXPECT_EQ(ToUtf8("ok \xC3\xA9 \xFF\xFE \xE2\x82\n"), "ok \xC3\xA9 ?? ??\n");
  EXPECT_EQ(ToUtf8("\xC0\xAF"), "??") << "an overlong '/'";
  EXPECT_EQ(ToUtf8("\xED\xA0\x80"), "???") << "a surrogate";
  EXPECT_EQ(ToUtf8("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
  EXPECT_TRUE(IsUtf8(ToUtf8("\x80\xC3\xC3\xA9\xF4\x90")));
}

}  // namespace
}  // namespace quilt
