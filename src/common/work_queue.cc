#include "src/common/work_queue.h"

namespace quilt {

WorkQueue::WorkQueue(int threads, int max_waiting) : max_waiting_(max_waiting) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

WorkQueue::~WorkQueue() { Shutdown(); }

bool WorkQueue::Submit(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || static_cast<int>(waiting_.size()) >= max_waiting_) return false;
  waiting_.push_back(std::move(task));
  return true;
}

int WorkQueue::pending() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(waiting_.size()) + running_;
}

bool WorkQueue::accepting() const {
  absl::MutexLock lock(&mu_);
  return !stopping_;
}

void WorkQueue::Loop() {
  for (;;) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](WorkQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) {
            return q->stopping_ || !q->waiting_.empty();
          },
          this));
      if (waiting_.empty()) return;  // stopping, nothing left
      task = std::move(waiting_.front());
      waiting_.pop_front();
      ++running_;
    }
    task();
    absl::MutexLock lock(&mu_);
    --running_;
  }
}

void WorkQueue::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

}  // namespace quilt
