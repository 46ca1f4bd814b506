#include "lib/core/thread_pool.hpp"

#include <algorithm>

#include "kantor/host_parallel.hpp"

namespace kantor::detail {
namespace {
// The pool whose task this thread is running (nested run() calls go serial).
thread_local const ThreadPool* tl_running = nullptr;

struct RunningGuard {
  const ThreadPool* saved;
  explicit RunningGuard(const ThreadPool* p) : saved(tl_running) { tl_running = p; }
  ~RunningGuard() { tl_running = saved; }
};
}  // namespace

ThreadPool::ThreadPool(int threads, const std::atomic<bool>* cancel) : cancel_(cancel) {
  try {
    for (int t = 1; t < threads; ++t)
      workers_.emplace_back([this, t] { worker_loop(std::size_t(t - 1)); });
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
  RunningGuard guard(this);
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

void ThreadPool::worker_loop(std::size_t index) {
  std::uint64_t seen = 0;
  for (;;) {
    bool take_part;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      take_part = index < lanes_;
    }
    if (take_part) drain();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (++finished_ == workers_.size()) done_.notify_all();
    }
  }
}

void ThreadPool::run(std::int64_t tasks, const std::function<void(std::int64_t)>& fn, int lanes) {
  if (tasks <= 0) return;
  const std::size_t helpers = std::min<std::size_t>(
      workers_.size(), std::size_t(std::min<std::int64_t>(tasks, lanes > 0 ? lanes : size())) - 1);
  if (helpers == 0 || tl_running == this) {
    for (std::int64_t t = 0; t < tasks && !cancelled(); ++t) fn(t);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fn_ = &fn;
    tasks_ = tasks;
    lanes_ = helpers;
    next_.store(0);
    error_ = nullptr;
    finished_ = 0;
    ++generation_;
  }
  wake_.notify_all();
  drain();
  std::unique_lock<std::mutex> lock(mutex_);
  // Every worker reports every generation (those beyond the lanes at once), so once all have
  // reported no thread can still hold a task index of this run.
  done_.wait(lock, [&] { return finished_ == workers_.size(); });
  fn_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

ThreadPool& host_pool() {
  // Never destroyed: its workers wait on it until the process ends (no destruction-order
  // hazard with other statics that may still run host loops at exit).
  static ThreadPool* pool = [] {
    const unsigned hw = std::thread::hardware_concurrency();
    return new ThreadPool(int(std::max(1u, hw)));
  }();
  return *pool;
}

void host_parallel(std::int64_t count, int threads, const std::function<void(std::int64_t)>& body) {
  if (count <= 0) return;
  ThreadPool& pool = host_pool();
  // One run at a time on the shared pool. A nested loop, or a loop while another thread's runs
  // (contexts used concurrently), runs on its own thread: never waiting on the pool rules out a
  // deadlock whatever the bodies call.
  static std::mutex one_run;
  std::unique_lock<std::mutex> lock(one_run, std::defer_lock);
  if (threads == 1 || count == 1 || tl_running == &pool || !lock.try_lock()) {
    // Serial, and marked as inside a host loop: its own nested loops stay on this thread too
    // (else one could take the pool once it is free and run a body that assumed it was serial
    // on several threads).
    RunningGuard guard(&pool);
    for (std::int64_t i = 0; i < count; ++i) body(i);
    return;
  }
  pool.run(count, body, threads);
}

}  // namespace kantor::detail
