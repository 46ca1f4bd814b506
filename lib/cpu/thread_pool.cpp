#include "lib/cpu/thread_pool.hpp"

namespace kantor::cpu {

ThreadPool::ThreadPool(int threads, const std::atomic<bool>* cancel) : cancel_(cancel) {
  try {
    for (int t = 1; t < threads; ++t) workers_.emplace_back([this] { worker_loop(); });
  } catch (...) {
    // Guard: a thread that cannot be created (process or memory limit) must not leave the
    // workers already started waiting on a condition variable that is being destroyed.
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
    throw;
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::drain() {
  for (;;) {
    // Cancellation is polled between tasks (row blocks): a Ctrl-C stops a long pass promptly.
    if (cancelled()) return;
    const std::int64_t t = next_.fetch_add(1);
    if (t >= tasks_) return;
    try {
      (*fn_)(t);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
      next_.store(tasks_);  // stop handing out work
    }
  }
}

void ThreadPool::worker_loop() {
  std::uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    drain();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (++finished_ == workers_.size()) done_.notify_all();
    }
  }
}

void ThreadPool::run(std::int64_t tasks, const std::function<void(std::int64_t)>& fn) {
  if (tasks <= 0) return;
  if (workers_.empty() || tasks == 1) {
    for (std::int64_t t = 0; t < tasks && !cancelled(); ++t) fn(t);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fn_ = &fn;
    tasks_ = tasks;
    next_.store(0);
    error_ = nullptr;
    finished_ = 0;
    ++generation_;
  }
  wake_.notify_all();
  drain();
  std::unique_lock<std::mutex> lock(mutex_);
  // Every worker takes part in every generation, so once all have reported no thread can still
  // hold a task index of this run.
  done_.wait(lock, [&] { return finished_ == workers_.size(); });
  fn_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

}  // namespace kantor::cpu
