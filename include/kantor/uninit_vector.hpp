// A std::vector whose resize does not zero its new elements (default-initialization: trivially
// constructible T stays uninitialized). For large host copies that a parallel loop writes
// completely right after (the engines' setup, the multiscale solver's sorted copies): zero-filling
// them first was one serial pass over fresh memory, and with the page faults it took, the largest
// share of the setup of large clouds (perf, prepare_problem_data at 60,000 x 784: memset and
// clear_page ~35%). Internal (namespace detail): public so that the solvers, which see only
// include/, share it with lib/.
#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace kantor::detail {

/// Host blocks from this size up are backed by transparent huge pages where the system offers
/// them on request (advise_huge_pages).
constexpr std::size_t kHugePageAdviceBytes = std::size_t(4) << 20;

/// Asks the kernel to back the 2 MiB-aligned interior of [p, p + bytes) with transparent huge
/// pages (Linux: madvise MADV_HUGEPAGE, which the "madvise" THP mode of the GPU machines and of
/// this project's CI needs; elsewhere, or when refused, nothing). Before the block is first
/// written: one fault per 2 MiB instead of one per 4 KiB (docs/architecture.md, "Host memory in
/// the CLI"). Never fails.
void advise_huge_pages(void* p, std::size_t bytes) noexcept;

template <class T>
struct NoInitAllocator : std::allocator<T> {
  using value_type = T;
  template <class U>
  struct rebind {
    using other = NoInitAllocator<U>;
  };
  NoInitAllocator() = default;
  template <class U>
  NoInitAllocator(const NoInitAllocator<U>&) noexcept {}
  /// Large blocks get the huge-page advice before their first write.
  T* allocate(std::size_t count) {
    T* p = std::allocator<T>::allocate(count);
    if (count >= kHugePageAdviceBytes / sizeof(T)) advise_huge_pages(p, count * sizeof(T));
    return p;
  }
  /// Value-initialization (resize(n), vector(n)) becomes default-initialization.
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible<U>::value) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

/// Elements after a resize are indeterminate until written.
template <class T>
using UninitVector = std::vector<T, NoInitAllocator<T>>;

}  // namespace kantor::detail
