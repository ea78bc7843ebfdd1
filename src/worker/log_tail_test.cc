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

// The runs of a log: each begins at its worker's marker line; lines before
// the first marker (a log written before them) are a run of their own. A
// run's tail is its last lines, never those of the run after it.
TEST(ReadLogRun, EachRunFromItsMarkerToTheNext) {
  testing::TempDir dir;
  const std::string m1 = RunMarker(1, 0, 2, "2026-01-01T00:00:00Z", 0);
  const std::string m2 = RunMarker(2, 0, 2, "2026-01-01T01:00:00Z", 100);
  EXPECT_THAT(m2, HasSubstr("run 2 (rank 0 of 2), started 2026-01-01T01:00:00Z, from step 100"));
  const std::string path =
      Write(dir, m1 + "\none\ntwo\n" + m2 + "\nthree\n=== quilt-worker: runaway\nfour");
  EXPECT_THAT(CountLogRuns(path), IsOkAndHolds(2));
  absl::StatusOr<LogTail> t = ReadLogRun(path, 1, 100, 1 << 20);
  ASSERT_THAT(t.status(), IsOk());
  EXPECT_EQ(t->text, m1 + "\none\ntwo\n");
  EXPECT_FALSE(t->truncated);
  EXPECT_EQ(t->run, 1);
  EXPECT_EQ(t->runs, 2);
  // Its last line only: the first run's, not the log's.
  t = ReadLogRun(path, 1, 1, 1 << 20);
  ASSERT_THAT(t.status(), IsOk());
  EXPECT_EQ(t->text, "two\n");
  EXPECT_TRUE(t->truncated);
  // The last run, by number or as -1 (a line that only looks like a marker
  // begins none).
  for (int run : {2, -1}) {
    t = ReadLogRun(path, run, 100, 1 << 20);
    ASSERT_THAT(t.status(), IsOk());
    EXPECT_EQ(t->text, m2 + "\nthree\n=== quilt-worker: runaway\nfour");
    EXPECT_EQ(t->run, 2);
  }
  t = ReadLogRun(path, 3, 100, 1 << 20);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(t.status().message(), HasSubstr("the log holds 2 runs; there is no run 3"));
  EXPECT_EQ(ReadLogRun(path, 0, 100, 1 << 20).status().code(), absl::StatusCode::kOutOfRange);

  // Lines before the first marker are run 1; the window of bytes is the
  // run's own.
  const std::string older = Write(dir, "old\n" + m1 + "\nnew\n");
  EXPECT_THAT(CountLogRuns(older), IsOkAndHolds(2));
  t = ReadLogRun(older, 1, 100, 1 << 20);
  ASSERT_THAT(t.status(), IsOk());
  EXPECT_EQ(t->text, "old\n");
  t = ReadLogRun(older, 2, 100, 4);
  ASSERT_THAT(t.status(), IsOk());
  EXPECT_EQ(t->text, "new\n");
  EXPECT_TRUE(t->truncated);

  // No file: no runs; an empty log: none to read.
  EXPECT_THAT(CountLogRuns(dir.File("none.log")), IsOkAndHolds(0));
  const std::string empty = Write(dir, "");
  EXPECT_THAT(CountLogRuns(empty), IsOkAndHolds(0));
  EXPECT_EQ(ReadLogRun(empty, -1, 10, 1 << 20).status().code(), absl::StatusCode::kOutOfRange);
}

// Markers are found whatever the chunks a long log is read in: a marker
// after a megabyte of lines, and one right after a line that is longer
// than a chunk.
TEST(ReadLogRun, MarkersPastTheFirstMegabyte) {
  testing::TempDir dir;
  std::string text = RunMarker(1, 0, 1, "t1", 0) + "\n";
  for (int i = 0; i < 30000; ++i)
    text += "info a line of the executor's log, number " + std::to_string(i) + "\n";
  text += RunMarker(2, 0, 1, "t2", 5) + "\n";
  text += std::string(3 << 20, 'x') + "\n";
  text += RunMarker(3, 0, 1, "t3", 9) + "\nlast\n";
  const std::string path = Write(dir, text);
  EXPECT_THAT(CountLogRuns(path), IsOkAndHolds(3));
  absl::StatusOr<LogTail> t = ReadLogRun(path, 3, 10, 1 << 20);
  ASSERT_THAT(t.status(), IsOk());
  EXPECT_EQ(t->text, RunMarker(3, 0, 1, "t3", 9) + "\nlast\n");
  t = ReadLogRun(path, 1, 1, 1 << 20);
  ASSERT_THAT(t.status(), IsOk());
  EXPECT_EQ(t->text, "info a line of the executor's log, number 29999\n");
}

}  // namespace
}  // namespace quilt
