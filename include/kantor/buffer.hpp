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
/// The permutation that sorts the `count` keys at `keys` by their low `bits` bits (1..64),
/// stably, computed on the context's device (CUDA: a radix sort; only the keys go up and only the
/// permutation comes back): order[k] (count entries, the caller's) is the index of the k-th
/// smallest key. Returns false, changing nothing, on a CPU context (the caller sorts on the
/// host). Synchronizes. `device_order`, when given, receives the permutation on the device as
/// well (for device_permute).
bool device_sort_order(const Context& ctx, const std::uint64_t* keys, std::int64_t count, int bits,
                       std::int64_t* order, Buffer<std::int64_t>* device_order = nullptr);
/// The same into a vector, resized to the keys' count.
bool device_sort_order(const Context& ctx, const std::vector<std::uint64_t>& keys, int bits,
                       std::vector<std::int64_t>* order,
                       Buffer<std::int64_t>* device_order = nullptr);
/// On the context's device, through a permutation held there (`order`, count entries, such as
/// device_sort_order's): scatter dst[order[k]] = src[k] (scatter) or gather dst[k] =
/// src[order[k]]; src and dst device arrays of count values that do not overlap. Returns false,
/// changing nothing, on a CPU context. Stream-ordered (no synchronization).
bool device_permute(const Context& ctx, const std::int64_t* order, const float* src, float* dst,
                    std::int64_t count, bool scatter);
bool device_permute(const Context& ctx, const std::int64_t* order, const double* src,
                    double* dst, std::int64_t count, bool scatter);
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
