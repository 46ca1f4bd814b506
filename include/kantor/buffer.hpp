// Buffer<T>: owning, typed memory in a context's memory space, plus copies between spaces.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kantor/context.hpp"
#include "kantor/view.hpp"

namespace kantor {

template <class T>
class Buffer;

namespace detail {
// Allocate / free / copy raw bytes in a memory space (lib/runtime/buffer.cpp). Copies are issued on
// the context's stream; device-to-host copies synchronize that stream before returning.
void* allocate_bytes(const Context& ctx, MemorySpace space, std::size_t bytes);
void free_bytes(const Context& ctx, MemorySpace space, void* p) noexcept;
void copy_bytes(const Context& ctx, void* dst, MemorySpace dst_space, const void* src,
                MemorySpace src_space, std::size_t bytes);
void fill_bytes(const Context& ctx, void* dst, MemorySpace space, int value, std::size_t bytes);
void check_same_size(std::int64_t src, std::int64_t dst);  // throws InvalidArgument
[[noreturn]] void check_non_negative_size(std::int64_t size);  // throws InvalidArgument
[[noreturn]] void throw_too_large(std::int64_t size, std::size_t element_bytes);  // OutOfMemory
/// The permutation that sorts `keys` by their low `bits` bits (1..64), stably, computed on the
/// context's device (CUDA: a radix sort; only the keys go up and only the permutation comes
/// back): (*order)[k] is the index of the k-th smallest key. Returns false, changing nothing, on
/// a CPU context (the caller sorts on the host). Synchronizes.
bool device_sort_order(const Context& ctx, const std::vector<std::uint64_t>& keys, int bits,
                       std::vector<std::int64_t>* order);
/// The multiscale solver's Morton key (solvers/multiscale_screen.cpp, morton_key): per axis
/// k < axes, q_k = min(top, max(0, floor((x_k - lo_k) scale_k))) in double, its bits b < bits
/// at bit b axes + axes - 1 - k of the key.
struct MortonKey {
  int axes = 0, bits = 0;
  double top = 0;
  std::vector<double> lo, scale;
};
/// device_sort_order of the Morton keys of `rows` host points x (row-major, d coordinates,
/// their keys from double(x)), the keys formed on the device and the points gathered there:
/// (*order)[k] the input index of the k-th point, sorted[k d + a] = x[order[k] d + a] (rows d
/// values) and, with w (rows doubles), sorted_w[k] = w[order[k]]. Only the points and the
/// weights go up; the permutation and the gathered arrays come back (the host's gather reads
/// its input at random: 11 ms at 2^20 points a side on the H100's host). With
/// order_on_device, the permutation stays there too (for device_scatter). Returns false,
/// changing nothing, on a CPU context. Synchronizes.
template <class T>
bool device_morton_gather(const Context& ctx, const T* x, std::int64_t rows, int d,
                          const MortonKey& key, const double* w,
                          std::vector<std::int64_t>* order, T* sorted, double* sorted_w,
                          Buffer<std::int64_t>* order_on_device = nullptr);
/// out[order[k]] = in[k] for k < rows, device arrays of a CUDA context (order a permutation, out
/// not aliasing in), asynchronous on its stream: results in the caller's order without the
/// host's round trip.
template <class T>
void device_scatter(const Context& ctx, const T* in, const std::int64_t* order,
                    std::int64_t rows, T* out);
}  // namespace detail

/// Owning array of `size` T in `space`. Move-only. The Context must outlive the buffer.
/// Throws OutOfMemory when the allocation fails.
template <class T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Context& ctx, std::int64_t size, MemorySpace space)
      : ctx_(&ctx), size_(size), space_(space) {
    if (size < 0) detail::check_non_negative_size(size);
    // Guard: sizeof(T) * size must not wrap around into a small, successful allocation.
    if (std::uint64_t(size) > SIZE_MAX / sizeof(T)) detail::throw_too_large(size, sizeof(T));
    if (size > 0)
      data_ = static_cast<T*>(detail::allocate_bytes(ctx, space, sizeof(T) * std::size_t(size)));
  }
  /// A buffer in the context's own memory space.
  Buffer(const Context& ctx, std::int64_t size) : Buffer(ctx, size, ctx.memory_space()) {}
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept { swap(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      swap(o);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  T* data() const { return data_; }
  std::int64_t size() const { return size_; }
  MemorySpace space() const { return space_; }
  bool empty() const { return size_ == 0; }
  VectorView<T> view() const { return {data_, size_, space_}; }
  VectorView<const T> cview() const { return {data_, size_, space_}; }

  void reset() noexcept {
    if (data_ && ctx_) detail::free_bytes(*ctx_, space_, data_);
    data_ = nullptr;
    size_ = 0;
  }

 private:
  void swap(Buffer& o) noexcept {
    std::swap(ctx_, o.ctx_);
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(space_, o.space_);
  }
  const Context* ctx_ = nullptr;
  T* data_ = nullptr;
  std::int64_t size_ = 0;
  MemorySpace space_ = MemorySpace::kHost;
};

/// Copy `src` into `dst` (same size; any spaces). Synchronizes when dst is host memory and src is
/// device memory. Throws InvalidArgument on a size mismatch.
template <class T>
void copy(const Context& ctx, VectorView<const T> src, VectorView<T> dst) {
  detail::check_same_size(src.size, dst.size);
  if (src.size > 0)
    detail::copy_bytes(ctx, dst.data, dst.space, src.data, src.space,
                       sizeof(T) * std::size_t(src.size));
}

/// Copy a view (any space) into a new host std::vector. Synchronizes.
template <class T>
std::vector<T> to_host(const Context& ctx, VectorView<const T> src) {
  std::vector<T> out(std::size_t(src.size));
  if (src.size > 0)
    detail::copy_bytes(ctx, out.data(), MemorySpace::kHost, src.data, src.space,
                       sizeof(T) * std::size_t(src.size));
  return out;
}

}  // namespace kantor
