// A std::vector whose resize does not zero its new elements (default-initialization: trivially
// constructible T stays uninitialized). For large host copies that a parallel loop writes
// completely right after (the engines' setup, the multiscale solver's sorted copies): zero-filling
// them first was one serial pass over fresh memory, and with the page faults it took, the largest
// share of the setup of large clouds (perf, prepare_problem_data at 60,000 x 784: memset and
// clear_page ~35%). Internal (namespace detail): public so that the solvers, which see only
// include/, share it with lib/.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace kantor::detail {

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
