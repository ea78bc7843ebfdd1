// The planner's clock: time counted by the work done rather than read off
// the wall, so that every decision made by time (a budget spent, a step
// begun or not) comes out the same for the same input on any machine and
// under any load, and a seed gives one plan. Work (a simulation) charges
// the clock installed on its thread a cost fixed by its size; the clock
// reads its start plus what was charged. Where the wall runs far ahead of
// the work (a machine many times slower than the costs assume, or loaded),
// the clock follows the wall instead, so planning still ends near its
// budget; it says so (FollowedWall), as plans may then differ run to run.
//
// Threading: Charge and Now may be called from any thread; a clock read
// while other threads charge it sees some of their work (callers that need
// a fixed reading read it after joining them). Installed per thread
// (Scope): threads a caller starts install the caller's clock themselves.
#ifndef QUILT_SRC_COMMON_WORK_CLOCK_H_
#define QUILT_SRC_COMMON_WORK_CLOCK_H_

#include <atomic>
#include <cstdint>
#include <optional>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace quilt {

class WorkClock {
 public:
  // Where the wall time since the start passes kWallFactor times the work
  // charged plus kWallGraceS, the clock reads the wall.
  static constexpr double kWallFactor = 4;
  static constexpr double kWallGraceS = 5;

  explicit WorkClock(absl::Time start = absl::Now()) : start_(start) {}
  WorkClock(const WorkClock&) = delete;
  WorkClock& operator=(const WorkClock&) = delete;

  absl::Time start() const { return start_; }
  // The start plus the work charged (or the wall's time: above).
  absl::Time Now() const;
  // Seconds of work charged so far.
  double WorkSeconds() const;
  // Whether a reading followed the wall.
  bool FollowedWall() const { return followed_wall_.load(std::memory_order_relaxed); }
  // Adds work to this clock, and to this thread's count (ThreadWork).
  void Charge(absl::Duration work);

  // The clock installed on this thread (null: none).
  static WorkClock* Current();
  // Work charged on this thread, to any clock, since it began: the
  // difference of two readings is what the thread did in between.
  static absl::Duration ThreadWork();

  // Installs `clock` on this thread for its lifetime (null: none), putting
  // back the one before.
  class Scope {
   public:
    explicit Scope(WorkClock* clock);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    WorkClock* before_;
  };

 private:
  absl::Time start_;
  std::atomic<int64_t> charged_ns_{0};
  mutable std::atomic<bool> followed_wall_{false};
};

// A clock started at construction and installed on this thread for its
// lifetime, where the thread has none yet (an entry point also called
// within planning that installed one: that one is kept).
class WorkClockIfNone {
 public:
  WorkClockIfNone();
  WorkClockIfNone(const WorkClockIfNone&) = delete;
  WorkClockIfNone& operator=(const WorkClockIfNone&) = delete;
  // The clock in use: this one's or the one kept.
  WorkClock* clock() const { return WorkClock::Current(); }
  // Whether it installed its own (the outermost entry point).
  bool owned() const { return own_.has_value(); }

 private:
  std::optional<WorkClock> own_;
  std::optional<WorkClock::Scope> scope_;
};

// The installed clock's time, or the wall's where none is installed.
absl::Time WorkNow();
// Charges the installed clock, if any.
void ChargeWork(absl::Duration work);

// Seconds of work between its start and Seconds(): the installed clock's
// where one was installed at its start (this thread's own work, when
// `own_thread`; else all threads' charged to the clock), the wall's if not.
class WorkTimer {
 public:
  explicit WorkTimer(bool own_thread = false);
  double Seconds() const;

 private:
  bool own_thread_;
  WorkClock* clock_;
  absl::Time began_;
  absl::Duration thread_began_;
};

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_WORK_CLOCK_H_
