#include "src/runtime/parallel.h"

#include <cblas-openblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace quilt {
namespace {

// Waits up to ~kSpin for `done()` by spinning (a kernel's next loop comes
// within microseconds; waking a blocked thread takes tens of them, more than
// many small loops take), then returns whether it came.
template <typename Done>
bool SpinFor(Done done) {
  constexpr auto kSpin = std::chrono::microseconds(100);
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (int i = 1;; ++i) {
    if (done()) return true;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if (i % 16 == 0) {
      // (A process sharing the cores, another executor, gets them meanwhile.)
      std::this_thread::yield();
      if (std::chrono::steady_clock::now() > until) return done();
    }
  }
}

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
    // New workers wait for the next loop, not the last one run.
    const uint64_t now = generation_.load();
    for (int i = 1; i < threads_; ++i) workers_.emplace_back([this, i, now] { Work(i, now); });
  }
  int threads() const { return threads_; }

  void Run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    const int64_t chunks =
        std::min<int64_t>(threads_, (n + grain - 1) / std::max<int64_t>(grain, 1));
    if (chunks <= 1) {
      fn(0, n);
      return;
    }
    // One loop at a time: a second caller (another device's thread in the
    // same process) runs its loop on its own thread instead of waiting.
    std::unique_lock<std::mutex> running(run_mu_, std::try_to_lock);
    if (!running.owns_lock()) {
      fn(0, n);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = &fn;
      n_ = n;
      chunks_ = chunks;
      remaining_.store(static_cast<int>(chunks - 1));
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();  // (workers still spinning see the generation first)
    RunChunk(0);
    if (!SpinFor([this] { return remaining_.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock<std::mutex> lock(mu_);
      done_.wait(lock, [this] { return remaining_.load() == 0; });
    }
    fn_ = nullptr;
  }

 private:
  Pool() { Resize(1); }

  void RunChunk(int64_t c) {
    const int64_t per = (n_ + chunks_ - 1) / chunks_;
    const int64_t b = c * per, e = std::min(n_, b + per);
    if (b < e) (*fn_)(b, e);
  }

  void Work(int index, uint64_t seen) {
    for (;;) {
      auto ready = [&] {
        return stop_.load(std::memory_order_acquire) ||
               generation_.load(std::memory_order_acquire) != seen;
      };
      if (!SpinFor(ready)) {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, ready);
      }
      if (stop_.load()) return;
      int64_t chunks;
      {
        // The loop's generation and size together (a worker left out of one
        // loop may wake only when the next is set up).
        std::lock_guard<std::mutex> lock(mu_);
        seen = generation_.load();
        chunks = chunks_;
      }
      if (index >= chunks) continue;
      RunChunk(index);
      if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lock(mu_);
        done_.notify_one();
      }
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
  std::mutex run_mu_;  // held by the caller whose loop runs
  std::mutex mu_;
  std::condition_variable cv_, done_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> generation_{0};
  // Set under mu_ before generation_ moves on; read by workers after.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunks_ = 0;
  std::atomic<int> remaining_{0};
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
