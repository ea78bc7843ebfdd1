// The planning binaries' allocator takes the options allocator_options.cc
// sets: one arena (unless MALLOC_CONF says otherwise).
#include <cstdlib>

#include "gtest/gtest.h"
#include "jemalloc/jemalloc.h"

namespace quilt {
namespace {

TEST(AllocatorOptions, OneArena) {
  if (std::getenv("MALLOC_CONF") != nullptr) GTEST_SKIP() << "MALLOC_CONF is set";
  unsigned arenas = 0;
  size_t size = sizeof(arenas);
  ASSERT_EQ(mallctl("opt.narenas", &arenas, &size, nullptr, 0), 0);
  EXPECT_EQ(arenas, 1u);
}

}  // namespace
}  // namespace quilt
