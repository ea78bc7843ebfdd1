#include "src/common/status.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"

namespace quilt {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  ASSIGN_OR_RETURN(int h, Half(x));
  ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

absl::Status CheckEven(int x) {
  RETURN_IF_ERROR(Half(x).status());
  return absl::OkStatus();
}

TEST(StatusMacros, AssignOrReturn_PropagatesFirstError) {
  EXPECT_THAT(Quarter(8), IsOkAndHolds(2));
  EXPECT_THAT(Quarter(6), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("odd")));
  EXPECT_THAT(Quarter(3), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(StatusMacros, ReturnIfError_ReturnsOnlyErrors) {
  EXPECT_THAT(CheckEven(4), IsOk());
  EXPECT_THAT(CheckEven(5), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(StatusMacros, Annotate_PrefixesContextAndKeepsCode) {
  absl::Status s = Annotate(absl::NotFoundError("no file"), "loading cluster");
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kNotFound, "loading cluster: no file"));
  EXPECT_THAT(Annotate(absl::OkStatus(), "x"), IsOk());
}

}  // namespace
}  // namespace quilt
