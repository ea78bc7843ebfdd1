#include "src/common/net.h"

#include "gtest/gtest.h"
#include "src/common/status_matchers.h"

namespace quilt {
namespace {

TEST(ParseHostPort, AcceptsV4V6AndNames) {
  auto a = ParseHostPort("127.0.0.1:7070");
  ASSERT_THAT(a, IsOk());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 7070);
  auto b = ParseHostPort("[::1]:0");
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->port, 0);
}

TEST(ParseHostPort, RejectsMissingOrBadPort) {
  EXPECT_THAT(ParseHostPort("localhost"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseHostPort("localhost:99999"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseHostPort(":80"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(IsLoopbackAddress, ClassifiesAddresses) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1:1"));
  EXPECT_TRUE(IsLoopbackAddress("127.8.9.10:1"));
  EXPECT_TRUE(IsLoopbackAddress("localhost:1"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]:1"));
  EXPECT_TRUE(IsLoopbackAddress("unix:/run/quilt.sock"));
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0:1"));
  EXPECT_FALSE(IsLoopbackAddress("10.1.2.3:1"));
  EXPECT_FALSE(IsLoopbackAddress("[::]:1"));
  EXPECT_FALSE(IsLoopbackAddress("example.com:1"));
}

}  // namespace
}  // namespace quilt
