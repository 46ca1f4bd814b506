// Float64 dense references of the derivatives of entropic OT between point clouds, built on
// support/dense_reference.hpp (a converged dense plan). Independent of the library's streaming
// formulas (docs/numerics.md section 4): everything here is derived from the dense plan by
// plain calculus, and obviously correct rather than fast (n, m up to ~30).
//
//  - value and gradients: OT_eps = <a,f> + <b,g> at the optimum; by the envelope theorem
//      dOT/dx_i = 2c sum_j P_ij (x_i - y_j),   dOT/dy_j = 2c sum_i P_ij (y_j - x_i),
//      dOT/dA_i = (f_i - <a,f>) / |A|   (A the caller's raw weights, a = A / |A|).
//  - Hessian of (x, y) -> OT_eps(x, y) (the joint one, ((n+m) d)^2): for each coordinate q of
//    (x, y), differentiate the marginal conditions sum_j P_ij = a_i, sum_i P_ij = b_j with
//    P_ij = a_i b_j exp((f_i + g_j - C_ij)/eps):
//      sum_j P_ij (df_i + dg_j - dC_ij) = 0,   sum_i P_ij (df_i + dg_j - dC_ij) = 0,
//    i.e. the (n+m) x (n+m) system [diag(P1) P; P^T diag(P^T 1)] [df; dg] = [(P o dC) 1;
//    (P o dC)^T 1] (dC_ij = 2c (x_i - y_j) . (dx_i - dy_j)), whose null direction (1, -1) is
//    fixed by pinning one dg to 0 (and df_i = 0 for masked rows, dg_j = 0 for masked columns,
//    whose equations read 0 = 0), solved by a dense LU; then dP_ij = P_ij (df_i + dg_j - dC_ij)
//    / eps and the product rule on the gradient's formula gives the column q of the Hessian:
//      d(dOT/dx_i) = 2c sum_j [dP_ij (x_i - y_j) + P_ij (dx_i - dy_j)]   (and the same for y).
//  - x -> OT(x, x) (both arguments moving): J^T H J with J = [I; I], H the joint Hessian of the
//    self-problem (x, x, a, a); the divergence S(x) = OT(x, y) - OT(x, x)/2 - OT(y, y)/2 then
//    has the Hessian H_xx(x, y) - J^T H(x, x) J / 2.
#pragma once

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/dense_reference.hpp"

namespace kantor::testing {

/// A converged dense solution with its plan and value.
struct DenseOt {
  DenseProblem p;
  double eps = 0;
  std::vector<double> f, g, P;  // P: n x m row-major
  double value = 0;             // <a,f> + <b,g>
  double marginal_error = 0;
};

/// Solves `p` at eps to machine precision (dense_solve, or dense_solve_self for a self-problem:
/// x = y, a = b). Throws when the dense solve did not converge below 1e-12.
inline DenseOt dense_ot(const DenseProblem& p, double eps) {
  DenseOt s;
  s.p = p;
  s.eps = eps;
  const bool self = p.n == p.m && p.x == p.y && p.a == p.b;
  const DenseSolution sol = self ? dense_solve_self(p, eps) : dense_solve(p, eps);
  if (!(sol.marginal_error <= 1e-12))
    throw std::runtime_error("dense_ot: the dense reference did not converge (marginal error " +
                             std::to_string(sol.marginal_error) + ")");
  s.f = sol.f;
  s.g = sol.g;
  s.P = dense_plan(p, eps, s.f, s.g);
  s.value = dense_dual_value(p, s.f, s.g);
  s.marginal_error = sol.marginal_error;
  return s;
}

/// dOT/dx (n x d row-major): 2c sum_j P_ij (x_i - y_j).
inline std::vector<double> dense_grad_x(const DenseOt& s) {
  const DenseProblem& p = s.p;
  std::vector<double> out(static_cast<std::size_t>(p.n * p.d), 0.0);
  for (std::int64_t i = 0; i < p.n; ++i)
    for (std::int64_t j = 0; j < p.m; ++j)
      for (std::int64_t k = 0; k < p.d; ++k)
        out[static_cast<std::size_t>(i * p.d + k)] += 2 * p.c * s.P[static_cast<std::size_t>(i * p.m + j)] *
                                         (p.x[static_cast<std::size_t>(i * p.d + k)] - p.y[static_cast<std::size_t>(j * p.d + k)]);
  return out;
}

/// dOT/dy (m x d row-major): 2c sum_i P_ij (y_j - x_i).
inline std::vector<double> dense_grad_y(const DenseOt& s) {
  const DenseProblem& p = s.p;
  std::vector<double> out(static_cast<std::size_t>(p.m * p.d), 0.0);
  for (std::int64_t i = 0; i < p.n; ++i)
    for (std::int64_t j = 0; j < p.m; ++j)
      for (std::int64_t k = 0; k < p.d; ++k)
        out[static_cast<std::size_t>(j * p.d + k)] += 2 * p.c * s.P[static_cast<std::size_t>(i * p.m + j)] *
                                         (p.y[static_cast<std::size_t>(j * p.d + k)] - p.x[static_cast<std::size_t>(i * p.d + k)]);
  return out;
}

/// dOT/dA for raw weights A = raw_mass * w (w the normalized weights, pot the matching
/// potential): (pot_i - <w, pot>) / raw_mass.
inline std::vector<double> dense_grad_weights(const std::vector<double>& w,
                                              const std::vector<double>& pot, double raw_mass) {
  double mean = 0;
  for (std::size_t i = 0; i < w.size(); ++i) mean += w[i] * pot[i];
  std::vector<double> out(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) out[i] = (pot[i] - mean) / raw_mass;
  return out;
}
inline std::vector<double> dense_grad_a(const DenseOt& s, double raw_mass_a = 1.0) {
  return dense_grad_weights(s.p.a, s.f, raw_mass_a);
}
inline std::vector<double> dense_grad_b(const DenseOt& s, double raw_mass_b = 1.0) {
  return dense_grad_weights(s.p.b, s.g, raw_mass_b);
}

/// The joint Hessian of (x, y) -> OT_eps(x, y) at the converged plan of `s`: ((n+m) d)^2,
/// variables ordered x (i * d + k) then y (n d + j * d + k). `dcost_factor` is the factor of
/// dC_ij = dcost_factor (x_i - y_j) . (dx_i - dy_j): 2c is the truth; any other value is a
/// deliberately wrong mutant (e.g. 2, which gives the 4c/eps of a (2c)^2/eps vs 4c/eps mix-up)
/// that the tests use to show they would catch such a mistake.
inline Eigen::MatrixXd dense_joint_hessian(const DenseOt& s, double dcost_factor = 0) {
  const DenseProblem& p = s.p;
  const std::int64_t n = p.n, m = p.m, d = p.d, N = n + m, V = (n + m) * d;
  const double c = p.c, eps = s.eps;
  const double dcf = dcost_factor == 0 ? 2 * c : dcost_factor;
  auto P = [&](std::int64_t i, std::int64_t j) { return s.P[static_cast<std::size_t>(i * m + j)]; };
  auto X = [&](std::int64_t i, std::int64_t k) { return p.x[static_cast<std::size_t>(i * d + k)]; };
  auto Y = [&](std::int64_t j, std::int64_t k) { return p.y[static_cast<std::size_t>(j * d + k)]; };

  // The linearized marginal conditions, exactly as differentiated: row sums r_i = (P1)_i.
  Eigen::MatrixXd M = Eigen::MatrixXd::Zero(N, N);
  Eigen::VectorXd r = Eigen::VectorXd::Zero(n), col = Eigen::VectorXd::Zero(m);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < m; ++j) {
      r(i) += P(i, j);
      col(j) += P(i, j);
    }
  for (std::int64_t i = 0; i < n; ++i) {
    M(i, i) = r(i);
    for (std::int64_t j = 0; j < m; ++j) {
      M(i, n + j) = P(i, j);
      M(n + j, i) = P(i, j);
    }
  }
  for (std::int64_t j = 0; j < m; ++j) M(n + j, n + j) = col(j);
  // Equations to replace: masked rows / columns (0 = 0) get "variable = 0"; the redundant
  // equation (sum of the f-equations = sum of the g-equations) of the last unmasked column is
  // replaced by "dg_j = 0", which fixes the gauge (df + t, dg - t).
  Eigen::MatrixXd A = M;
  std::vector<bool> replaced(static_cast<std::size_t>(N), false);
  for (std::int64_t i = 0; i < n; ++i)
    if (r(i) == 0) {
      A.row(i).setZero();
      A(i, i) = 1;
      replaced[static_cast<std::size_t>(i)] = true;
    }
  std::int64_t pin = -1;
  for (std::int64_t j = 0; j < m; ++j)
    if (col(j) == 0) {
      A.row(n + j).setZero();
      A(n + j, n + j) = 1;
      replaced[static_cast<std::size_t>(n + j)] = true;
    } else {
      pin = j;
    }
  if (pin < 0) throw std::runtime_error("dense_joint_hessian: every column is masked");
  A.row(n + pin).setZero();
  A(n + pin, n + pin) = 1;
  replaced[static_cast<std::size_t>(n + pin)] = true;
  // Invertible in exact arithmetic (the pinned system of a connected bipartite graph), but at
  // small eps P can be nearly block diagonal and the gauges of the blocks barely determined:
  // no rank test here; every solution is checked against all the original equations below.
  const Eigen::FullPivLU<Eigen::MatrixXd> lu(A);

  Eigen::MatrixXd H(V, V);
  std::vector<double> dC(static_cast<std::size_t>(n * m));
  for (std::int64_t q = 0; q < V; ++q) {
    // Unit direction on coordinate q: dx (n x d) or dy (m x d).
    auto dx = [&](std::int64_t i, std::int64_t k) { return q == i * d + k ? 1.0 : 0.0; };
    auto dy = [&](std::int64_t j, std::int64_t k) { return q == n * d + j * d + k ? 1.0 : 0.0; };
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < m; ++j) {
        double v = 0;
        for (std::int64_t k = 0; k < d; ++k) v += (X(i, k) - Y(j, k)) * (dx(i, k) - dy(j, k));
        dC[static_cast<std::size_t>(i * m + j)] = dcf * v;
      }
    Eigen::VectorXd rhs = Eigen::VectorXd::Zero(N);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < m; ++j) {
        rhs(i) += P(i, j) * dC[static_cast<std::size_t>(i * m + j)];
        rhs(n + j) += P(i, j) * dC[static_cast<std::size_t>(i * m + j)];
      }
    const Eigen::VectorXd full_rhs = rhs;
    for (std::int64_t e = 0; e < N; ++e)
      if (replaced[static_cast<std::size_t>(e)]) rhs(e) = 0;
    const Eigen::VectorXd z = lu.solve(rhs);
    // The solution must satisfy every original equation (the replaced ones were redundant).
    const double res = (M * z - full_rhs).norm();
    if (!z.allFinite() || !(res <= 1e-9 * (1 + full_rhs.norm() + M.norm() * z.norm())))
      throw std::runtime_error("dense_joint_hessian: linearized system residual " +
                               std::to_string(res));
    Eigen::VectorXd col_q = Eigen::VectorXd::Zero(V);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < m; ++j) {
        const double pij = P(i, j);
        const double dp = pij * (z(i) + z(n + j) - dC[static_cast<std::size_t>(i * m + j)]) / eps;
        for (std::int64_t k = 0; k < d; ++k) {
          const double diff = X(i, k) - Y(j, k);
          const double ddiff = dx(i, k) - dy(j, k);
          col_q(i * d + k) += 2 * c * (dp * diff + pij * ddiff);
          col_q(n * d + j * d + k) += 2 * c * (-dp * diff - pij * ddiff);
        }
      }
    H.col(q) = col_q;
  }
  return H;
}

/// Hessian of x -> OT_eps(x, y) (y, a, b fixed): the x-block of the joint Hessian, nd x nd.
inline Eigen::MatrixXd dense_hessian_x(const DenseOt& s, double dcost_factor = 0) {
  const std::int64_t nd = s.p.n * s.p.d;
  return dense_joint_hessian(s, dcost_factor).topLeftCorner(nd, nd);
}

/// The self-problem (x, x, a, a) of a problem's source side (side 0) or target side (side 1).
inline DenseProblem dense_self_problem(const DenseProblem& p, int side) {
  DenseProblem q;
  q.d = p.d;
  q.c = p.c;
  q.n = q.m = side == 0 ? p.n : p.m;
  q.x = q.y = side == 0 ? p.x : p.y;
  q.a = q.b = side == 0 ? p.a : p.b;
  q.C.resize(static_cast<std::size_t>(q.n * q.m));
  for (std::int64_t i = 0; i < q.n; ++i)
    for (std::int64_t j = 0; j < q.m; ++j) {
      double v = 0;
      for (std::int64_t k = 0; k < q.d; ++k) {
        const double diff = q.x[static_cast<std::size_t>(i * q.d + k)] - q.y[static_cast<std::size_t>(j * q.d + k)];
        v += diff * diff;
      }
      q.C[static_cast<std::size_t>(i * q.m + j)] = q.c * v;
    }
  return q;
}

/// Hessian of x -> OT(x, x) (both arguments moving) from the self-problem's solution `ss`:
/// J^T H J with J = [I; I], i.e. the sum of the four blocks of the joint Hessian.
inline Eigen::MatrixXd dense_self_hessian(const DenseOt& ss) {
  const std::int64_t nd = ss.p.n * ss.p.d;
  const Eigen::MatrixXd H = dense_joint_hessian(ss);
  return H.topLeftCorner(nd, nd) + H.topRightCorner(nd, nd) + H.bottomLeftCorner(nd, nd) +
         H.bottomRightCorner(nd, nd);
}

/// Gradient of x -> OT(x, x) (both arguments moving): dOT/dx + dOT/dy of the self-problem.
inline std::vector<double> dense_self_grad(const DenseOt& ss) {
  std::vector<double> gx = dense_grad_x(ss);
  const std::vector<double> gy = dense_grad_y(ss);
  for (std::size_t k = 0; k < gx.size(); ++k) gx[k] += gy[k];
  return gx;
}

/// The debiased divergence S = OT(x,y) - OT(x,x)/2 - OT(y,y)/2 with its three solutions.
struct DenseDivergence {
  DenseOt xy, xx, yy;
  double value = 0;
};

inline DenseDivergence dense_divergence(const DenseProblem& p, double eps) {
  DenseDivergence s;
  s.xy = dense_ot(p, eps);
  s.xx = dense_ot(dense_self_problem(p, 0), eps);
  s.yy = dense_ot(dense_self_problem(p, 1), eps);
  s.value = s.xy.value - 0.5 * s.xx.value - 0.5 * s.yy.value;
  return s;
}

/// dS/dx (n x d): dOT(x,y)/dx - (dOT(x,x)/dx with both arguments moving) / 2.
inline std::vector<double> dense_divergence_grad_x(const DenseDivergence& s) {
  std::vector<double> g = dense_grad_x(s.xy);
  const std::vector<double> gs = dense_self_grad(s.xx);
  for (std::size_t k = 0; k < g.size(); ++k) g[k] -= 0.5 * gs[k];
  return g;
}
/// dS/dy (m x d): dOT(x,y)/dy - (dOT(y,y)/dy, both arguments moving) / 2.
inline std::vector<double> dense_divergence_grad_y(const DenseDivergence& s) {
  std::vector<double> g = dense_grad_y(s.xy);
  const std::vector<double> gs = dense_self_grad(s.yy);
  for (std::size_t k = 0; k < g.size(); ++k) g[k] -= 0.5 * gs[k];
  return g;
}
/// dS/dA (raw source weights): OT(x,y)'s term minus half of OT(x,x)'s, where A enters both
/// weight slots of OT(x,x) (f = g on the self-problem, so that is (h_i - <a,h>)/|A| once).
inline std::vector<double> dense_divergence_grad_a(const DenseDivergence& s, double raw_mass_a) {
  std::vector<double> g = dense_grad_weights(s.xy.p.a, s.xy.f, raw_mass_a);
  const std::vector<double> g1 = dense_grad_weights(s.xx.p.a, s.xx.f, raw_mass_a);
  const std::vector<double> g2 = dense_grad_weights(s.xx.p.b, s.xx.g, raw_mass_a);
  for (std::size_t k = 0; k < g.size(); ++k) g[k] -= 0.5 * (g1[k] + g2[k]);
  return g;
}
inline std::vector<double> dense_divergence_grad_b(const DenseDivergence& s, double raw_mass_b) {
  std::vector<double> g = dense_grad_weights(s.xy.p.b, s.xy.g, raw_mass_b);
  const std::vector<double> g1 = dense_grad_weights(s.yy.p.a, s.yy.f, raw_mass_b);
  const std::vector<double> g2 = dense_grad_weights(s.yy.p.b, s.yy.g, raw_mass_b);
  for (std::size_t k = 0; k < g.size(); ++k) g[k] -= 0.5 * (g1[k] + g2[k]);
  return g;
}

/// Hessian of x -> S(x, y) (y fixed): H_xx(x, y) - J^T H(x, x) J / 2.
inline Eigen::MatrixXd dense_divergence_hessian(const DenseDivergence& s) {
  return dense_hessian_x(s.xy) - 0.5 * dense_self_hessian(s.xx);
}

/// H v for a flattened direction.
inline std::vector<double> dense_matvec(const Eigen::MatrixXd& H, const std::vector<double>& v) {
  const Eigen::VectorXd out =
      H * Eigen::Map<const Eigen::VectorXd>(v.data(), Eigen::Index(v.size()));
  return std::vector<double>(out.data(), out.data() + out.size());
}

/// Fourth-order central difference of a scalar or vector function of t at 0:
/// [-F(2h) + 8F(h) - 8F(-h) + F(-2h)] / (12 h). Truncation error O(h^4 F^(5)).
inline std::vector<double> central_difference(
    const std::function<std::vector<double>(double)>& F, double h) {
  const std::vector<double> p2 = F(2 * h), p1 = F(h), m1 = F(-h), m2 = F(-2 * h);
  std::vector<double> out(p1.size());
  for (std::size_t k = 0; k < out.size(); ++k)
    out[k] = (-p2[k] + 8 * p1[k] - 8 * m1[k] + m2[k]) / (12 * h);
  return out;
}
inline double central_difference(const std::function<double(double)>& F, double h) {
  return (-F(2 * h) + 8 * F(h) - 8 * F(-h) + F(-2 * h)) / (12 * h);
}

/// |u - v|_inf / max(|v|_inf, floor).
inline double max_rel_diff(const std::vector<double>& u, const std::vector<double>& v,
                           double floor = 1e-300) {
  if (u.size() != v.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = floor;
  for (std::size_t k = 0; k < v.size(); ++k) {
    num = std::max(num, std::abs(u[k] - v[k]));
    den = std::max(den, std::abs(v[k]));
  }
  for (double e : u)
    if (!std::isfinite(e)) return std::numeric_limits<double>::infinity();
  return num / den;
}

/// Diagonal of the joint bounding box of x and y (the length scale of the problem).
inline double dense_diameter(const DenseProblem& p) {
  double s = 0;
  for (std::int64_t k = 0; k < p.d; ++k) {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (std::int64_t i = 0; i < p.n; ++i) {
      lo = std::min(lo, p.x[static_cast<std::size_t>(i * p.d + k)]);
      hi = std::max(hi, p.x[static_cast<std::size_t>(i * p.d + k)]);
    }
    for (std::int64_t j = 0; j < p.m; ++j) {
      lo = std::min(lo, p.y[static_cast<std::size_t>(j * p.d + k)]);
      hi = std::max(hi, p.y[static_cast<std::size_t>(j * p.d + k)]);
    }
    s += (hi - lo) * (hi - lo);
  }
  return std::sqrt(s);
}

/// A finite-difference step for position derivatives: the plan changes on the length scale
/// eps / (2 c D) (a displacement that moves C_ij by eps); a twentieth of it, at most 1e-3.
inline double fd_step(const DenseProblem& p, double eps) {
  return std::min(1e-3, 0.05 * eps / (2 * p.c * std::max(dense_diameter(p), 1e-3)));
}

}  // namespace kantor::testing
