#include "lib/core/problem_data.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kantor/error.hpp"

namespace kantor {
namespace {

template <class T>
std::vector<T> normalized_weights(const VectorView<const T>& w, std::int64_t count) {
  std::vector<T> out(static_cast<std::size_t>(count));
  if (w.data == nullptr) {
    std::fill(out.begin(), out.end(), T(1.0 / double(count)));
    return out;
  }
  double total = 0;
  for (std::int64_t i = 0; i < count; ++i) total += double(w[i]);
  for (std::int64_t i = 0; i < count; ++i) out[std::size_t(i)] = T(double(w[i]) / total);
  return out;
}

}  // namespace

template <class T>
PreparedProblem<T> prepare_problem_data(const Problem<T>& p) {
  validate(p);
  if (p.x.space != MemorySpace::kHost || p.y.space != MemorySpace::kHost ||
      (p.a.data && p.a.space != MemorySpace::kHost) ||
      (p.b.data && p.b.space != MemorySpace::kHost))
    throw InvalidArgument("problem: point clouds and weights must be host memory here");
  PreparedProblem<T> out;
  out.n = p.x.rows;
  out.m = p.y.rows;
  out.d = p.x.cols;
  const std::int64_t d = out.d;
  std::vector<double> lo(std::size_t(d), std::numeric_limits<double>::infinity());
  std::vector<double> hi(std::size_t(d), -std::numeric_limits<double>::infinity());
  auto extend = [&](const MatrixView<const T>& v) {
    for (std::int64_t i = 0; i < v.rows; ++i)
      for (std::int64_t k = 0; k < d; ++k) {
        lo[std::size_t(k)] = std::min(lo[std::size_t(k)], double(v(i, k)));
        hi[std::size_t(k)] = std::max(hi[std::size_t(k)], double(v(i, k)));
      }
  };
  extend(p.x);
  extend(p.y);
  out.center.resize(std::size_t(d));
  double diag2 = 0;
  for (std::int64_t k = 0; k < d; ++k) {
    out.center[std::size_t(k)] = 0.5 * (lo[std::size_t(k)] + hi[std::size_t(k)]);
    diag2 += (hi[std::size_t(k)] - lo[std::size_t(k)]) * (hi[std::size_t(k)] - lo[std::size_t(k)]);
  }
  out.diameter = std::sqrt(diag2);
  auto copy_centred = [&](const MatrixView<const T>& v, std::vector<T>* dst) {
    dst->resize(std::size_t(v.rows * d));
    for (std::int64_t i = 0; i < v.rows; ++i)
      for (std::int64_t k = 0; k < d; ++k)
        (*dst)[std::size_t(i * d + k)] = T(double(v(i, k)) - out.center[std::size_t(k)]);
  };
  copy_centred(p.x, &out.x);
  copy_centred(p.y, &out.y);
  out.a = normalized_weights(p.a, out.n);
  out.b = normalized_weights(p.b, out.m);
  // Guard: a zero weight masks its point (log 0 = -inf, which every engine's pass treats as a
  // masked key and never as a NaN source).
  auto logs = [](const std::vector<T>& w) {
    std::vector<T> l(w.size());
    for (std::size_t i = 0; i < w.size(); ++i)
      l[i] = w[i] > 0 ? std::log(w[i]) : -std::numeric_limits<T>::infinity();
    return l;
  };
  out.la = logs(out.a);
  out.lb = logs(out.b);
  return out;
}

template PreparedProblem<float> prepare_problem_data(const Problem<float>&);
template PreparedProblem<double> prepare_problem_data(const Problem<double>&);

}  // namespace kantor
