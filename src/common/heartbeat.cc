#include "src/common/heartbeat.h"

#include <chrono>

namespace quilt {

Heartbeat::Heartbeat(absl::Duration every, std::function<void()> beat) {
  if (!beat || every <= absl::ZeroDuration()) return;
  const auto period = absl::ToChronoNanoseconds(every);
  thread_ = std::thread([this, period, beat = std::move(beat)] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, period, [this] { return stop_; })) {
      lock.unlock();
      beat();
      lock.lock();
    }
  });
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace quilt
