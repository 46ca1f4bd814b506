// The one online log-sum-exp state of every streaming pass, and the dual math that turns it into
// potentials, marginal errors and plan prefactors. Shared by the CPU engine (lib/cpu, oracles/cpu)
// and the CUDA kernels (lib/cuda): the formulas exist once (docs/numerics.md sections 3 and 7).
//
// State of a set J of keys for one query row, scores u_j in "u units" with exponent scale alpha
// (log2 units: the CUDA kernels' alpha = log2(e) c / eps or 2 log2(e) c / eps; the CPU pass's
// alpha = log2(e) on natural-log scores):
//
//   m = max_{j in J} u_j,   s = sum_{j in J} exp2(alpha (u_j - m)),
//   v_k = sum_{j in J} exp2(alpha (u_j - m)) V_jk                  (value columns, optional)
//
// The empty set is (m = -inf, s = 0, v = 0), the identity of merge(). merge() is associative and
// commutative up to rounding, -inf safe (never -inf - -inf), and what split-K, warp shuffles,
// row chunks and thread partials all use. exp2 is a template parameter: each engine brings its
// own (the SFU's ex2.approx on the GPU, std::exp2 or a vectorized polynomial on the CPU).
#pragma once

#include <cmath>

#include "lib/core/host_device.hpp"

namespace kantor {

/// exp2 in the precision of its argument (std::exp2 on the host, the CUDA math library's exp2 in
/// device code): the reference exponential of the merges that run once per row.
struct ExactExp2 {
  template <class T>
  KANTOR_HOST_DEVICE T operator()(T x) const {
    return T(exp2(x));
  }
};

/// The rescale factor of a state of max `m_old` when its max becomes `m_new` >= m_old:
/// exp2(alpha (m_old - m_new)); exactly 1 when they are equal (both -inf included: no NaN), 0
/// when only m_old is -inf.
template <class T, class Exp2>
KANTOR_HOST_DEVICE inline T online_rescale(T m_old, T m_new, T alpha, Exp2 exp2) {
  return m_old == m_new ? T(1) : exp2(alpha * (m_old - m_new));
}

/// Merges (m2, s2) into (m1, s1): m1 = max(m1, m2), s1 = s1 r1 + s2 r2 with each side's rescale.
template <class T, class Exp2>
KANTOR_HOST_DEVICE inline void online_merge(T& m1, T& s1, T m2, T s2, T alpha, Exp2 exp2) {
  const T m = m2 > m1 ? m2 : m1;
  s1 = s1 * online_rescale(m1, m, alpha, exp2) + s2 * online_rescale(m2, m, alpha, exp2);
  m1 = m;
}

/// The same with K value columns: v1 = v1 r1 + v2 r2.
template <class T, class Exp2>
KANTOR_HOST_DEVICE inline void online_merge(T& m1, T& s1, T* v1, T m2, T s2, const T* v2, int K,
                                            T alpha, Exp2 exp2) {
  const T m = m2 > m1 ? m2 : m1;
  const T r1 = online_rescale(m1, m, alpha, exp2), r2 = online_rescale(m2, m, alpha, exp2);
  s1 = s1 * r1 + s2 * r2;
  for (int k = 0; k < K; ++k) v1[k] = v1[k] * r1 + v2[k] * r2;
  m1 = m;
}

/// Raises the running max to cover a tile of max `tile_max` and returns the factor the running
/// sums (and values) must be multiplied by; the tile's terms are then exp2(alpha (u - m)) with
/// the new m. A state that stays -inf (every key so far masked) returns 1 and m stays -inf: the
/// caller adds nothing for it (exp2(alpha (u - m)) with m = -inf is not formed).
template <class T, class Exp2>
KANTOR_HOST_DEVICE inline T online_raise(T& m, T tile_max, T alpha, Exp2 exp2) {
  if (!(tile_max > m)) return T(1);
  const T r = exp2(alpha * (m - tile_max));  // 0 when m = -inf
  m = tile_max;
  return r;
}

/// The natural-log LSE of a state: ln sum_j exp(ln2 alpha u_j) = ln2 (alpha m + log2 s); -inf
/// for the empty state.
KANTOR_HOST_DEVICE inline double online_lse(double m, double s, double alpha) {
  return m == -INFINITY ? -INFINITY : 0.69314718055994530942 * (alpha * m + log2(s));
}

/// A potential update from its LSE: T(.)_i = q_i - eps LSE_i (q_i: the query norm term of the
/// shifted form, 0 on the exact path). +inf when every key is masked (the row has no plan mass).
KANTOR_HOST_DEVICE inline double potential_from_lse(double q, double eps, double lse) {
  return lse == -INFINITY ? INFINITY : q - eps * lse;
}

/// One row's marginal-error term |r_i - w_i| = w_i |exp((old - fresh)/eps) - 1| for the plan of
/// the old potential (fresh = the update from it). Zero weights contribute 0 (never inf * 0).
KANTOR_HOST_DEVICE inline double marginal_term(double w, double old, double fresh, double eps) {
  return w > 0 ? w * fabs(expm1((old - fresh) / eps)) : 0.0;
}

/// The damping of a KL-relaxed side's update (unbalanced OT, docs/numerics.md section 9):
/// f <- tau T(g) with tau = rho / (rho + eps) = 1 / (1 + eps / rho); rho_inv = 1 / rho, 0 for a
/// strict side (tau = 1 exactly).
KANTOR_HOST_DEVICE inline double damping(double rho_inv, double eps) {
  return rho_inv == 0 ? 1.0 : 1.0 / (1.0 + eps * rho_inv);
}

/// The target mass of a row: w for a strict side, w exp(-pot / rho) for a KL-relaxed one (the
/// first-order condition P 1 = a exp(-f / rho) of the unbalanced problem).
KANTOR_HOST_DEVICE inline double target_mass(double w, double pot, double rho_inv) {
  return rho_inv == 0 ? w : w * exp(-pot * rho_inv);
}

/// One row's residual term |r_i - w_i exp(-old_i / rho)| for the plan of the old potential, with
/// fresh = tau T the damped update from it: r_i / target_i = exp((old - fresh) / (tau eps)).
/// rho_inv = 0 is the balanced marginal_term above, bit for bit.
KANTOR_HOST_DEVICE inline double residual_term(double w, double old, double fresh, double eps,
                                               double rho_inv) {
  if (rho_inv == 0) return marginal_term(w, old, fresh, eps);
  if (!(w > 0)) return 0.0;
  const double tau = damping(rho_inv, eps);
  return target_mass(w, old, rho_inv) * fabs(expm1((old - fresh) / (tau * eps)));
}

/// The potential part of a KL-relaxed side's dual value: rho (1 - exp(-pot / rho)) (pot itself
/// for a strict side), per unit weight.
KANTOR_HOST_DEVICE inline double dual_term(double pot, double rho_inv) {
  return rho_inv == 0 ? pot : -expm1(-pot * rho_inv) / rho_inv;
}

/// The relaxed update (1 - w) old + w fresh (w = 1: fresh exactly).
KANTOR_HOST_DEVICE inline double relaxed(double old, double fresh, double w) {
  return w == 1.0 ? fresh : (1.0 - w) * old + w * fresh;
}

/// The factor turning a row's state into plan entries: P_ij = pref_i exp2(alpha (u_ij - m_i)),
/// pref_i = exp(log w_i + (f_i - q_i)/eps + ln2 alpha m_i). 0 for a masked row (log w = -inf) or
/// an empty state (no exp(-inf + inf)).
KANTOR_HOST_DEVICE inline double plan_prefactor(double log_w, double pot, double q, double eps,
                                                double m, double alpha) {
  if (log_w == -INFINITY || m == -INFINITY) return 0.0;
  return exp(log_w + (pot - q) / eps + 0.69314718055994530942 * alpha * m);
}

}  // namespace kantor
