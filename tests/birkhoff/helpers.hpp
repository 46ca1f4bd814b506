// Helpers shared by the Birkhoff test files: a CPU context, batch views of host vectors, one
// matrix of a batch as a float64 reference matrix, and the largest entry difference.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kantor/birkhoff.hpp"
#include "kantor/context.hpp"
#include "tests/birkhoff/reference.hpp"

namespace kantor::test {

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

}  // namespace kantor::test
