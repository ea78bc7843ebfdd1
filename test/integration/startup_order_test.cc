// Binaries that link UCX beside OpenBLAS: UCX's library constructor, which
// rewrites mmap's first instructions in place, must run before OpenBLAS's,
// which starts threads that call mmap (third_party/BUILD says why). The
// dynamic loader reports the order it runs constructors in (LD_DEBUG=files).
// The executor matters most; the test and bench binaries that also link the
// LP solver get LAPACK, and OpenBLAS with it, through CLP.
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

// The loader's report for `binary --help`, or an error.
absl::StatusOr<std::string> LoaderReport(const std::string& binary) {
  setenv("LD_DEBUG", "files", 1);
  absl::StatusOr<testing::CommandResult> r =
      testing::RunCommand({testing::RunfilePath(binary), "--help"});
  unsetenv("LD_DEBUG");
  if (!r.ok()) return r.status();
  return r->err;
}

void ExpectUcxBeforeOpenblas(const std::string& binary) {
  SCOPED_TRACE(binary);
  absl::StatusOr<std::string> report = LoaderReport(binary);
  ASSERT_TRUE(report.ok()) << report.status();
  const size_t ucs = InitAt(*report, "libucs.so");
  const size_t blas = InitAt(*report, "libopenblas.so");
  ASSERT_NE(ucs, std::string::npos) << "no constructor of UCX's libucs in:\n" << *report;
  ASSERT_NE(blas, std::string::npos) << "no constructor of libopenblas in:\n" << *report;
  EXPECT_LT(ucs, blas) << "OpenBLAS's constructor runs before UCX's";
}

TEST(StartupOrder, UcxIsReadyBeforeOpenblasStartsItsThreadsInTheExecutor) {
  ExpectUcxBeforeOpenblas("src/runtime/quilt-executor");
}

TEST(StartupOrder, UcxIsReadyBeforeOpenblasInBinariesThatAlsoPlan) {
  ExpectUcxBeforeOpenblas("test/integration/executor_oracle_test");
  ExpectUcxBeforeOpenblas("bench/executor_bench");
}

}  // namespace
}  // namespace quilt
