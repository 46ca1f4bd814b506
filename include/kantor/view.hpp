// Non-owning, trivially copyable views of vectors and row-major matrices in host or device
// memory. Views are validated at API boundaries, never inside passes.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kantor/types.hpp"

namespace kantor {

/// A contiguous vector of `size` elements.
template <class T>
struct VectorView {
  T* data = nullptr;
  std::int64_t size = 0;
  MemorySpace space = MemorySpace::kHost;

  T& operator[](std::int64_t i) const { return data[i]; }
  /// Implicit conversion to a view of const elements (views of non-const elements only).
  template <class U = T, class = std::enable_if_t<!std::is_const<U>::value>>
  operator VectorView<const U>() const {
    return {data, size, space};
  }
};

/// A row-major matrix: element (i, k) is data[i * stride + k], stride >= cols.
template <class T>
struct MatrixView {
  T* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t stride = 0;
  MemorySpace space = MemorySpace::kHost;

  T& operator()(std::int64_t i, std::int64_t k) const { return data[i * stride + k]; }
  T* row(std::int64_t i) const { return data + i * stride; }
  template <class U = T, class = std::enable_if_t<!std::is_const<U>::value>>
  operator MatrixView<const U>() const {
    return {data, rows, cols, stride, space};
  }
};

/// The same memory, shape and space (one cloud given as both sides of a problem).
template <class T>
bool same_view(const MatrixView<T>& u, const MatrixView<T>& v) {
  return u.data == v.data && u.rows == v.rows && u.cols == v.cols && u.stride == v.stride &&
         u.space == v.space;
}

/// A view of a contiguous host vector.
template <class T>
VectorView<T> host_vector(T* data, std::int64_t size) {
  return {data, size, MemorySpace::kHost};
}
/// A view of a contiguous (stride = cols) row-major host matrix.
template <class T>
MatrixView<T> host_matrix(T* data, std::int64_t rows, std::int64_t cols) {
  return {data, rows, cols, cols, MemorySpace::kHost};
}

static_assert(std::is_trivially_copyable<VectorView<float>>::value, "views are PODs");
static_assert(std::is_trivially_copyable<MatrixView<double>>::value, "views are PODs");

}  // namespace kantor
