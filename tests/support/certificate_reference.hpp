// An independent reference for certificates: the L1 marginal error |P1 - a|_1 + |P^T1 - b|_1 of
// the plan P_ij = a_i b_j exp((f_i + g_j - c|x_i - y_j|^2) / eps) that potentials define on given
// coordinates, evaluated in long double (64-bit mantissa on x86: 2^11 times finer than the
// engines' float64 certificate), with the weights normalized in long double. Plain loops; no
// kantor code.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace kantor::testing {

struct ReferenceError {
  double error = 0;  ///< the long double evaluation
  double slack = 0;  ///< a bound of its own rounding (long double unit roundoff 2^-64)
};

/// x: n x d, y: m x d row-major; a, b: weights (empty = uniform), any total; f, g: potentials.
template <class P>
ReferenceError true_marginal_error(const std::vector<double>& x, const std::vector<double>& y,
                           std::int64_t d, std::vector<double> a, std::vector<double> b,
                           const std::vector<P>& f, const std::vector<P>& g, double c,
                           double eps) {
  using L = long double;
  const std::int64_t n = std::int64_t(x.size()) / d, m = std::int64_t(y.size()) / d;
  auto normalized = [](std::vector<double> w, std::int64_t count) {
    std::vector<L> out(std::size_t(count), L(1) / L(count));
    if (w.empty()) return out;
    L total = 0;
    for (double v : w) total += v;
    for (std::int64_t i = 0; i < count; ++i) out[std::size_t(i)] = L(w[std::size_t(i)]) / total;
    return out;
  };
  const std::vector<L> an = normalized(a, n), bn = normalized(b, m);
  std::vector<L> rows(std::size_t(n), 0), cols(std::size_t(m), 0);
  L max_t = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if (!(an[std::size_t(i)] > 0)) continue;
    for (std::int64_t j = 0; j < m; ++j) {
      if (!(bn[std::size_t(j)] > 0)) continue;
      L sq = 0;
      for (std::int64_t k = 0; k < d; ++k) {
        const L diff = L(x[std::size_t(i * d + k)]) - L(y[std::size_t(j * d + k)]);
        sq += diff * diff;
      }
      const L z = (L(f[std::size_t(i)]) + L(g[std::size_t(j)]) - L(c) * sq) / L(eps);
      const L p = an[std::size_t(i)] * bn[std::size_t(j)] * std::exp(z);
      const L t = std::fabs(L(f[std::size_t(i)])) + std::fabs(L(g[std::size_t(j)])) + L(c) * sq;
      if (t > max_t) max_t = t;
      rows[std::size_t(i)] += p;
      cols[std::size_t(j)] += p;
    }
  }
  L err = 0;
  for (std::int64_t i = 0; i < n; ++i) err += std::fabs(rows[std::size_t(i)] - an[std::size_t(i)]);
  for (std::int64_t j = 0; j < m; ++j) err += std::fabs(cols[std::size_t(j)] - bn[std::size_t(j)]);
  L mass = 0;
  for (const L r : rows) mass += r;
  // |dz| <= (d + 9) u t / eps as for the engines' float64 evaluation, with u = 2^-64.
  const L u = std::ldexp(L(1), -64);
  const L delta = L(d + 9) * u * max_t / L(eps);
  ReferenceError out;
  out.error = double(err);
  out.slack = double(2 * std::expm1(delta) * (mass + 1) + 4 * L(n + m + d + 16) * u * (mass + 1));
  return out;
}

}  // namespace kantor::testing
