// Writing a message straight to a file: the bytes read back parse to the
// same message, also when it spans many of the stream's buffers; the same
// refusals as any atomic write.
#include "src/common/proto_file.h"

#include <sys/stat.h>

#include <string>

#include "gmock/gmock.h"
#include "google/protobuf/wrappers.pb.h"
#include "gtest/gtest.h"
#include "src/common/files.h"
#include "src/common/status_matchers.h"
#include "src/testing/temp_dir.h"

namespace quilt {
namespace {

using ::testing::HasSubstr;

TEST(ProtoFile, AMessageWrittenReadsBackTheSame) {
  testing::TempDir dir;
  for (size_t bytes : {size_t{0}, size_t{100}, size_t{3} << 20}) {
    google::protobuf::BytesValue m;
    std::string value(bytes, '\0');
    for (size_t i = 0; i < bytes; ++i) value[i] = static_cast<char>(i * 131 % 251);
    m.set_value(value);
    const std::string file = dir.File("m.pb");
    ASSERT_THAT(WriteBinaryProtoFile(file, m), IsOk());
    absl::StatusOr<std::string> read = ReadFile(file);
    ASSERT_THAT(read, IsOk());
    EXPECT_EQ(*read, m.SerializeAsString()) << bytes << " bytes";
    google::protobuf::BytesValue back;
    ASSERT_TRUE(back.ParseFromString(*read));
    EXPECT_EQ(back.value(), value);
  }
}

TEST(ProtoFile, APipeIsRefusedNotReplaced) {
  testing::TempDir dir;
  const std::string pipe = dir.File("pipe");
  ASSERT_EQ(mkfifo(pipe.c_str(), 0644), 0);
  google::protobuf::BytesValue m;
  m.set_value("program");
  EXPECT_THAT(WriteBinaryProtoFile(pipe, m),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a regular file")));
  const absl::Status s = WriteBinaryProtoFile("/proc/quilt-no-such-file.pb", m);
  EXPECT_THAT(s, ::testing::Not(IsOk()));
  EXPECT_THAT(std::string(s.message()), HasSubstr("cannot write /proc/quilt-no-such-file.pb"));
}

}  // namespace
}  // namespace quilt
