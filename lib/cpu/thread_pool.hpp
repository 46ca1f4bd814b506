// A fixed pool of worker threads for the CPU engine. run(tasks, fn) calls fn(task) for every task
// in [0, tasks) on the workers and the calling thread, and returns when all are done. Tasks are
// handed out dynamically; results must not depend on which thread ran a task (each task writes
// its own outputs), which keeps the CPU engine deterministic for any thread count.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kantor::cpu {

class ThreadPool {
 public:
  /// `cancel` (optional): once it reads true, run() hands out no further tasks (the tasks already
  /// running finish; the outputs of the others are left as they were).
  explicit ThreadPool(int threads, const std::atomic<bool>* cancel = nullptr);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }
  /// Runs fn(0..tasks-1); rethrows the first exception a task threw. Not re-entrant.
  void run(std::int64_t tasks, const std::function<void(std::int64_t)>& fn);

 private:
  void worker_loop();
  void drain();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(std::int64_t)>* fn_ = nullptr;
  std::int64_t tasks_ = 0;
  std::atomic<std::int64_t> next_{0};
  std::size_t finished_ = 0;  // workers done with the current generation
  std::uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  const std::atomic<bool>* cancel_ = nullptr;
  bool cancelled() const { return cancel_ && cancel_->load(std::memory_order_relaxed); }
};

}  // namespace kantor::cpu
