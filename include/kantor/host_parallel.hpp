// Host loops beside the engines (problem preparation, validation, the multiscale screen, OTDD's
// label distances) on one persistent process-wide pool of threads (lib/core/thread_pool.hpp).
// Internal: the solvers reach it through solvers/parallel.hpp.
#pragma once

#include <cstdint>
#include <functional>

namespace kantor::detail {

/// Runs body(i) for i in [0, count) on up to `threads` host threads (0: all cores; 1: the calling
/// thread only), indices handed out dynamically. A call from inside such a loop, or while another
/// thread's loop holds the pool, runs serially on its own thread. The first exception a body
/// throws is rethrown after the loop has stopped.
void host_parallel(std::int64_t count, int threads, const std::function<void(std::int64_t)>& body);

}  // namespace kantor::detail
