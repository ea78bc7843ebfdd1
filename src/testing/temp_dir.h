// A fresh directory for one test, under $TEST_TMPDIR (Bazel) or /tmp,
// removed with everything in it when the object goes away.
#ifndef QUILT_SRC_TESTING_TEMP_DIR_H_
#define QUILT_SRC_TESTING_TEMP_DIR_H_

#include <cstdlib>
#include <filesystem>
#include <string>

namespace quilt::testing {

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TEST_TMPDIR");
    std::string pattern = std::string(base ? base : "/tmp") + "/quilt-test-XXXXXX";
    char* made = mkdtemp(pattern.data());
    path_ = made ? made : "";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace quilt::testing

#endif  // QUILT_SRC_TESTING_TEMP_DIR_H_
