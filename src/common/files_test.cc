// Writing files: a new file replaces the old by rename, so a path that is
// not a regular file (a device, a pipe) is refused rather than replaced;
// errors name the file asked for.
#include "src/common/files.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/testing/temp_dir.h"

namespace quilt {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(Files, APipeIsRefusedNotReplaced) {
  testing::TempDir dir;
  const std::string pipe = dir.File("pipe");
  ASSERT_EQ(mkfifo(pipe.c_str(), 0644), 0);
  EXPECT_THAT(WriteFileAtomically(pipe, "model"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a regular file")));
  EXPECT_THAT(CheckWritablePath(pipe),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a regular file")));
  struct stat st;
  ASSERT_EQ(stat(pipe.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the pipe was replaced";
  // A regular file, new or old, is written.
  const std::string file = dir.File("model.onnx");
  ASSERT_THAT(WriteFileAtomically(file, "one"), IsOk());
  ASSERT_THAT(WriteFileAtomically(file, "two"), IsOk());
  EXPECT_THAT(ReadFile(file), IsOkAndHolds(std::string("two")));
}

// Reading: a pipe is read to its end (a shell's process substitution); a
// device that never ends is refused past a bound rather than read on.
TEST(Files, APipeIsReadAndADeviceWithoutEndRefused) {
  testing::TempDir dir;
  const std::string pipe = dir.File("spec");
  ASSERT_EQ(mkfifo(pipe.c_str(), 0644), 0);
  std::thread writer([&] { std::ofstream(pipe) << "name: \"piped\"\n"; });
  EXPECT_THAT(ReadFile(pipe), IsOkAndHolds(std::string("name: \"piped\"\n")));
  writer.join();
  EXPECT_THAT(ReadFile("/dev/zero"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("/dev/zero is not a regular file and gives more than 256 MiB")));
}

// An output that is an input, or another output, by whatever path.
TEST(Files, OutputsApartFromInputsAndEachOther) {
  testing::TempDir dir;
  const std::string spec = dir.File("cluster.textproto");
  ASSERT_THAT(WriteFileAtomically(spec, "name: \"c\"\n"), IsOk());
  EXPECT_THAT(CheckOutputsApart({{"--program-out", dir.path() + "/./cluster.textproto"}},
                                {{"--cluster", spec}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("is also --cluster: it would be written over")));
  EXPECT_THAT(CheckOutputsApart({{"--program-out", dir.File("out")}, {"--trace", dir.File("out")}},
                                {{"--cluster", spec}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--trace")));
  EXPECT_THAT(CheckOutputsApart({{"--program-out", dir.File("p")}, {"--trace", ""}},
                                {{"--cluster", spec}, {"the model", ""}}),
              IsOk());
}

// A file that cannot be created is named as the caller gave it (the
// temporary it is written through comes after).
TEST(Files, AFileThatCannotBeCreatedIsNamed) {
  const absl::Status s = WriteFileAtomically("/proc/quilt-no-such-file.onnx", "model");
  EXPECT_THAT(s, Not(IsOk()));
  EXPECT_THAT(std::string(s.message()),
              ::testing::StartsWith("cannot write /proc/quilt-no-such-file.onnx"));
}

// A writer that fails: its error comes back as it is, the old file stays
// whole, and no temporary file is left beside it.
TEST(Files, AFailedWriterLeavesTheOldFileAndNoTemporary) {
  testing::TempDir dir;
  const std::string file = dir.File("program.pb");
  ASSERT_THAT(WriteFileAtomically(file, "old"), IsOk());
  const absl::Status s = WriteFileAtomicallyWith(file, [](int fd) {
    if (write(fd, "half", 4) != 4) return absl::InternalError("the test's write failed");
    return absl::DataLossError("the writer gave up");
  });
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("the writer gave up")));
  EXPECT_THAT(ReadFile(file), IsOkAndHolds(std::string("old")));
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    ++entries;
    EXPECT_EQ(e.path().filename().string(), "program.pb");
  }
  EXPECT_EQ(entries, 1);
}

}  // namespace
}  // namespace quilt
