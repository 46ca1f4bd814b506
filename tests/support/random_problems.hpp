// Seeded generators of test problems: Gaussian clouds, Gaussian mixtures, integer grids, weights
// rand + 0.1 (optionally with zeros), and PointData, which owns the arrays of one problem and
// hands out both a kantor::Problem<T> view and the float64 dense reference problem.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "kantor/problem.hpp"
#include "support/dense_reference.hpp"

namespace kantor::testing {

using Rng = std::mt19937_64;

/// count x d points, i.i.d. N(mean, sigma^2) per coordinate, row-major.
inline std::vector<double> gaussian_cloud(Rng& rng, std::int64_t count, std::int64_t d,
                                          double mean = 0.0, double sigma = 1.0) {
  std::normal_distribution<double> nd(mean, sigma);
  std::vector<double> v(std::size_t(count * d));
  for (double& e : v) e = nd(rng);
  return v;
}

/// count x d points from a mixture of `components` Gaussians (sigma 0.3) whose centres are
/// N(0, spread^2) per coordinate.
inline std::vector<double> mixture_cloud(Rng& rng, std::int64_t count, std::int64_t d,
                                         int components = 3, double spread = 2.0) {
  std::vector<double> centres = gaussian_cloud(rng, components, d, 0.0, spread);
  std::uniform_int_distribution<int> pick(0, components - 1);
  std::normal_distribution<double> nd(0.0, 0.3);
  std::vector<double> v(std::size_t(count * d));
  for (std::int64_t i = 0; i < count; ++i) {
    const int c = pick(rng);
    for (std::int64_t k = 0; k < d; ++k)
      v[std::size_t(i * d + k)] = centres[std::size_t(c * d + k)] + nd(rng);
  }
  return v;
}

/// count x d points with integer coordinates in [lo, hi].
inline std::vector<double> integer_cloud(Rng& rng, std::int64_t count, std::int64_t d, int lo,
                                         int hi) {
  std::uniform_int_distribution<int> u(lo, hi);
  std::vector<double> v(std::size_t(count * d));
  for (double& e : v) e = double(u(rng));
  return v;
}

/// Weights U(0, 1) + 0.1 (not normalized: the engine normalizes).
inline std::vector<double> random_weights(Rng& rng, std::int64_t count) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> w(static_cast<std::size_t>(count));
  for (double& e : w) e = u(rng) + 0.1;
  return w;
}

/// Sets every `every`-th weight (starting at `first`) to zero; keeps at least one positive.
inline std::vector<double> with_zeros(std::vector<double> w, std::int64_t first,
                                      std::int64_t every) {
  for (std::size_t i = std::size_t(first); i < w.size(); i += std::size_t(every)) w[i] = 0.0;
  bool any = false;
  for (double e : w) any = any || e > 0;
  if (!any) w.back() = 1.0;
  return w;
}

/// Rescales weights w so that their total equals the total of `like` (balanced problems).
inline std::vector<double> same_mass(std::vector<double> w, const std::vector<double>& like) {
  double tw = 0, tl = 0;
  for (double e : w) tw += e;
  for (double e : like) tl += e;
  for (double& e : w) e *= tl / tw;
  return w;
}

template <class T>
std::vector<T> cast_vector(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

/// The arrays of one problem in precision T. a or b empty = uniform weights.
template <class T>
struct PointData {
  std::int64_t n = 0, m = 0, d = 0;
  std::vector<T> x, y, a, b;
  double cost_scale = 1.0;
  double epsilon = 0.1;

  /// A view problem; `this` must outlive it and stay unmoved.
  Problem<T> problem() const {
    Problem<T> p;
    p.features().x = host_matrix<const T>(x.data(), n, d);
    p.features().y = host_matrix<const T>(y.data(), m, d);
    if (!a.empty()) p.a = host_vector<const T>(a.data(), n);
    if (!b.empty()) p.b = host_vector<const T>(b.data(), m);
    p.features().scale = cost_scale;
    p.epsilon = epsilon;
    return p;
  }
  /// The float64 reference problem built from the same (rounded to T) numbers.
  DenseProblem dense() const { return make_dense_problem(x, y, d, a, b, cost_scale); }
};

template <class T>
PointData<T> make_point_data(std::int64_t d, const std::vector<double>& x,
                             const std::vector<double>& y, const std::vector<double>& a = {},
                             const std::vector<double>& b = {}, double eps = 0.1,
                             double cost_scale = 1.0) {
  PointData<T> p;
  p.d = d;
  p.n = std::int64_t(x.size()) / d;
  p.m = std::int64_t(y.size()) / d;
  p.x = cast_vector<T>(x);
  p.y = cast_vector<T>(y);
  p.a = cast_vector<T>(a);
  p.b = cast_vector<T>(b);
  p.epsilon = eps;
  p.cost_scale = cost_scale;
  return p;
}

}  // namespace kantor::testing
