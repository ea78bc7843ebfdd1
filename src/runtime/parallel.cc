#include "src/runtime/parallel.h"

#include <cblas-openblas.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace quilt {
namespace {

class Pool {
 public:
  static Pool& Get() {
    static Pool* pool = new Pool();
    return *pool;
  }

  void Resize(int n) {
    Stop();
    threads_ = std::max(1, n);
    stop_ = false;
    for (int i = 1; i < threads_; ++i) workers_.emplace_back([this, i] { Work(i); });
  }
  int threads() const { return threads_; }

  void Run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    const int64_t chunks =
        std::min<int64_t>(threads_, (n + grain - 1) / std::max<int64_t>(grain, 1));
    if (chunks <= 1) {
      fn(0, n);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = &fn;
      n_ = n;
      chunks_ = chunks;
      remaining_ = static_cast<int>(chunks - 1);
      ++generation_;
    }
    cv_.notify_all();
    RunChunk(0);
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return remaining_ == 0; });
    fn_ = nullptr;
  }

 private:
  Pool() { Resize(1); }

  void RunChunk(int64_t c) {
    const int64_t per = (n_ + chunks_ - 1) / chunks_;
    const int64_t b = c * per, e = std::min(n_, b + per);
    if (b < e) (*fn_)(b, e);
  }

  void Work(int index) {
    uint64_t seen = 0;
    for (;;) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index >= chunks_) continue;
      lock.unlock();
      RunChunk(index);
      lock.lock();
      if (--remaining_ == 0) done_.notify_one();
    }
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  int threads_ = 1;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_, done_;
  bool stop_ = false;
  uint64_t generation_ = 0;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunks_ = 0;
  int remaining_ = 0;
};

}  // namespace

void SetComputeThreads(int n) {
  Pool::Get().Resize(n);
  // GEMMs are split across this pool (kernels/cpu/gemm.h); OpenBLAS's own
  // threads would compete with it for the same cores.
  openblas_set_num_threads(1);
}

int ComputeThreads() { return Pool::Get().threads(); }

void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  Pool::Get().Run(n, grain, fn);
}

}  // namespace quilt
