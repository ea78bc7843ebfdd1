// Hands the memory the allocator holds freed back to the system. The
// planning binaries run on jemalloc with time-based purging off
// (allocator_options.cc): pages a simulation frees stay for the next one
// to reuse instead of being faulted in afresh, and they are handed back
// here once a planning ends (Plan). A no-op in a process not on jemalloc.
#ifndef QUILT_SRC_COMMON_RELEASE_MEMORY_H_
#define QUILT_SRC_COMMON_RELEASE_MEMORY_H_

namespace quilt {

// Whether the process runs on jemalloc (the symbol it exports is there).
bool OnJemalloc();
// Purges every jemalloc arena's freed pages (nothing where not on it).
void ReleaseFreedMemory();

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_RELEASE_MEMORY_H_
