// GoogleTest matchers for absl::Status / absl::StatusOr:
//   EXPECT_THAT(s, IsOk());
//   EXPECT_THAT(s, StatusIs(absl::StatusCode::kAborted));
//   EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("node_id")));
//   EXPECT_THAT(statusor, IsOkAndHolds(Eq(3)));
#ifndef QUILT_SRC_COMMON_STATUS_MATCHERS_H_
#define QUILT_SRC_COMMON_STATUS_MATCHERS_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace quilt {
namespace testing_internal {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

}  // namespace testing_internal

MATCHER(IsOk, "is OK") {
  const absl::Status& s = testing_internal::GetStatus(arg);
  if (!s.ok()) *result_listener << "status is " << s.ToString();
  return s.ok();
}

MATCHER_P(StatusIs, code, std::string("has status code ") + absl::StatusCodeToString(code)) {
  const absl::Status& s = testing_internal::GetStatus(arg);
  *result_listener << "status is " << s.ToString();
  return s.code() == code;
}

MATCHER_P2(StatusIs, code, message_matcher,
           std::string("has status code ") + absl::StatusCodeToString(code) +
               " and a matching message") {
  const absl::Status& s = testing_internal::GetStatus(arg);
  *result_listener << "status is " << s.ToString();
  return s.code() == code &&
         ::testing::ExplainMatchResult(message_matcher, std::string(s.message()), result_listener);
}

MATCHER_P(IsOkAndHolds, value_matcher, "is OK and holds a matching value") {
  if (!arg.ok()) {
    *result_listener << "status is " << arg.status().ToString();
    return false;
  }
  return ::testing::ExplainMatchResult(value_matcher, *arg, result_listener);
}

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_STATUS_MATCHERS_H_
