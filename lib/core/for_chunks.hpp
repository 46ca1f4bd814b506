// Host loops of the setup split over the host threads: body(t, begin, end) over [0, count) in one
// contiguous chunk per thread, on the process-wide host pool (lib/core/thread_pool.hpp). Used by
// the cost preparation, validation and the engines' setup copies (padding, rounding, norms):
// plain loops over the clouds that would otherwise run on one core.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>

#include "kantor/host_parallel.hpp"

namespace kantor::detail {

/// At most this many chunks (callers size per-chunk arrays by it).
constexpr int kMaxChunks = 1024;

/// body(t, begin, end) over [0, count), one contiguous chunk per host thread (at most
/// kMaxChunks), at least `grain` items each (a single call for fewer than 2 grains: small
/// problems stay serial); returns the chunk count. Chunks write disjoint ranges; body must not
/// throw.
template <class Body>
int for_chunks(std::int64_t count, const Body& body, std::int64_t grain = std::int64_t(1) << 16) {
  const unsigned hw = std::min(unsigned(kMaxChunks), std::max(1u, std::thread::hardware_concurrency()));
  const int t = int(std::max<std::int64_t>(1, std::min<std::int64_t>(hw, count / grain)));
  if (t == 1) {
    body(0, std::int64_t(0), count);
    return 1;
  }
  const std::int64_t per = (count + t - 1) / t;
  host_parallel(t, 0, [&](std::int64_t k) {
    body(int(k), k * per, std::min(count, (k + 1) * per));
  });
  return t;
}

/// The grain in rows for rows of `width` values: about 2^16 values per chunk (a row of d = 784
/// is as much work as 261 rows of d = 3), at least 16 rows.
inline std::int64_t row_grain(std::int64_t width) {
  return std::max<std::int64_t>(16, (std::int64_t(1) << 16) / std::max<std::int64_t>(width, 1));
}

}  // namespace kantor::detail
