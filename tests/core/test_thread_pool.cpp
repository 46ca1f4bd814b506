// The thread pools (lib/core/thread_pool.hpp): every task runs exactly once, at most `lanes`
// threads take part, a nested run goes serial on its thread instead of deadlocking, the first
// exception comes back after the loop, and the process-wide host pool serves callers on several
// threads at once and keeps its workers (no thread is started per loop).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kantor/host_parallel.hpp"
#include "lib/core/for_chunks.hpp"
#include "lib/core/thread_pool.hpp"

namespace kantor::testing {
namespace {

using detail::ThreadPool;

// The distinct threads that ran a loop's tasks (each task sleeps a little so that every
// participating thread gets some).
template <class Run>
std::set<std::thread::id> threads_of(std::int64_t tasks, Run&& run, std::vector<int>* hits) {
  std::mutex m;
  std::set<std::thread::id> ids;
  hits->assign(std::size_t(tasks), 0);
  run(tasks, [&](std::int64_t t) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    ++(*hits)[std::size_t(t)];
    std::lock_guard<std::mutex> lock(m);
    ids.insert(std::this_thread::get_id());
  });
  return ids;
}

TEST(ThreadPool, EveryTaskOnceOnAtMostTheLanes) {
  ThreadPool pool(4);
  for (int lanes : {0, 1, 2, 3, 4, 7}) {
    std::vector<int> hits;
    auto run = [&](std::int64_t n, const std::function<void(std::int64_t)>& fn) {
      pool.run(n, fn, lanes);
    };
    const auto ids = threads_of(64, run, &hits);
    for (int h : hits) EXPECT_EQ(h, 1) << "lanes " << lanes;
    EXPECT_LE(int(ids.size()), lanes > 0 ? std::min(lanes, 4) : 4) << "lanes " << lanes;
    if (lanes == 1) EXPECT_EQ(*ids.begin(), std::this_thread::get_id());
  }
}

TEST(ThreadPool, ANestedRunGoesSerialOnItsThread) {
  ThreadPool pool(3);
  std::atomic<int> inner{0};
  std::atomic<bool> other_thread{false};
  pool.run(6, [&](std::int64_t) {
    const auto me = std::this_thread::get_id();
    pool.run(5, [&](std::int64_t) {
      if (std::this_thread::get_id() != me) other_thread = true;
      ++inner;
    });
  });
  EXPECT_EQ(inner.load(), 30);
  EXPECT_FALSE(other_thread.load());
}

TEST(ThreadPool, TheFirstExceptionComesBackAfterTheLoop) {
  ThreadPool pool(3);
  std::atomic<int> ran{0};
  EXPECT_THROW(pool.run(100,
                        [&](std::int64_t t) {
                          ++ran;
                          if (t == 5) throw std::runtime_error("task 5");
                        }),
               std::runtime_error);
  EXPECT_LE(ran.load(), 100);
  // The pool still works afterwards.
  std::atomic<int> again{0};
  pool.run(10, [&](std::int64_t) { ++again; });
  EXPECT_EQ(again.load(), 10);
}

TEST(HostParallel, CallersOnSeveralThreadsAndNestedLoops) {
  std::vector<std::thread> callers;
  std::vector<std::int64_t> sums(4, 0);
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&, c] {
      for (int rep = 0; rep < 20; ++rep) {
        std::vector<std::int64_t> v(1000, 0);
        detail::host_parallel(1000, 0, [&](std::int64_t i) {
          // A nested loop inside a host loop runs on its own thread.
          std::int64_t s = 0;
          detail::host_parallel(3, 0, [&](std::int64_t k) { s += k; });
          v[std::size_t(i)] = i + s;
        });
        std::int64_t total = 0;
        for (auto e : v) total += e;
        sums[std::size_t(c)] += total;
      }
    });
  for (auto& t : callers) t.join();
  for (auto s : sums) EXPECT_EQ(s, 20 * (999 * 1000 / 2 + 3 * 1000));
  EXPECT_THROW(detail::host_parallel(10, 0,
                                     [](std::int64_t i) {
                                       if (i == 3) throw std::invalid_argument("three");
                                     }),
               std::invalid_argument);
}

TEST(HostParallel, ChunksCoverTheRangeOnceWithTheSameWorkers) {
  std::vector<int> seen(1 << 20, 0);
  const int chunks = detail::for_chunks(
      std::int64_t(seen.size()),
      [&](int, std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) ++seen[std::size_t(i)];
      },
      1024);
  EXPECT_GE(chunks, 1);
  for (int s : seen) ASSERT_EQ(s, 1);
  // The same pool serves every loop: the threads of two loops are the same set (the workers
  // stay), not new ones.
  auto run = [](std::int64_t n, const std::function<void(std::int64_t)>& fn) {
    detail::host_parallel(n, 0, fn);
  };
  std::vector<int> hits;
  const auto first = threads_of(256, run, &hits);
  std::set<std::thread::id> all = first;
  for (int rep = 0; rep < 5; ++rep) {
    const auto more = threads_of(256, run, &hits);
    all.insert(more.begin(), more.end());
  }
  EXPECT_LE(all.size(), std::size_t(detail::host_pool().size()));
}

}  // namespace
}  // namespace kantor::testing
