// Injectable time source. Components that judge time (liveness, backoff,
// timeouts) take a Clock* so tests can drive time with FakeClock
// (fake_clock.h) instead of sleeping.
#ifndef QUILT_SRC_COMMON_CLOCK_H_
#define QUILT_SRC_COMMON_CLOCK_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace quilt {

class Clock {
 public:
  virtual ~Clock() = default;
  // Current wall-clock time. Thread-safe.
  virtual absl::Time Now() const = 0;
};

// The real clock (absl::Now()). Use RealClock::Get() for the shared instance.
class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  static Clock* Get() {
    static RealClock* clock = new RealClock();
    return clock;
  }
};

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_CLOCK_H_
