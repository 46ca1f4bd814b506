// A naive float64 dense implementation of entropic OT between point clouds: the oracle of every
// test. Plain loops over a stored n x m cost matrix C_ij = c * sum_k (x_ik - y_jk)^2 (exact
// differences, no shifted potentials, no blocking, no threads), log-domain Sinkhorn iterated to
// machine precision, and every derived quantity (plan, marginals, <P,C>, dual and regularized
// values, P v, P^T u, P V, P^T U, barycentric map). Conventions: docs/numerics.md section 1.
// Obviously correct rather than fast: meant for n * m up to a few 10^4.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

namespace kantor::testing {

/// A problem in float64 with normalized weights (total mass 1) and its dense cost matrix.
struct DenseProblem {
  std::int64_t n = 0, m = 0, d = 0;
  std::vector<double> x, y;  // row-major n x d, m x d (original coordinates)
  std::vector<double> a, b;  // weights normalized to mass 1
  double c = 1.0;            // cost scale
  std::vector<double> C;     // n x m, C_ij = c |x_i - y_j|^2 (+ c_w W[l_i, l_j])
  /// Block-list truncation (empty = dense): keep_f[i * m + j] says whether pair (i, j) is in the
  /// f side's schedule (rows x), keep_g the same for the g side's (rows y). Absent pairs are
  /// simply missing from that side's sums.
  std::vector<char> keep_f, keep_g;

  double cost(std::int64_t i, std::int64_t j) const { return C[std::size_t(i * m + j)]; }
  bool in_f(std::int64_t i, std::int64_t j) const {
    return keep_f.empty() || keep_f[std::size_t(i * m + j)];
  }
  bool in_g(std::int64_t i, std::int64_t j) const {
    return keep_g.empty() || keep_g[std::size_t(i * m + j)];
  }
  double max_cost() const { return *std::max_element(C.begin(), C.end()); }
};

/// Builds the dense problem. Empty a or b means uniform weights; weights are normalized here.
template <class T>
DenseProblem make_dense_problem(const std::vector<T>& x, const std::vector<T>& y, std::int64_t d,
                                const std::vector<T>& a, const std::vector<T>& b,
                                double cost_scale) {
  DenseProblem p;
  p.d = d;
  p.n = std::int64_t(x.size()) / d;
  p.m = std::int64_t(y.size()) / d;
  p.c = cost_scale;
  p.x.assign(x.begin(), x.end());
  p.y.assign(y.begin(), y.end());
  auto normalize = [](const std::vector<T>& w, std::int64_t count) {
    std::vector<double> out(std::size_t(count), 1.0 / double(count));
    if (w.empty()) return out;
    double total = 0;
    for (T v : w) total += double(v);
    for (std::int64_t i = 0; i < count; ++i)
      out[std::size_t(i)] = double(w[std::size_t(i)]) / total;
    return out;
  };
  p.a = normalize(a, p.n);
  p.b = normalize(b, p.m);
  p.C.resize(std::size_t(p.n * p.m));
  for (std::int64_t i = 0; i < p.n; ++i)
    for (std::int64_t j = 0; j < p.m; ++j) {
      double s = 0;
      for (std::int64_t k = 0; k < d; ++k) {
        const double diff = p.x[std::size_t(i * d + k)] - p.y[std::size_t(j * d + k)];
        s += diff * diff;
      }
      p.C[std::size_t(i * p.m + j)] = cost_scale * s;
    }
  return p;
}

/// Adds the label term of a LabelAugmented cost: C_ij += c_w W[l_i, l_j] (W: L x L row-major).
inline void add_label_term(DenseProblem* p, const std::vector<std::int32_t>& lx,
                           const std::vector<std::int32_t>& ly, const std::vector<double>& W,
                           std::int64_t L, double c_w) {
  for (std::int64_t i = 0; i < p->n; ++i)
    for (std::int64_t j = 0; j < p->m; ++j)
      p->C[std::size_t(i * p->m + j)] +=
          c_w * W[std::size_t(std::int64_t(lx[std::size_t(i)]) * L + ly[std::size_t(j)])];
}

/// The (i, j) mask of a block list (run_ptr / runs over row tiles of `row_tile` rows and key
/// tiles of `key_tile` keys) of `rows` queries against `keys` keys, as rows x keys entries;
/// `transpose` stores it as keys x rows (the g side's list in the (i, j) layout of keep_g).
inline std::vector<char> block_list_mask(const std::vector<std::int64_t>& run_ptr,
                                         const std::vector<std::int32_t>& runs,
                                         std::int64_t row_tile, std::int64_t key_tile,
                                         std::int64_t rows, std::int64_t keys, bool transpose) {
  std::vector<char> keep(std::size_t(rows * keys), 0);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t t = r / row_tile;
    for (std::int64_t q = run_ptr[std::size_t(t)]; q < run_ptr[std::size_t(t + 1)]; ++q)
      for (std::int64_t k = std::int64_t(runs[std::size_t(2 * q)]) * key_tile;
           k < std::min(keys, std::int64_t(runs[std::size_t(2 * q + 1)]) * key_tile); ++k)
        keep[std::size_t(transpose ? k * rows + r : r * keys + k)] = 1;
  }
  return keep;
}

/// log-sum-exp of `terms` with -inf entries allowed (all -inf gives -inf).
inline double dense_lse(const std::vector<double>& terms) {
  double mx = -std::numeric_limits<double>::infinity();
  for (double t : terms) mx = std::max(mx, t);
  if (mx == -std::numeric_limits<double>::infinity()) return mx;
  double s = 0;
  for (double t : terms) s += std::exp(t - mx);
  return mx + std::log(s);
}

inline double log_weight(double w) {
  return w > 0 ? std::log(w) : -std::numeric_limits<double>::infinity();
}

/// T_f(g)_i = -eps LSE_j [log b_j + (g_j - C_ij)/eps].
inline std::vector<double> dense_update_f(const DenseProblem& p, double eps,
                                          const std::vector<double>& g) {
  std::vector<double> f(std::size_t(p.n)), terms(std::size_t(p.m));
  for (std::int64_t i = 0; i < p.n; ++i) {
    for (std::int64_t j = 0; j < p.m; ++j)
      terms[std::size_t(j)] =
          p.in_f(i, j) ? log_weight(p.b[std::size_t(j)]) + (g[std::size_t(j)] - p.cost(i, j)) / eps
                       : -std::numeric_limits<double>::infinity();
    f[std::size_t(i)] = -eps * dense_lse(terms);
  }
  return f;
}

/// T_g(f)_j = -eps LSE_i [log a_i + (f_i - C_ij)/eps].
inline std::vector<double> dense_update_g(const DenseProblem& p, double eps,
                                          const std::vector<double>& f) {
  std::vector<double> g(std::size_t(p.m)), terms(std::size_t(p.n));
  for (std::int64_t j = 0; j < p.m; ++j) {
    for (std::int64_t i = 0; i < p.n; ++i)
      terms[std::size_t(i)] =
          p.in_g(i, j) ? log_weight(p.a[std::size_t(i)]) + (f[std::size_t(i)] - p.cost(i, j)) / eps
                       : -std::numeric_limits<double>::infinity();
    g[std::size_t(j)] = -eps * dense_lse(terms);
  }
  return g;
}

/// The plan with the pairs absent from a side's block list set to 0 (side 0: keep_f, 1: keep_g).
inline std::vector<double> masked_plan(const DenseProblem& p, std::vector<double> P, int side) {
  for (std::int64_t i = 0; i < p.n; ++i)
    for (std::int64_t j = 0; j < p.m; ++j)
      if (!(side == 0 ? p.in_f(i, j) : p.in_g(i, j))) P[std::size_t(i * p.m + j)] = 0;
  return P;
}

/// The plan P_ij = a_i b_j exp((f_i + g_j - C_ij)/eps), n x m row-major (0 where a weight is 0).
inline std::vector<double> dense_plan(const DenseProblem& p, double eps,
                                      const std::vector<double>& f, const std::vector<double>& g) {
  std::vector<double> P(std::size_t(p.n * p.m), 0.0);
  for (std::int64_t i = 0; i < p.n; ++i)
    for (std::int64_t j = 0; j < p.m; ++j) {
      const double ai = p.a[std::size_t(i)], bj = p.b[std::size_t(j)];
      if (ai > 0 && bj > 0)
        P[std::size_t(i * p.m + j)] =
            std::exp(std::log(ai) + std::log(bj) +
                     (f[std::size_t(i)] + g[std::size_t(j)] - p.cost(i, j)) / eps);
    }
  return P;
}

inline std::vector<double> dense_row_sums(const DenseProblem& p, const std::vector<double>& P) {
  std::vector<double> r(std::size_t(p.n), 0.0);
  for (std::int64_t i = 0; i < p.n; ++i)
    for (std::int64_t j = 0; j < p.m; ++j) r[std::size_t(i)] += P[std::size_t(i * p.m + j)];
  return r;
}

inline std::vector<double> dense_col_sums(const DenseProblem& p, const std::vector<double>& P) {
  std::vector<double> c(std::size_t(p.m), 0.0);
  for (std::int64_t i = 0; i < p.n; ++i)
    for (std::int64_t j = 0; j < p.m; ++j) c[std::size_t(j)] += P[std::size_t(i * p.m + j)];
  return c;
}

inline double dense_l1(const std::vector<double>& u, const std::vector<double>& v) {
  double s = 0;
  for (std::size_t i = 0; i < u.size(); ++i) s += std::abs(u[i] - v[i]);
  return s;
}

/// |P 1 - a|_1 and |P^T 1 - b|_1.
inline double dense_row_error(const DenseProblem& p, double eps, const std::vector<double>& f,
                              const std::vector<double>& g) {
  return dense_l1(dense_row_sums(p, dense_plan(p, eps, f, g)), p.a);
}
inline double dense_col_error(const DenseProblem& p, double eps, const std::vector<double>& f,
                              const std::vector<double>& g) {
  return dense_l1(dense_col_sums(p, dense_plan(p, eps, f, g)), p.b);
}
inline double dense_marginal_error(const DenseProblem& p, double eps, const std::vector<double>& f,
                                   const std::vector<double>& g) {
  const std::vector<double> P = dense_plan(p, eps, f, g);
  return dense_l1(dense_row_sums(p, P), p.a) + dense_l1(dense_col_sums(p, P), p.b);
}

/// <P, C>.
inline double dense_transport_cost(const DenseProblem& p, const std::vector<double>& P) {
  double s = 0;
  for (std::size_t k = 0; k < P.size(); ++k) s += P[k] * p.C[k];
  return s;
}

/// sum_ij P_ij.
inline double dense_mass(const std::vector<double>& P) {
  double s = 0;
  for (double v : P) s += v;
  return s;
}

/// sum_ij P_ij (f_i + g_j).
inline double dense_plan_fg(const DenseProblem& p, const std::vector<double>& P,
                            const std::vector<double>& f, const std::vector<double>& g) {
  double s = 0;
  for (std::int64_t i = 0; i < p.n; ++i)
    for (std::int64_t j = 0; j < p.m; ++j)
      s += P[std::size_t(i * p.m + j)] * (f[std::size_t(i)] + g[std::size_t(j)]);
  return s;
}

/// <a, f> + <b, g>.
inline double dense_dual_value(const DenseProblem& p, const std::vector<double>& f,
                               const std::vector<double>& g) {
  double s = 0;
  for (std::int64_t i = 0; i < p.n; ++i) s += p.a[std::size_t(i)] * f[std::size_t(i)];
  for (std::int64_t j = 0; j < p.m; ++j) s += p.b[std::size_t(j)] * g[std::size_t(j)];
  return s;
}

/// <P,C> + eps KL(P | a (x) b), generalized KL: sum P log(P / ab) - sum P + 1, from the entries
/// of P themselves (not from the potentials).
inline double dense_regularized_cost(const DenseProblem& p, double eps,
                                     const std::vector<double>& P) {
  double kl = 0, mass = 0;
  for (std::int64_t i = 0; i < p.n; ++i)
    for (std::int64_t j = 0; j < p.m; ++j) {
      const double pij = P[std::size_t(i * p.m + j)];
      mass += pij;
      if (pij > 0) kl += pij * std::log(pij / (p.a[std::size_t(i)] * p.b[std::size_t(j)]));
    }
  kl += 1.0 - mass;
  return dense_transport_cost(p, P) + eps * kl;
}

/// P v (n), P^T u (m), P V (V m x k row-major; result n x k).
inline std::vector<double> dense_apply(const DenseProblem& p, const std::vector<double>& P,
                                       const std::vector<double>& v) {
  std::vector<double> out(std::size_t(p.n), 0.0);
  for (std::int64_t i = 0; i < p.n; ++i)
    for (std::int64_t j = 0; j < p.m; ++j)
      out[std::size_t(i)] += P[std::size_t(i * p.m + j)] * v[std::size_t(j)];
  return out;
}
inline std::vector<double> dense_apply_t(const DenseProblem& p, const std::vector<double>& P,
                                         const std::vector<double>& u) {
  std::vector<double> out(std::size_t(p.m), 0.0);
  for (std::int64_t i = 0; i < p.n; ++i)
    for (std::int64_t j = 0; j < p.m; ++j)
      out[std::size_t(j)] += P[std::size_t(i * p.m + j)] * u[std::size_t(i)];
  return out;
}
inline std::vector<double> dense_apply_mat(const DenseProblem& p, const std::vector<double>& P,
                                           const std::vector<double>& V, std::int64_t k) {
  std::vector<double> out(std::size_t(p.n * k), 0.0);
  for (std::int64_t i = 0; i < p.n; ++i)
    for (std::int64_t j = 0; j < p.m; ++j)
      for (std::int64_t c = 0; c < k; ++c)
        out[std::size_t(i * k + c)] += P[std::size_t(i * p.m + j)] * V[std::size_t(j * k + c)];
  return out;
}
/// P^T U: U is n x k, the result m x k (row-major).
inline std::vector<double> dense_apply_mat_t(const DenseProblem& p, const std::vector<double>& P,
                                             const std::vector<double>& U, std::int64_t k) {
  std::vector<double> out(std::size_t(p.m * k), 0.0);
  for (std::int64_t i = 0; i < p.n; ++i)
    for (std::int64_t j = 0; j < p.m; ++j)
      for (std::int64_t c = 0; c < k; ++c)
        out[std::size_t(j * k + c)] += P[std::size_t(i * p.m + j)] * U[std::size_t(i * k + c)];
  return out;
}

/// Barycentric map T(x_i) = sum_j P_ij y_j / sum_j P_ij, n x d. The row factor a_i e^{f_i/eps}
/// cancels, so rows with a_i = 0 get the map of the kernel b_j exp((g_j - C_ij)/eps) too.
inline std::vector<double> dense_barycentric_map(const DenseProblem& p, double eps,
                                                 const std::vector<double>& g) {
  std::vector<double> out(std::size_t(p.n * p.d), 0.0), logw(std::size_t(p.m));
  for (std::int64_t i = 0; i < p.n; ++i) {
    for (std::int64_t j = 0; j < p.m; ++j)
      logw[std::size_t(j)] =
          log_weight(p.b[std::size_t(j)]) + (g[std::size_t(j)] - p.cost(i, j)) / eps;
    const double lse = dense_lse(logw);
    for (std::int64_t j = 0; j < p.m; ++j) {
      const double w = std::exp(logw[std::size_t(j)] - lse);
      for (std::int64_t k = 0; k < p.d; ++k)
        out[std::size_t(i * p.d + k)] += w * p.y[std::size_t(j * p.d + k)];
    }
  }
  return out;
}

/// Converged potentials of the dense reference.
struct DenseSolution {
  std::vector<double> f, g;
  std::int64_t iterations = 0;
  double marginal_error = 0;  // |P1 - a|_1 + |P^T 1 - b|_1 of the returned (f, g)
};

/// Alternating log-domain Sinkhorn at `eps`, preceded by eps-annealing from max C (halving), then
/// iterated at `eps` until the marginal error stops decreasing below `tol` (machine precision:
/// the default runs until the potentials no longer change in the last bits or max_iterations).
inline DenseSolution dense_solve(const DenseProblem& p, double eps,
                                 std::int64_t max_iterations = 200000, double tol = 1e-14) {
  DenseSolution s;
  s.f.assign(std::size_t(p.n), 0.0);
  s.g.assign(std::size_t(p.m), 0.0);
  double e = std::max(eps, p.max_cost());
  while (e > eps) {  // annealing: a good start for small eps
    s.f = dense_update_f(p, e, s.g);
    s.g = dense_update_g(p, e, s.f);
    e = std::max(0.5 * e, eps);
  }
  double err = std::numeric_limits<double>::infinity();
  for (s.iterations = 0; s.iterations < max_iterations;) {
    // Check every 10 iterations; stop once below tol and no longer improving.
    for (int k = 0; k < 10; ++k, ++s.iterations) {
      s.f = dense_update_f(p, eps, s.g);
      s.g = dense_update_g(p, eps, s.f);
    }
    const double e_now = dense_marginal_error(p, eps, s.f, s.g);
    const bool improving = e_now < 0.5 * err;
    err = std::min(err, e_now);
    if (e_now <= tol && !improving) break;
  }
  s.marginal_error = dense_marginal_error(p, eps, s.f, s.g);
  return s;
}

/// Self-problem OT(a, a) (x = y, a = b): the symmetric fixed point h = T(h), by the averaged
/// iteration h <- (h + T(h)) / 2 (alternating updates converge very slowly on self-problems).
/// Returns f = g = h.
inline DenseSolution dense_solve_self(const DenseProblem& p, double eps,
                                      std::int64_t max_iterations = 200000, double tol = 1e-14) {
  if (p.n != p.m || p.x != p.y || p.a != p.b)
    throw std::invalid_argument("dense_solve_self needs x = y and a = b");
  DenseSolution s;
  std::vector<double> h(std::size_t(p.n), 0.0);
  double e = std::max(eps, p.max_cost());
  for (s.iterations = 0; s.iterations < max_iterations; ++s.iterations) {
    const std::vector<double> t = dense_update_f(p, e, h);
    for (std::size_t i = 0; i < h.size(); ++i) h[i] = 0.5 * (h[i] + t[i]);
    if (e > eps) {
      e = std::max(0.5 * e, eps);
      continue;
    }
    if (s.iterations % 10 == 0 && dense_marginal_error(p, eps, h, h) <= tol) break;
  }
  s.f = h;
  s.g = h;
  s.marginal_error = dense_marginal_error(p, eps, h, h);
  return s;
}

}  // namespace kantor::testing
