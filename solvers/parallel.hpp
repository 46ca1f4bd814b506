// Host-thread helpers of the solvers (work that runs beside the engines: OTDD's label distances,
// the multiscale solver's screening). The engines have their own pools (lib/cpu/thread_pool).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

namespace kantor::detail {

/// `threads` if positive, else the hardware concurrency (at least 1).
inline int thread_count(int threads) {
  if (threads > 0) return threads;
  const unsigned h = std::thread::hardware_concurrency();
  return h ? int(h) : 1;
}

/// Runs body(i) for i in [0, count) on up to `threads` host threads (dynamic: an atomic counter).
/// The first exception thrown by a body is rethrown after every thread has stopped.
template <class Body>
void parallel_for(std::int64_t count, int threads, const Body& body) {
  const int t = int(std::min<std::int64_t>(thread_count(threads), count));
  if (t <= 1) {
    for (std::int64_t i = 0; i < count; ++i) body(i);
    return;
  }
  std::atomic<std::int64_t> next{0};
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  std::vector<std::thread> pool;
  for (int k = 0; k < t; ++k)
    pool.emplace_back([&] {
      for (;;) {
        const std::int64_t i = next.fetch_add(1);
        if (i >= count || failed.load()) return;
        try {
          body(i);
        } catch (...) {
          if (!failed.exchange(true)) error = std::current_exception();
          return;
        }
      }
    });
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

/// Runs body(begin, end) over [0, count) in contiguous chunks of at least `grain` indices, one
/// chunk per task, on up to `threads` host threads.
template <class Body>
void parallel_ranges(std::int64_t count, int threads, std::int64_t grain, const Body& body) {
  const std::int64_t chunks = std::max<std::int64_t>(1, (count + grain - 1) / grain);
  parallel_for(chunks, threads, [&](std::int64_t c) {
    body(c * grain, std::min(count, (c + 1) * grain));
  });
}

}  // namespace kantor::detail
