#include "src/common/work_clock.h"

#include <algorithm>

namespace quilt {

namespace {

thread_local WorkClock* current_clock = nullptr;
thread_local int64_t thread_work_ns = 0;

}  // namespace

absl::Time WorkClock::Now() const {
  const int64_t charged = charged_ns_.load(std::memory_order_relaxed);
  const absl::Duration wall = absl::Now() - start_;
  const absl::Duration work = absl::Nanoseconds(charged);
  // (Once followed, the wall is followed where it is ahead: the clock never
  // runs back.)
  if (followed_wall_.load(std::memory_order_relaxed) ||
      wall > kWallFactor * work + absl::Seconds(kWallGraceS)) {
    followed_wall_.store(true, std::memory_order_relaxed);
    return start_ + std::max(wall, work);
  }
  return start_ + work;
}

double WorkClock::WorkSeconds() const {
  return static_cast<double>(charged_ns_.load(std::memory_order_relaxed)) * 1e-9;
}

void WorkClock::Charge(absl::Duration work) {
  const int64_t ns = absl::ToInt64Nanoseconds(work);
  if (ns <= 0) return;
  charged_ns_.fetch_add(ns, std::memory_order_relaxed);
  thread_work_ns += ns;
}

WorkClock* WorkClock::Current() { return current_clock; }

absl::Duration WorkClock::ThreadWork() { return absl::Nanoseconds(thread_work_ns); }

WorkClock::Scope::Scope(WorkClock* clock) : before_(current_clock) { current_clock = clock; }

WorkClock::Scope::~Scope() { current_clock = before_; }

WorkClockIfNone::WorkClockIfNone() {
  if (WorkClock::Current() != nullptr) return;
  own_.emplace();
  scope_.emplace(&*own_);
}

absl::Time WorkNow() {
  const WorkClock* clock = WorkClock::Current();
  return clock == nullptr ? absl::Now() : clock->Now();
}

void ChargeWork(absl::Duration work) {
  WorkClock* clock = WorkClock::Current();
  if (clock != nullptr) clock->Charge(work);
}

WorkTimer::WorkTimer(bool own_thread)
    : own_thread_(own_thread),
      clock_(WorkClock::Current()),
      began_(clock_ == nullptr ? absl::Now() : clock_->Now()),
      thread_began_(WorkClock::ThreadWork()) {}

double WorkTimer::Seconds() const {
  if (clock_ == nullptr) return absl::ToDoubleSeconds(absl::Now() - began_);
  if (own_thread_) return absl::ToDoubleSeconds(WorkClock::ThreadWork() - thread_began_);
  return absl::ToDoubleSeconds(clock_->Now() - began_);
}

}  // namespace quilt
