#include "kantor/buffer.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <utility>

#include "kantor/error.hpp"
#include "kantor/host_parallel.hpp"
#include "lib/cuda/runtime.hpp"
#include "lib/runtime/context_impl.hpp"

namespace kantor::detail {

void* allocate_bytes(const Context& ctx, MemorySpace space, std::size_t bytes) {
  if (space == MemorySpace::kDevice) {
    // A CUDA context's buffers are stream-ordered on its stream (its pool); a device buffer of
    // a CPU context is a plain allocation.
    const Context::Impl& c = ctx.impl();
    return c.memory ? cuda::pool_malloc(bytes, c.memory, c.stream) : cuda::device_malloc(bytes);
  }
  // 64-byte alignment for vectorized CPU passes. Guard: rounding a size near SIZE_MAX up to a
  // multiple of 64 wraps around to a tiny allocation that would "succeed".
  if (bytes > std::numeric_limits<std::size_t>::max() - 63)
    throw OutOfMemory("cannot allocate " + std::to_string(bytes) + " bytes of host memory");
  const std::size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) throw OutOfMemory("cannot allocate " + std::to_string(bytes) + " bytes of host memory");
  return p;
}

void free_bytes(const Context& ctx, MemorySpace space, void* p) noexcept {
  if (space == MemorySpace::kDevice) {
    // Guard: a context moved from after this buffer was made has no state; cudaFree waits for
    // the device, which orders the free after every stream's work.
    const Context::Impl* c = ctx.impl_if_any();
    if (c && c->memory)
      cuda::pool_free(p, c->stream);
    else
      cuda::device_free(p);
  } else {
    std::free(p);
  }
}

void copy_bytes(const Context& ctx, void* dst, MemorySpace dst_space, const void* src,
                MemorySpace src_space, std::size_t bytes) {
  if (bytes == 0) return;
  if (dst_space == MemorySpace::kHost && src_space == MemorySpace::kHost) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const int kind = src_space == MemorySpace::kHost ? 0 : dst_space == MemorySpace::kHost ? 1 : 2;
  // Large copies to or from (pageable) host memory go through the context's two pinned buffers,
  // the host side copied by the host threads while the DMA of the other buffer runs: the
  // driver's own staging of pageable memory is one host thread's memcpy (at 2^20 points a side
  // the engine's 80 MB upload ran at ~4 GB/s on the H100 machines, docs/benchmarks.md).
  constexpr std::size_t kStagedFrom = std::size_t(4) << 20, kChunk = std::size_t(8) << 20;
  const Context::Impl& c = ctx.impl();
  // (Not while the stream is captured into a graph: the copy's events and the shared buffers
  // cannot be part of a recorded step; the plain copy is then refused by the capture.)
  if (kind != 2 && bytes >= kStagedFrom && c.backend == Backend::kCuda &&
      !cuda::stream_capturing(c.stream)) {
    std::lock_guard<std::mutex> lock(c.staging_mutex);
    if (!c.staging_tried) {
      c.staging_tried = true;
      void* st = cuda::staging_create(kChunk);
      if (st) c.staging = std::shared_ptr<void>(st, cuda::staging_destroy);
    }
    if (c.staging) {
      // Pieces of 1 MB on the host threads.
      const cuda::HostCopy host_copy = [](void* to, const void* from, std::size_t n) {
        constexpr std::size_t kPiece = std::size_t(1) << 20;
        host_parallel(std::int64_t((n + kPiece - 1) / kPiece), 0, [&](std::int64_t k) {
          const std::size_t off = std::size_t(k) * kPiece;
          std::memcpy(static_cast<char*>(to) + off, static_cast<const char*>(from) + off,
                      std::min(kPiece, n - off));
        });
      };
      if (kind == 0)
        cuda::staged_upload(c.staging.get(), dst, src, bytes, c.stream, host_copy);
      else
        cuda::staged_download(c.staging.get(), dst, src, bytes, c.stream, host_copy);
      return;
    }
  }
  cuda::memcpy_async(dst, src, bytes, kind, ctx.cuda_stream());
  if (dst_space == MemorySpace::kHost) ctx.synchronize();
}

void fill_bytes(const Context& ctx, void* dst, MemorySpace space, int value, std::size_t bytes) {
  if (bytes == 0) return;
  if (space == MemorySpace::kHost)
    std::memset(dst, value, bytes);
  else
    cuda::memset_async(dst, value, bytes, ctx.cuda_stream());
}

bool device_sort_order(const Context& ctx, const std::uint64_t* keys, std::int64_t count, int bits,
                       std::int64_t* order, Buffer<std::int64_t>* device_order) {
  if (ctx.backend() != Backend::kCuda) return false;
  if (bits < 1 || bits > 64)
    throw InvalidArgument("device_sort_order: bits must be in [1, 64], got " + std::to_string(bits));
  if (count < 0) check_non_negative_size(count);
  const std::size_t bytes = sizeof(std::int64_t) * std::size_t(count);
  if (count < 2) {
    if (count == 1) order[0] = 0;
    if (device_order) {
      *device_order = Buffer<std::int64_t>(ctx, count);
      copy_bytes(ctx, device_order->data(), MemorySpace::kDevice, order, MemorySpace::kHost,
                 bytes);
    }
    return true;
  }
  Buffer<std::uint64_t> kin(ctx, count), kout(ctx, count);
  Buffer<std::int64_t> scratch(ctx, count), out(ctx, count);
  copy_bytes(ctx, kin.data(), MemorySpace::kDevice, keys, MemorySpace::kHost,
             sizeof(std::uint64_t) * std::size_t(count));
  const std::size_t temp_bytes = cuda::sort_order_temp_bytes(count, bits);
  Buffer<std::uint8_t> temp(ctx, std::int64_t(std::max<std::size_t>(temp_bytes, 1)));
  cuda::sort_order(temp.data(), temp_bytes, kin.data(), kout.data(), scratch.data(), out.data(),
                   count, bits, ctx.cuda_stream());
  copy_bytes(ctx, order, MemorySpace::kHost, out.data(), MemorySpace::kDevice, bytes);
  if (device_order) *device_order = std::move(out);
  return true;
}

bool device_sort_order(const Context& ctx, const std::vector<std::uint64_t>& keys, int bits,
                       std::vector<std::int64_t>* order, Buffer<std::int64_t>* device_order) {
  if (ctx.backend() != Backend::kCuda) return false;
  if (bits < 1 || bits > 64)
    throw InvalidArgument("device_sort_order: bits must be in [1, 64], got " + std::to_string(bits));
  order->resize(keys.size());
  return device_sort_order(ctx, keys.data(), std::int64_t(keys.size()), bits, order->data(),
                           device_order);
}

template <class T>
bool permute_on_device(const Context& ctx, const std::int64_t* order, const T* src, T* dst,
                       std::int64_t count, bool scatter) {
  if (ctx.backend() != Backend::kCuda) return false;
  if (count < 0) check_non_negative_size(count);
  cuda::permute_by_order(order, src, dst, count, scatter, ctx.cuda_stream());
  return true;
}

bool device_permute(const Context& ctx, const std::int64_t* order, const float* src, float* dst,
                    std::int64_t count, bool scatter) {
  return permute_on_device(ctx, order, src, dst, count, scatter);
}

bool device_permute(const Context& ctx, const std::int64_t* order, const double* src,
                    double* dst, std::int64_t count, bool scatter) {
  return permute_on_device(ctx, order, src, dst, count, scatter);
}

void check_same_size(std::int64_t src, std::int64_t dst) {
  if (src != dst)
    throw InvalidArgument("copy: source has " + std::to_string(src) +
                          " elements but destination has " + std::to_string(dst));
}

void throw_too_large(std::int64_t size, std::size_t element_bytes) {
  throw OutOfMemory("cannot allocate " + std::to_string(size) + " elements of " +
                    std::to_string(element_bytes) + " bytes (the byte count overflows)");
}

void check_non_negative_size(std::int64_t size) {
  throw InvalidArgument("Buffer: size must be >= 0, got " + std::to_string(size));
}

}  // namespace kantor::detail
