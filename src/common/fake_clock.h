// A manually advanced Clock for tests. Thread-safe.
#ifndef QUILT_SRC_COMMON_FAKE_CLOCK_H_
#define QUILT_SRC_COMMON_FAKE_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/common/clock.h"

namespace quilt {

class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000)) : now_(start) {}

  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_FAKE_CLOCK_H_
