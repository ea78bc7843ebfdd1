// A fixed set of threads running submitted tasks in submission order, with
// a bound on tasks waiting to start, so a flood of slow requests is refused
// at once instead of queueing without end. Shutdown runs every accepted
// task before joining (callers rely on accepted tasks completing).
#ifndef QUILT_SRC_COMMON_WORK_QUEUE_H_
#define QUILT_SRC_COMMON_WORK_QUEUE_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace quilt {

class WorkQueue {
 public:
  WorkQueue(int threads, int max_waiting);
  ~WorkQueue();  // Shutdown()
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // False (task not taken) when `max_waiting` tasks already wait, or after
  // Shutdown.
  bool Submit(std::function<void()> task);
  // Tasks accepted and not yet finished.
  int pending() const;
  // False once Shutdown has begun.
  bool accepting() const;
  // Refuses new tasks, runs the accepted ones, joins the threads. Idempotent.
  void Shutdown();

 private:
  void Loop();

  const int max_waiting_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> waiting_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_WORK_QUEUE_H_
