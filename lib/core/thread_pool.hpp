// A fixed pool of worker threads. run(tasks, fn) calls fn(task) for every task in [0, tasks) on
// the workers and the calling thread, and returns when all are done. Tasks are handed out
// dynamically; results must not depend on which thread ran a task (each task writes its own
// outputs), which keeps every user deterministic for any thread count.
//
// Two kinds of pools: each Context owns one for the CPU engine's passes (its `threads`, its
// cancellation flag), and one process-wide pool (host_pool(), all cores) serves the host loops
// beside the engines: problem preparation, validation, the engines' setup copies and the
// solvers' screening (detail::host_parallel, include/kantor/host_parallel.hpp). Starting threads
// for every loop instead cost 0.47 ms per loop of 16 threads on the H200 machine's 16-core host
// (4.8 ms on a loaded 2-core machine), and a multiscale solve runs about a hundred such loops
// (thirteenth session).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kantor::detail {

class ThreadPool {
 public:
  /// `threads` in all, the calling thread included. `cancel` (optional): once it reads true,
  /// run() hands out no further tasks (the tasks already running finish; the outputs of the
  /// others are left as they were).
  explicit ThreadPool(int threads, const std::atomic<bool>* cancel = nullptr);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }
  /// Runs fn(0..tasks-1) on at most `lanes` threads (0: all of them), the caller included;
  /// rethrows the first exception a task threw. A call from inside a task of this pool (nested)
  /// runs its tasks on the calling thread. One run at a time: concurrent callers must serialize
  /// (host_parallel does).
  void run(std::int64_t tasks, const std::function<void(std::int64_t)>& fn, int lanes = 0);

 private:
  void worker_loop(std::size_t index);
  void drain();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(std::int64_t)>* fn_ = nullptr;
  std::int64_t tasks_ = 0;
  std::size_t lanes_ = 0;  // workers taking part in the current generation
  std::atomic<std::int64_t> next_{0};
  std::size_t finished_ = 0;  // workers done with the current generation
  std::uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  const std::atomic<bool>* cancel_ = nullptr;
  bool cancelled() const { return cancel_ && cancel_->load(std::memory_order_relaxed); }
};

/// The process-wide pool of the host loops (hardware concurrency threads, started on first use
/// and kept until the process ends).
ThreadPool& host_pool();

}  // namespace kantor::detail
