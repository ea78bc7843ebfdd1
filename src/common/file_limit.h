// The open-file limit of a daemon: raised at start to the hard limit (the
// soft one is often 1024, and every client, worker link and executor pipe
// takes descriptors), and a warning when even that is low: a server out of
// descriptors refuses new connections.
#ifndef QUILT_SRC_COMMON_FILE_LIMIT_H_
#define QUILT_SRC_COMMON_FILE_LIMIT_H_

#include <cstdint>

namespace quilt {

// Raises the soft RLIMIT_NOFILE to the hard limit (at most `want`) and logs
// a warning naming both when the result is below `warn_below`. Returns the
// soft limit now in force (0 if it cannot be read).
int64_t RaiseOpenFileLimit(int64_t want = 65536, int64_t warn_below = 4096);

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_FILE_LIMIT_H_
