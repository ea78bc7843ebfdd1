#include "src/common/release_memory.h"

#include <cstddef>
#include <string>

// jemalloc's control entry point, weak: null where the process does not
// link jemalloc (the worker and executor, which run UCX, and most tests).
extern "C" int mallctl(const char* name, void* oldp, size_t* oldlenp, void* newp, size_t newlen)
    __attribute__((weak));

namespace quilt {
namespace {

// jemalloc's MALLCTL_ARENAS_ALL: the index that names every arena.
constexpr unsigned kAllArenas = 4096;

}  // namespace

bool OnJemalloc() { return mallctl != nullptr; }

void ReleaseFreedMemory() {
  if (mallctl == nullptr) return;
  const std::string purge = "arena." + std::to_string(kAllArenas) + ".purge";
  mallctl(purge.c_str(), nullptr, nullptr, nullptr, 0);
}

}  // namespace quilt
