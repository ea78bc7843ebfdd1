// The end of a log: the last lines (a final line without a newline
// counts), a line cut by the byte window left out, invalid UTF-8 replaced,
// missing files and directories named.
#include "src/worker/log_tail.h"

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/testing/temp_dir.h"

namespace quilt {
namespace {

using ::testing::HasSubstr;

std::string Write(const testing::TempDir& dir, const std::string& text) {
  const std::string path = dir.File("executor.log");
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(ReadLogTail, TheLastLines) {
  testing::TempDir dir;
  const std::string path = Write(dir, "one\ntwo\nthree\nfour\n");
  absl::StatusOr<LogTail> t = ReadLogTail(path, 2, 1 << 20);
  ASSERT_THAT(t.status(), IsOk());
  EXPECT_EQ(t->text, "three\nfour\n");
  EXPECT_TRUE(t->truncated);
  t = ReadLogTail(path, 4, 1 << 20);
  ASSERT_THAT(t.status(), IsOk());
  EXPECT_EQ(t->text, "one\ntwo\nthree\nfour\n");
  EXPECT_FALSE(t->truncated);
  t = ReadLogTail(path, 10, 1 << 20);
  EXPECT_EQ(t->text, "one\ntwo\nthree\nfour\n");
  EXPECT_FALSE(t->truncated);
  // A last line still being written counts as a line.
  t = ReadLogTail(Write(dir, "a\nb\nhalf"), 2, 1 << 20);
  EXPECT_EQ(t->text, "b\nhalf");
  t = ReadLogTail(Write(dir, ""), 5, 1 << 20);
  EXPECT_EQ(t->text, "");
  EXPECT_FALSE(t->truncated);
}

TEST(ReadLogTail, ALineCutByTheByteWindowIsLeftOut) {
  testing::TempDir dir;
  const std::string path = Write(dir, "0123456789\nabc\ndef\n");
  // The window holds "6789\nabc\ndef\n": "6789" began before it.
  absl::StatusOr<LogTail> t = ReadLogTail(path, 100, 13);
  ASSERT_THAT(t.status(), IsOk());
  EXPECT_EQ(t->text, "abc\ndef\n");
  EXPECT_TRUE(t->truncated);
  // A line longer than the window, alone in it: its end is shown.
  t = ReadLogTail(Write(dir, "short\n" + std::string(100, 'x') + "END\n"), 5, 20);
  ASSERT_THAT(t.status(), IsOk());
  EXPECT_EQ(t->text, std::string(16, 'x') + "END\n");
  EXPECT_TRUE(t->truncated);
  t = ReadLogTail(Write(dir, std::string(100, 'y') + "TAIL"), 5, 10);
  EXPECT_EQ(t->text, "yyyyyyTAIL");
}

// Following: whole lines from an offset on, the one being written left
// for later; the offset after them; a file replaced by a shorter one read
// from its start.
TEST(ReadLogFrom, WholeLinesFromAnOffset) {
  testing::TempDir dir;
  const std::string path = Write(dir, "one\ntwo\nthr");
  absl::StatusOr<LogTail> t = ReadLogTail(path, 10, 1 << 20);
  ASSERT_THAT(t.status(), IsOk());
  EXPECT_EQ(t->end_offset, 11);
  t = ReadLogFrom(path, 4, 1 << 20);
  ASSERT_THAT(t.status(), IsOk());
  EXPECT_EQ(t->text, "two\n");
  EXPECT_EQ(t->end_offset, 8);
  std::ofstream(path, std::ios::app) << "ee\nfour\n";
  t = ReadLogFrom(path, t->end_offset, 1 << 20);
  EXPECT_EQ(t->text, "three\nfour\n");
  EXPECT_EQ(t->end_offset, 19);
  EXPECT_FALSE(t->truncated);
  t = ReadLogFrom(path, 19, 1 << 20);
  EXPECT_EQ(t->text, "");
  EXPECT_EQ(t->end_offset, 19);
  // At most the window: whole lines within it, or a piece of one longer.
  t = ReadLogFrom(path, 0, 10);
  EXPECT_EQ(t->text, "one\ntwo\n");
  t = ReadLogFrom(Write(dir, std::string(30, 'z') + "\n"), 0, 10);
  EXPECT_EQ(t->text, std::string(10, 'z'));
  EXPECT_EQ(t->end_offset, 10);
  // Replaced by a shorter file.
  t = ReadLogFrom(Write(dir, "new\n"), 19, 1 << 20);
  EXPECT_EQ(t->text, "new\n");
  EXPECT_TRUE(t->truncated);
}

TEST(ReadLogTail, InvalidUtf8IsReplaced_MissingFilesAndDirectoriesNamed) {
  testing::TempDir dir;
  absl::StatusOr<LogTail> t =
      ReadLogTail(Write(dir, "ok \xc3\xa9 \xff\xfe \xe2\x82\n"), 5, 1 << 20);
  ASSERT_THAT(t.status(), IsOk());
  EXPECT_EQ(t->text, "ok \xc3\xa9 ?? ??\n");
  EXPECT_THAT(ReadLogTail(dir.File("none.log"), 5, 100).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(dir.File("none.log"))));
  std::filesystem::create_directory(dir.File("sub"));
  EXPECT_THAT(ReadLogTail(dir.File("sub"), 5, 100).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not a regular file")));
}

}  // namespace
}  // namespace quilt
