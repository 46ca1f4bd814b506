// A naive float64 dense reference for unbalanced (KL-relaxed) entropic OT, written from the
// problem's definition and independent of the library's formulas:
//
//   OT = min_P <P, C> + eps KL(P | a b^T) + rho_a KL(P 1 | a) + rho_b KL(P^T 1 | b),
//   KL(p | q) = sum p log(p / q) - p + q   (generalized; a strict side has rho = infinity and
//                                           the constraint instead of the penalty),
//
// solved by the damped log-domain scaling f <- rho_a / (rho_a + eps) (-eps log sum_j b_j
// exp((g_j - C_ij) / eps)) (Chizat, Peyre, Schmitzer, Vialard 2018) on a stored n x m cost, until
// the potentials stop moving. The plan is P_ij = a_i b_j exp((f_i + g_j - C_ij) / eps). The
// primal value is evaluated from the entries of P (the definition), the dual from the potentials;
// weights are used as given (not normalized). Meant for n * m up to a few 10^4.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace kantor::testing {

struct UnbalancedDense {
  std::int64_t n = 0, m = 0;
  std::vector<double> a, b;  // weights as given
  std::vector<double> C;     // n x m
  double rho_a = std::numeric_limits<double>::infinity();
  double rho_b = std::numeric_limits<double>::infinity();
};

struct UnbalancedSolution {
  std::vector<double> f, g, P;  // P: n x m
  int iterations = 0;
  double change = 0;  // the last sweep's largest potential change
};

inline UnbalancedDense make_unbalanced(const std::vector<double>& x, const std::vector<double>& y,
                                       std::int64_t d, const std::vector<double>& a,
                                       const std::vector<double>& b, double c, double rho_a,
                                       double rho_b) {
  UnbalancedDense p;
  p.n = std::int64_t(x.size()) / d;
  p.m = std::int64_t(y.size()) / d;
  p.a = a.empty() ? std::vector<double>(std::size_t(p.n), 1.0 / double(p.n)) : a;
  p.b = b.empty() ? std::vector<double>(std::size_t(p.m), 1.0 / double(p.m)) : b;
  p.rho_a = rho_a;
  p.rho_b = rho_b;
  p.C.resize(std::size_t(p.n * p.m));
  for (std::int64_t i = 0; i < p.n; ++i)
    for (std::int64_t j = 0; j < p.m; ++j) {
      double s = 0;
      for (std::int64_t k = 0; k < d; ++k) {
        const double diff = x[std::size_t(i * d + k)] - y[std::size_t(j * d + k)];
        s += diff * diff;
      }
      p.C[std::size_t(i * p.m + j)] = c * s;
    }
  return p;
}

/// -eps log sum_j w_j exp((h_j - C_ij) / eps) over the row i (rows = true) or column j.
inline double unbalanced_softmin(const UnbalancedDense& p, double eps, const std::vector<double>& h,
                                 std::int64_t idx, bool rows) {
  const std::int64_t cnt = rows ? p.m : p.n;
  const std::vector<double>& w = rows ? p.b : p.a;
  double mx = -std::numeric_limits<double>::infinity();
  std::vector<double> z(std::size_t(cnt), -std::numeric_limits<double>::infinity());
  for (std::int64_t k = 0; k < cnt; ++k) {
    if (!(w[std::size_t(k)] > 0)) continue;
    const double cst = rows ? p.C[std::size_t(idx * p.m + k)] : p.C[std::size_t(k * p.m + idx)];
    z[std::size_t(k)] = std::log(w[std::size_t(k)]) + (h[std::size_t(k)] - cst) / eps;
    mx = std::max(mx, z[std::size_t(k)]);
  }
  double s = 0;
  for (double v : z)
    if (v > -std::numeric_limits<double>::infinity()) s += std::exp(v - mx);
  return -eps * (mx + std::log(s));
}

inline UnbalancedSolution solve_unbalanced(const UnbalancedDense& p, double eps,
                                           int max_iterations = 200000) {
  UnbalancedSolution s;
  s.f.assign(std::size_t(p.n), 0.0);
  s.g.assign(std::size_t(p.m), 0.0);
  const double ta = std::isinf(p.rho_a) ? 1.0 : p.rho_a / (p.rho_a + eps);
  const double tb = std::isinf(p.rho_b) ? 1.0 : p.rho_b / (p.rho_b + eps);
  for (s.iterations = 0; s.iterations < max_iterations; ++s.iterations) {
    double change = 0;
    for (std::int64_t i = 0; i < p.n; ++i) {
      const double v = ta * unbalanced_softmin(p, eps, s.g, i, true);
      change = std::max(change, std::abs(v - s.f[std::size_t(i)]));
      s.f[std::size_t(i)] = v;
    }
    for (std::int64_t j = 0; j < p.m; ++j) {
      const double v = tb * unbalanced_softmin(p, eps, s.f, j, false);
      change = std::max(change, std::abs(v - s.g[std::size_t(j)]));
      s.g[std::size_t(j)] = v;
    }
    s.change = change;
    if (change < 1e-14 * eps) break;
  }
  s.P.resize(std::size_t(p.n * p.m));
  for (std::int64_t i = 0; i < p.n; ++i)
    for (std::int64_t j = 0; j < p.m; ++j)
      s.P[std::size_t(i * p.m + j)] =
          p.a[std::size_t(i)] * p.b[std::size_t(j)] *
          std::exp((s.f[std::size_t(i)] + s.g[std::size_t(j)] - p.C[std::size_t(i * p.m + j)]) /
                   eps);
  return s;
}

/// Generalized KL(p | q), 0 log 0 = 0.
inline double generalized_kl(const std::vector<double>& pv, const std::vector<double>& q) {
  double s = 0;
  for (std::size_t i = 0; i < pv.size(); ++i) {
    if (pv[i] > 0) s += pv[i] * std::log(pv[i] / q[i]);
    s += q[i] - pv[i];
  }
  return s;
}

/// The primal objective of the plan P, from its entries.
inline double unbalanced_primal(const UnbalancedDense& p, double eps,
                                const std::vector<double>& P) {
  std::vector<double> ab(P.size()), r(std::size_t(p.n), 0.0), c(std::size_t(p.m), 0.0);
  double transport = 0;
  for (std::int64_t i = 0; i < p.n; ++i)
    for (std::int64_t j = 0; j < p.m; ++j) {
      const std::size_t k = std::size_t(i * p.m + j);
      ab[k] = p.a[std::size_t(i)] * p.b[std::size_t(j)];
      transport += P[k] * p.C[k];
      r[std::size_t(i)] += P[k];
      c[std::size_t(j)] += P[k];
    }
  double v = transport + eps * generalized_kl(P, ab);
  if (std::isfinite(p.rho_a)) v += p.rho_a * generalized_kl(r, p.a);
  if (std::isfinite(p.rho_b)) v += p.rho_b * generalized_kl(c, p.b);
  return v;
}

/// The dual objective of (f, g): sum_i a_i phi_a(f_i) + sum_j b_j phi_b(g_j) - eps sum_ij a_i b_j
/// (exp((f_i + g_j - C_ij) / eps) - 1), phi(f) = rho (1 - exp(-f / rho)) (f for a strict side).
inline double unbalanced_dual(const UnbalancedDense& p, double eps, const std::vector<double>& f,
                              const std::vector<double>& g) {
  auto phi = [](double v, double rho) { return std::isinf(rho) ? v : rho * (1 - std::exp(-v / rho)); };
  double s = 0;
  for (std::int64_t i = 0; i < p.n; ++i) s += p.a[std::size_t(i)] * phi(f[std::size_t(i)], p.rho_a);
  for (std::int64_t j = 0; j < p.m; ++j) s += p.b[std::size_t(j)] * phi(g[std::size_t(j)], p.rho_b);
  double mass = 0;
  for (std::int64_t i = 0; i < p.n; ++i)
    for (std::int64_t j = 0; j < p.m; ++j)
      mass += p.a[std::size_t(i)] * p.b[std::size_t(j)] *
              std::expm1((f[std::size_t(i)] + g[std::size_t(j)] - p.C[std::size_t(i * p.m + j)]) /
                         eps);
  return s - eps * mass;
}

/// The L1 residual of the first-order conditions: |P 1 - a exp(-f / rho_a)|_1 + |P^T 1 - b
/// exp(-g / rho_b)|_1 (a strict side: |P 1 - a|_1).
inline double unbalanced_residual(const UnbalancedDense& p, const std::vector<double>& f,
                                  const std::vector<double>& g, const std::vector<double>& P) {
  double e = 0;
  for (std::int64_t i = 0; i < p.n; ++i) {
    double r = 0;
    for (std::int64_t j = 0; j < p.m; ++j) r += P[std::size_t(i * p.m + j)];
    const double t = std::isinf(p.rho_a) ? p.a[std::size_t(i)]
                                         : p.a[std::size_t(i)] * std::exp(-f[std::size_t(i)] / p.rho_a);
    e += std::abs(r - t);
  }
  for (std::int64_t j = 0; j < p.m; ++j) {
    double c = 0;
    for (std::int64_t i = 0; i < p.n; ++i) c += P[std::size_t(i * p.m + j)];
    const double t = std::isinf(p.rho_b) ? p.b[std::size_t(j)]
                                         : p.b[std::size_t(j)] * std::exp(-g[std::size_t(j)] / p.rho_b);
    e += std::abs(c - t);
  }
  return e;
}

inline double total(const std::vector<double>& v) {
  double s = 0;
  for (double e : v) s += e;
  return s;
}

}  // namespace kantor::testing
