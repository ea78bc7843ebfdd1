// quilt-executor links OpenBLAS and UCX; UCX's library constructor, which
// rewrites mmap's first instructions in place, must run before OpenBLAS's,
// which starts threads that call mmap (third_party/BUILD says why). The
// dynamic loader reports the order it runs constructors in (LD_DEBUG=files).
#include <string>

#include "gtest/gtest.h"
#include "src/testing/subprocess.h"

namespace quilt {
namespace {

// Where the loader's report calls `library`'s constructor, or npos.
size_t InitAt(const std::string& report, const std::string& library) {
  for (size_t at = report.find("calling init: "); at != std::string::npos;
       at = report.find("calling init: ", at + 1)) {
    const size_t end = report.find('\n', at);
    const std::string line = report.substr(at, end - at);
    if (line.find("/" + library) != std::string::npos) return at;
  }
  return std::string::npos;
}

TEST(StartupOrder, UcxIsReadyBeforeOpenblasStartsItsThreads) {
  setenv("LD_DEBUG", "files", 1);
  absl::StatusOr<testing::CommandResult> r =
      testing::RunCommand({testing::RunfilePath("src/runtime/quilt-executor"), "--help"});
  unsetenv("LD_DEBUG");
  ASSERT_TRUE(r.ok()) << r.status();
  const size_t ucs = InitAt(r->err, "libucs.so");
  const size_t blas = InitAt(r->err, "libopenblas.so");
  ASSERT_NE(ucs, std::string::npos) << "no constructor of UCX's libucs in:\n" << r->err;
  ASSERT_NE(blas, std::string::npos) << "no constructor of libopenblas in:\n" << r->err;
  EXPECT_LT(ucs, blas) << "OpenBLAS's constructor runs before UCX's";
}

}  // namespace
}  // namespace quilt
