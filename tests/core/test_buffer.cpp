// Buffer<T>: allocation, copies, size errors, out-of-memory, and 64-bit sizes and indices (a
// host buffer of 2^31 + 7 bytes, skipped when the machine cannot allocate it).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "kantor/buffer.hpp"
#include "kantor/context.hpp"
#include "kantor/error.hpp"
#include "lib/cuda/runtime.hpp"

namespace kantor {
namespace {

TEST(Buffer, AllocateCopyAndReadBack) {
  Context ctx(ContextOptions{Backend::kCpu, 1});
  Buffer<double> buf(ctx, 37);
  EXPECT_EQ(buf.size(), 37);
  EXPECT_EQ(buf.space(), MemorySpace::kHost);
  EXPECT_FALSE(buf.empty());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(buf.data()) % 64, 0u) << "64-byte alignment";
  std::vector<double> src(37);
  std::iota(src.begin(), src.end(), 0.5);
  copy(ctx, host_vector<const double>(src.data(), 37), buf.view());
  EXPECT_EQ(to_host(ctx, buf.cview()), src);
  std::vector<double> small(5);
  EXPECT_THROW(copy(ctx, buf.cview(), host_vector(small.data(), 5)), InvalidArgument);
  detail::fill_bytes(ctx, buf.data(), buf.space(), 0, sizeof(double) * 37);
  EXPECT_EQ(to_host(ctx, buf.cview()), std::vector<double>(37, 0.0));
}

TEST(Buffer, EmptyAndMove) {
  Context ctx(ContextOptions{Backend::kCpu, 1});
  Buffer<float> empty(ctx, 0);
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_TRUE(to_host(ctx, empty.cview()).empty());
  Buffer<float> a(ctx, 4);
  float* p = a.data();
  Buffer<float> b(std::move(a));
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.size(), 4);
  EXPECT_TRUE(a.empty());
  Buffer<float> c;
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  c.reset();
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(c.data(), nullptr);
}

TEST(Buffer, ImpossibleAllocationThrowsOutOfMemory) {
  Context ctx(ContextOptions{Backend::kCpu, 1});
  // 2^60 doubles = 2^63 bytes: no machine has that.
  EXPECT_THROW(Buffer<double>(ctx, std::int64_t(1) << 60), OutOfMemory);
  // Sizes whose byte count wraps around when rounded up to the 64-byte alignment.
  EXPECT_THROW(detail::allocate_bytes(ctx, MemorySpace::kHost, SIZE_MAX - 10), OutOfMemory);
}

// A CUDA context's device buffers come from its stream-ordered pool (docs/architecture.md,
// "Device memory"): allocations reuse freed memory, copies round-trip, an impossible size throws
// OutOfMemory, and a buffer freed after its context was moved from (misuse, but it must not
// crash) falls back to a synchronous free.
TEST(CudaBuffer, PoolAllocationsCopiesAndAMovedFromContext) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  Context ctx(ContextOptions{Backend::kCuda, 1});
  std::vector<double> h(1000);
  std::iota(h.begin(), h.end(), 0.0);
  for (int rep = 0; rep < 3; ++rep) {
    Buffer<double> b(ctx, 1000);
    copy(ctx, host_vector<const double>(h.data(), 1000), b.view());
    std::vector<double> back(1000, -1.0);
    copy(ctx, b.cview(), host_vector<double>(back.data(), 1000));
    EXPECT_EQ(back, h);
  }
  EXPECT_THROW(Buffer<double>(ctx, std::int64_t(1) << 50), OutOfMemory);
  Buffer<float> early(ctx, 4096);
  Context moved(std::move(ctx));
  Buffer<float> later(moved, 4096);
  early.reset();
  later.reset();
  moved.synchronize();
}

// Large copies through the context's pinned buffers (lib/runtime/buffer.cpp: from 4 MB on, in
// chunks of 8 MB through two buffers): sizes just below, at and between the chunk boundaries,
// back-to-back uploads (a buffer reused while its DMA may still run), the source overwritten
// right after an upload, a device-to-device copy in between, and downloads, all bit for bit.
TEST(CudaBuffer, LargeCopiesThroughPinnedBuffers) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  Context ctx(ContextOptions{Backend::kCuda, 0});
  for (const std::int64_t bytes : {std::int64_t(4) << 20, (std::int64_t(8) << 20) + 3,
                                   (std::int64_t(40) << 20) + 12345,
                                   (std::int64_t(4) << 20) - 1}) {
    SCOPED_TRACE(bytes);
    std::vector<std::uint8_t> a(static_cast<std::size_t>(bytes)), b(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      a[i] = std::uint8_t((i * 2654435761u) >> 13);
      b[i] = std::uint8_t((i * 40503u + 7) >> 5);
    }
    Buffer<std::uint8_t> da(ctx, bytes), db(ctx, bytes), dc(ctx, bytes);
    copy(ctx, host_vector<const std::uint8_t>(a.data(), bytes), da.view());
    copy(ctx, host_vector<const std::uint8_t>(b.data(), bytes), db.view());
    const std::vector<std::uint8_t> a0 = a;
    std::fill(a.begin(), a.end(), std::uint8_t(0xEE));  // the upload has read it already
    copy(ctx, da.cview(), dc.view());
    std::vector<std::uint8_t> back(a.size(), 0);
    copy(ctx, dc.cview(), host_vector<std::uint8_t>(back.data(), bytes));
    EXPECT_TRUE(back == a0);
    copy(ctx, db.cview(), host_vector<std::uint8_t>(back.data(), bytes));
    EXPECT_TRUE(back == b);
  }
}

// 64-bit sizes and indices: 2^31 + 7 bytes (2 GiB, cheap compared with 2^31 floats), written at
// indices past 2^31 through the view and summed in chunks with 64-bit counters.
TEST(Buffer, MoreThanTwoToThe31Elements) {
  Context ctx(ContextOptions{Backend::kCpu, 1});
  const std::int64_t size = (std::int64_t(1) << 31) + 7;
  // Linux overcommits: an allocation can succeed and the process be killed when the pages are
  // touched. Skip unless twice the size is physically available.
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0 && double(pages) * double(page) < 2.0 * double(size))
    GTEST_SKIP() << "less than 4 GiB of physical memory available";
  Buffer<std::uint8_t> buf;
  try {
    buf = Buffer<std::uint8_t>(ctx, size);
  } catch (const OutOfMemory&) {
    GTEST_SKIP() << "cannot allocate 2^31 + 7 bytes here";
  }
  ASSERT_EQ(buf.size(), size);
  detail::fill_bytes(ctx, buf.data(), buf.space(), 1, std::size_t(size));
  VectorView<std::uint8_t> v = buf.view();
  const std::int64_t past = (std::int64_t(1) << 31) + 3;
  v[past] = 200;
  v[size - 1] = 100;
  std::int64_t total = 0;
  const std::int64_t chunk = std::int64_t(1) << 24;
  for (std::int64_t c0 = 0; c0 < size; c0 += chunk) {
    std::int64_t s = 0;
    const std::int64_t c1 = std::min(size, c0 + chunk);
    for (std::int64_t i = c0; i < c1; ++i) s += v[i];
    total += s;
  }
  EXPECT_EQ(total, size - 2 + 200 + 100);
  EXPECT_EQ(buf.data()[past], 200);  // the same byte through the raw pointer
}

}  // namespace
}  // namespace kantor
