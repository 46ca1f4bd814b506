// Helpers shared by the Birkhoff test files: a CPU context, batch views of host vectors, one
// matrix of a batch as a float64 reference matrix, and the largest entry difference.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "kantor/birkhoff.hpp"
#include "kantor/buffer.hpp"
#include "kantor/config.hpp"
#include "kantor/context.hpp"
#include "kantor/info.hpp"
#include "tests/birkhoff/reference.hpp"

/// Skips a GPU test in a CPU-only build or where no device is visible.
#define KANTOR_REQUIRE_CUDA()                                             \
  do {                                                                    \
    if (!KANTOR_CUDA_ENABLED) GTEST_SKIP() << "built without CUDA";       \
    if (cuda_devices().empty()) GTEST_SKIP() << "no CUDA device visible"; \
  } while (0)

namespace kantor::test {

/// A host batch copied to the device, with batch views of it.
template <class T>
struct DeviceCopy {
  Buffer<T> buf;
  int n;
  DeviceCopy(const Context& ctx, const std::vector<T>& host, int n_)
      : buf(ctx, std::int64_t(host.size())), n(n_) {
    copy(ctx, VectorView<const T>{host.data(), std::int64_t(host.size()), MemorySpace::kHost},
         buf.view());
  }
  BatchView<const T> c() const { return batch_view<const T>(buf, n); }
  BatchView<T> v() const { return batch_view<T>(buf, n); }
  std::vector<T> host(const Context& ctx) const { return to_host(ctx, buf.cview()); }
};


inline Context cpu_context() { return Context(ContextOptions{Backend::kCpu, 2}); }

inline BatchView<const float> cview(const std::vector<float>& v, int n) {
  return {v.data(), std::int64_t(v.size()) / (n * n), n, MemorySpace::kHost};
}
inline BatchView<float> view(std::vector<float>& v, int n) {
  return {v.data(), std::int64_t(v.size()) / (n * n), n, MemorySpace::kHost};
}

inline Mat matrix(const std::vector<float>& v, std::int64_t b, int n) {
  Mat m(n * n);
  for (int k = 0; k < n * n; ++k) m[k] = v[std::size_t(b * n * n + k)];
  return m;
}

inline double max_abs_diff(const Mat& a, const float* b) {
  double d = 0;
  for (std::size_t k = 0; k < a.size(); ++k) d = std::max(d, std::fabs(a[k] - double(b[k])));
  return d;
}

/// dL/dR of an implicit backward has zero row and column sums (docs/birkhoff.md): checks
/// matrix b of the batch D (n x n each).
inline void expect_zero_row_and_column_sums(const std::vector<float>& D, std::int64_t b, int n,
                                            double tol = 1e-6) {
  for (int i = 0; i < n; ++i) {
    double rs = 0, cs = 0;
    for (int j = 0; j < n; ++j) {
      rs += D[std::size_t(b * n * n + i * n + j)];
      cs += D[std::size_t(b * n * n + j * n + i)];
    }
    EXPECT_NEAR(rs, 0, tol) << "matrix " << b << ", row " << i;
    EXPECT_NEAR(cs, 0, tol) << "matrix " << b << ", column " << i;
  }
}

}  // namespace kantor::test
