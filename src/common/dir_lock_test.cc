#include "src/common/dir_lock.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "src/common/status_matchers.h"
#include "src/testing/temp_dir.h"

namespace quilt {
namespace {

using ::testing::HasSubstr;

TEST(DirLock, ASecondHolderIsRefusedWithTheFirstsPidUntilItLetsGo) {
  testing::TempDir dir;
  absl::StatusOr<std::unique_ptr<DirLock>> first = DirLock::Acquire(dir.path(), "x.lock", "a test");
  ASSERT_THAT(first, IsOk());
  EXPECT_THAT(DirLock::Acquire(dir.path(), "x.lock", "a test"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr(dir.path() + " is in use by a test (pid " +
                                       std::to_string(getpid()) + ")"),
                             HasSubstr("x.lock is locked"))));
  first->reset();
  EXPECT_THAT(DirLock::Acquire(dir.path(), "x.lock", "a test"), IsOk());
}

TEST(DirLock, AMissingDirectoryIsUnavailable) {
  EXPECT_THAT(DirLock::Acquire("/nonexistent-dir/q", "x.lock", "a test"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("/nonexistent-dir/q/x.lock")));
}

}  // namespace
}  // namespace quilt
