// What the dense and multiscale solvers share about unbalanced problems (docs/numerics.md
// section 9): the marginal KL terms of a plan, for its primal value; and the values of an
// unbalanced Summary from the oracle's sums.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kantor/buffer.hpp"
#include "kantor/context.hpp"
#include "kantor/oracle.hpp"
#include "kantor/sinkhorn.hpp"

namespace kantor {

// KL(P 1 | a) and KL(P^T 1 | b) (generalized: sum r log(r / w) - r + w) of the plan of (f, g):
// one transport application per side, the sums in double on the host.
struct MarginalKl {
  double a = 0, b = 0;
};
template <class T>
inline MarginalKl marginal_kl(const Context& ctx, Oracle<T>& oracle, T eps, const T* f, const T* g) {
  const std::int64_t n = oracle.n(), m = oracle.m();
  Buffer<T> ones(ctx, std::max(n, m)), r(ctx, n), c(ctx, m);
  oracle.ops().fill(MatrixView<T>{ones.data(), std::max(n, m), 1, 1, ctx.memory_space()}, T(1));
  oracle.apply(eps, f, g, ones.data(), r.data());
  oracle.apply_t(eps, f, g, ones.data(), c.data());
  auto kl = [&](const T* marg, const T* w, std::int64_t k) {
    const std::vector<T> rh = to_host(ctx, VectorView<const T>{marg, k, ctx.memory_space()});
    const std::vector<T> wh = to_host(ctx, VectorView<const T>{w, k, ctx.memory_space()});
    double sum = 0;
    for (std::int64_t i = 0; i < k; ++i) {
      const double ri = double(rh[std::size_t(i)]), wi = double(wh[std::size_t(i)]);
      sum += wi > 0 ? (ri > 0 ? ri * std::log(ri / wi) - ri + wi : wi) : ri;
    }
    return sum;
  };
  return MarginalKl{kl(r.data(), oracle.a(), n), kl(c.data(), oracle.b(), m)};
}

/// Sets the Summary's unbalanced values from the potential part of the dual (dual_value), the
/// plan's mass and sum P (f + g) (plan_statistics or the certificate's sums): the mass term
/// -eps (sum P - m_a m_b) on both values, and the relaxed sides' rho KL terms of the plan of
/// (f, g) (one transport application per side, over the oracle's current key schedule) on the
/// regularized cost.
template <class T>
void set_unbalanced_values(const Context& ctx, Oracle<T>& oracle, double eps, const T* f,
                           const T* g, double potential_part, double plan_mass,
                           double plan_potentials, SinkhornSummary* s) {
  const double mab = s->mass_a * s->mass_b;
  s->dual_cost = potential_part - eps * (plan_mass - mab);
  s->regularized_cost = plan_potentials - eps * (plan_mass - mab);
  const MarginalKl kl = marginal_kl(ctx, oracle, T(eps), f, g);
  s->marginal_kl_a = kl.a;
  s->marginal_kl_b = kl.b;
  if (std::isfinite(s->rho_a)) s->regularized_cost += s->rho_a * kl.a;
  if (std::isfinite(s->rho_b)) s->regularized_cost += s->rho_b * kl.b;
  s->dual_gap = s->regularized_cost - s->dual_cost;
}

/// The Summary's unbalanced facts from the oracle: penalties and the weights' totals.
template <class T>
void set_unbalanced_facts(const Oracle<T>& oracle, SinkhornSummary* s) {
  s->rho_a = oracle.marginal_penalty(0);
  s->rho_b = oracle.marginal_penalty(1);
  s->mass_a = oracle.weight_mass(0);
  s->mass_b = oracle.weight_mass(1);
}

}  // namespace kantor
