// Host-thread helpers of the solvers (work that runs beside the engines: OTDD's label distances,
// the multiscale solver's screening), on the process-wide host pool (kantor/host_parallel.hpp).
// The CPU engine's passes run on their context's own pool (lib/core/thread_pool.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <thread>

#include "kantor/host_parallel.hpp"

namespace kantor::detail {

/// `threads` if positive, else the hardware concurrency (at least 1).
inline int thread_count(int threads) {
  if (threads > 0) return threads;
  const unsigned h = std::thread::hardware_concurrency();
  return h ? int(h) : 1;
}

/// Runs body(i) for i in [0, count) on up to `threads` host threads (0: all cores) of the
/// process-wide host pool (dynamic: an atomic counter). The first exception thrown by a body is
/// rethrown after the loop has stopped.
template <class Body>
void parallel_for(std::int64_t count, int threads, const Body& body) {
  host_parallel(count, threads, std::function<void(std::int64_t)>(std::cref(body)));
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
