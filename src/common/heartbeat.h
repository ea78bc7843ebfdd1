// Heartbeat: calls a function every interval on a thread of its own until
// destroyed, for progress lines while a long computation runs elsewhere
// (the function must be safe to call beside that computation). The
// destructor returns once the thread has ended, never during a call.
#ifndef QUILT_SRC_COMMON_HEARTBEAT_H_
#define QUILT_SRC_COMMON_HEARTBEAT_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/time/time.h"

namespace quilt {

class Heartbeat {
 public:
  // No thread when `beat` is empty or `every` is not positive.
  Heartbeat(absl::Duration every, std::function<void()> beat);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_HEARTBEAT_H_
