// Host loops of the setup split over the host threads: body(t, begin, end) over [0, count) in one
// contiguous chunk per thread, on the process-wide host pool (lib/core/thread_pool.hpp). Used by
// the cost preparation, validation and the engines' setup copies (padding, rounding, norms):
// plain loops over the clouds that would otherwise run on one core.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "kantor/host_parallel.hpp"

namespace kantor::detail {

/// At most this many chunks (callers size per-chunk arrays by it).
constexpr int kMaxChunks = 1024;

/// The chunk of the setup's ordered double sums (weight totals and masses: per-chunk sums added
/// in chunk order, so the same bits for any thread count; validation and the preparation must use
/// the same one for their totals to agree bit for bit).
constexpr std::int64_t kSumChunk = std::int64_t(1) << 16;

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

/// Several loops over fixed chunks in one parallel region: add(count, chunk, body) schedules
/// body(c, begin, end) for each chunk c = [begin, end) of [0, count); run() runs every chunk of
/// every loop on the host pool, in one fork and join (a region costs the 16-core GPU machine tens
/// of microseconds, and a problem's preparation ran fourteen), serially below two chunks' worth
/// of items in all. Fixed chunks: a per-chunk result combined in chunk order is the same for any
/// thread count.
class ChunkRegion {
 public:
  using Body = std::function<void(std::int64_t, std::int64_t, std::int64_t)>;
  void add(std::int64_t count, std::int64_t chunk, Body body) {
    const std::int64_t chunks = count > 0 ? (count + chunk - 1) / chunk : 0;
    loops_.push_back({count, chunk, std::move(body)});
    for (std::int64_t c = 0; c < chunks; ++c) tasks_.push_back({int(loops_.size() - 1), c});
    if (chunks > 0) {
      items_ += count;
      min_chunk_ = std::min(min_chunk_, chunk);
    }
  }
  void run() const {
    if (tasks_.empty()) return;
    auto one = [&](std::int64_t k) {
      const Task& t = tasks_[std::size_t(k)];
      const Loop& l = loops_[std::size_t(t.loop)];
      const std::int64_t b = t.chunk * l.chunk;
      l.body(t.chunk, b, std::min(l.count, b + l.chunk));
    };
    const std::int64_t n = std::int64_t(tasks_.size());
    if (items_ / 2 < min_chunk_) {
      for (std::int64_t k = 0; k < n; ++k) one(k);
      return;
    }
    host_parallel(n, 0, one);
  }

 private:
  struct Loop {
    std::int64_t count, chunk;
    Body body;
  };
  struct Task {
    int loop;
    std::int64_t chunk;
  };
  std::vector<Loop> loops_;
  std::vector<Task> tasks_;
  std::int64_t items_ = 0, min_chunk_ = std::int64_t(1) << 62;
};

/// The grain in rows for rows of `width` values: about 2^16 values per chunk (a row of d = 784
/// is as much work as 261 rows of d = 3), at least 16 rows.
inline std::int64_t row_grain(std::int64_t width) {
  return std::max<std::int64_t>(16, (std::int64_t(1) << 16) / std::max<std::int64_t>(width, 1));
}

}  // namespace kantor::detail
