// The planning binaries' allocator takes the options allocator_options.cc
// sets (one arena, no time-based purging; unless MALLOC_CONF says
// otherwise), and ReleaseFreedMemory hands freed pages back.
#include <cstdlib>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "jemalloc/jemalloc.h"
#include "src/common/release_memory.h"

namespace quilt {
namespace {

TEST(AllocatorOptions, OneArena) {
  if (std::getenv("MALLOC_CONF") != nullptr) GTEST_SKIP() << "MALLOC_CONF is set";
  unsigned arenas = 0;
  size_t size = sizeof(arenas);
  ASSERT_EQ(mallctl("opt.narenas", &arenas, &size, nullptr, 0), 0);
  EXPECT_EQ(arenas, 1u);
}

TEST(AllocatorOptions, FreedPagesKeptUntilReleased) {
  if (std::getenv("MALLOC_CONF") != nullptr) GTEST_SKIP() << "MALLOC_CONF is set";
  ssize_t decay = 0;
  size_t size = sizeof(decay);
  ASSERT_EQ(mallctl("opt.dirty_decay_ms", &decay, &size, nullptr, 0), 0);
  EXPECT_EQ(decay, -1);
  ASSERT_TRUE(OnJemalloc());
  // The arena's freed (dirty) pages, in pages.
  auto dirty = [] {
    uint64_t epoch = 1;
    size_t n = sizeof(epoch);
    mallctl("epoch", &epoch, &n, &epoch, n);
    size_t pages = 0;
    n = sizeof(pages);
    EXPECT_EQ(mallctl("stats.arenas.0.pdirty", &pages, &n, nullptr, 0), 0);
    return pages;
  };
  {
    // 64 MiB in blocks of 64 KiB, touched, then freed.
    std::vector<std::unique_ptr<char[]>> blocks;
    for (int i = 0; i < 1024; ++i) {
      blocks.emplace_back(new char[64 << 10]);
      for (int b = 0; b < (64 << 10); b += 4096) blocks.back()[b] = 1;
    }
  }
  const size_t freed = dirty();
  EXPECT_GE(freed * 4096, size_t{32} << 20) << "freed pages were purged at once";
  ReleaseFreedMemory();
  EXPECT_LT(dirty(), freed / 16);
}

}  // namespace
}  // namespace quilt
