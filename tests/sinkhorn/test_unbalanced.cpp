// Unbalanced and semi-unbalanced entropic OT (Problem::rho_a, rho_b; docs/numerics.md section 9)
// against the float64 dense unbalanced reference (support/dense_unbalanced.hpp, written from the
// problem's definition): the plan, the dual and primal values, the transported mass, the
// certified residual, for rho in {1e-2, 1, 1e2} times the cost scale, unequal masses,
// semi-unbalanced both ways, zero weights; rho -> infinity recovers the balanced solution; the
// debiased divergence (S(a, a) = 0, S >= 0, symmetry, the reference value); gradients against
// central finite differences of the fp64 values; the multiscale solver against the dense one;
// refusals; the CUDA engine against the CPU one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kantor/derivatives.hpp"
#include "kantor/kantor.hpp"
#include "support/dense_unbalanced.hpp"
#include "support/gpu.hpp"
#include "support/random_problems.hpp"

namespace kantor::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct UCase {
  const char* name;
  std::int64_t n, m, d;
  double eps, c, rho_a, rho_b, mass_a, mass_b;
  bool zeros = false;
};

// rho in {1e-2, 1, 1e2} times the cost scale; unequal masses; semi-unbalanced both ways.
const UCase kCases[] = {
    {"rho_0.01_masses_1_1.7", 30, 24, 2, 0.1, 1.0, 1e-2, 1e-2, 1.0, 1.7},
    {"rho_1_masses_1_1.7", 30, 24, 2, 0.1, 1.0, 1.0, 1.0, 1.0, 1.7},
    {"rho_100_masses_1_1.7", 30, 24, 2, 0.1, 1.0, 100.0, 100.0, 1.0, 1.7},
    {"c_0.5_rho_0.5_masses_2_0.6", 26, 31, 3, 0.05, 0.5, 0.5, 0.5, 2.0, 0.6},
    {"rho_a_1_rho_b_3", 25, 20, 2, 0.1, 1.0, 1.0, 3.0, 1.2, 0.9},
    {"semi_source_relaxed", 28, 22, 2, 0.1, 1.0, 0.5, kInf, 1.6, 1.0},
    {"semi_target_relaxed", 28, 22, 2, 0.1, 1.0, kInf, 0.5, 1.0, 2.5},
    {"zero_weights", 30, 26, 2, 0.1, 1.0, 1.0, 1.0, 1.3, 0.8, true},
};

struct UData {
  std::int64_t n = 0, m = 0, d = 0;
  std::vector<double> x, y, a, b;
  double eps = 0.1, c = 1.0, rho_a = kInf, rho_b = kInf;

  Problem<double> problem() const {
    Problem<double> p;
    p.features().x = host_matrix<const double>(x.data(), n, d);
    p.features().y = host_matrix<const double>(y.data(), m, d);
    p.a = host_vector<const double>(a.data(), n);
    p.b = host_vector<const double>(b.data(), m);
    p.features().scale = c;
    p.epsilon = eps;
    p.rho_a = rho_a;
    p.rho_b = rho_b;
    return p;
  }
  UnbalancedDense dense() const { return make_unbalanced(x, y, d, a, b, c, rho_a, rho_b); }
};

/// The problem of `u` in precision T (the arrays converted), with the float64 coordinates as the
/// certificate's reference when `reference`. Holds the arrays the views point into: not movable.
template <class T>
struct Typed {
  std::vector<T> x, y, a, b;
  Problem<T> problem;
  Typed(const UData& u, bool reference)
      : x(u.x.begin(), u.x.end()), y(u.y.begin(), u.y.end()), a(u.a.begin(), u.a.end()),
        b(u.b.begin(), u.b.end()) {
    problem.features().x = host_matrix<const T>(x.data(), u.n, u.d);
    problem.features().y = host_matrix<const T>(y.data(), u.m, u.d);
    problem.a = host_vector<const T>(a.data(), u.n);
    problem.b = host_vector<const T>(b.data(), u.m);
    problem.features().scale = u.c;
    problem.epsilon = u.eps;
    problem.rho_a = u.rho_a;
    problem.rho_b = u.rho_b;
    if (reference) {
      problem.reference_x = host_matrix<const double>(u.x.data(), u.n, u.d);
      problem.reference_y = host_matrix<const double>(u.y.data(), u.m, u.d);
    }
  }
  Typed(const Typed&) = delete;
  Typed& operator=(const Typed&) = delete;
};

std::vector<double> scaled(std::vector<double> w, double mass) {
  double t = 0;
  for (double e : w) t += e;
  for (double& e : w) e *= mass / t;
  return w;
}

UData make_data(const UCase& k, std::uint64_t seed = 3) {
  Rng rng(seed);
  UData u;
  u.n = k.n;
  u.m = k.m;
  u.d = k.d;
  u.x = gaussian_cloud(rng, k.n, k.d);
  u.y = gaussian_cloud(rng, k.m, k.d, 0.5);
  std::vector<double> a = random_weights(rng, k.n), b = random_weights(rng, k.m);
  if (k.zeros) {
    a = with_zeros(a, 2, 7);
    b = with_zeros(b, 1, 5);
  }
  u.a = scaled(a, k.mass_a);
  u.b = scaled(b, k.mass_b);
  u.eps = k.eps;
  u.c = k.c;
  u.rho_a = std::isfinite(k.rho_a) ? k.rho_a * k.c : kInf;
  u.rho_b = std::isfinite(k.rho_b) ? k.rho_b * k.c : kInf;
  return u;
}

SinkhornOptions tight(double tol = 1e-11) {
  SinkhornOptions o;
  o.tolerance = tol;
  o.max_iterations = 200000;
  o.record_iterations = false;
  return o;
}

std::vector<double> plan_of(const UnbalancedDense& p, double eps, const std::vector<double>& f,
                            const std::vector<double>& g) {
  std::vector<double> P(std::size_t(p.n * p.m));
  for (std::int64_t i = 0; i < p.n; ++i)
    for (std::int64_t j = 0; j < p.m; ++j)
      P[std::size_t(i * p.m + j)] =
          p.a[std::size_t(i)] * p.b[std::size_t(j)] *
          std::exp((f[std::size_t(i)] + g[std::size_t(j)] - p.C[std::size_t(i * p.m + j)]) / eps);
  return P;
}

double max_abs_diff(const std::vector<double>& u, const std::vector<double>& v) {
  double e = 0;
  for (std::size_t i = 0; i < u.size(); ++i) e = std::max(e, std::abs(u[i] - v[i]));
  return e;
}
double max_abs(const std::vector<double>& u) {
  double e = 0;
  for (double x : u) e = std::max(e, std::abs(x));
  return e;
}

class Unbalanced : public ::testing::TestWithParam<UCase> {};

TEST_P(Unbalanced, MatchesTheDenseReference) {
  const UCase& k = GetParam();
  const UData u = make_data(k);
  Context ctx(ContextOptions{Backend::kCpu, 0});
  for (const Schedule sched : {Schedule::kAlternating, Schedule::kSymmetric}) {
    SCOPED_TRACE(to_string(sched));
    SinkhornOptions o = tight();
    o.schedule = sched;
    Potentials<double> pot;
    const SinkhornSummary s = solve_sinkhorn(ctx, u.problem(), o, &pot);
    ASSERT_TRUE(s.converged()) << s.full_report();
    EXPECT_TRUE(s.unbalanced());
    EXPECT_EQ(s.rho_a, u.rho_a);
    EXPECT_EQ(s.rho_b, u.rho_b);
    EXPECT_NEAR(s.mass_a, k.mass_a, 1e-12);
    EXPECT_NEAR(s.mass_b, k.mass_b, 1e-12);

    const UnbalancedDense dp = u.dense();
    const UnbalancedSolution ref = solve_unbalanced(dp, u.eps);
    ASSERT_LT(ref.change, 1e-12) << "reference not converged";
    const std::vector<double> f(pot.f.data(), pot.f.data() + u.n);
    const std::vector<double> g(pot.g.data(), pot.g.data() + u.m);
    const std::vector<double> P = plan_of(dp, u.eps, f, g);
    // The plan (unique, unlike the potentials of a balanced problem).
    const double pmax = max_abs(ref.P);
    EXPECT_LE(max_abs_diff(P, ref.P), 1e-8 * pmax) << "plan";
    // The certificate bounds the residual of the returned potentials.
    const double res = unbalanced_residual(dp, f, g, P);
    EXPECT_LE(res, s.marginal_error);
    EXPECT_LE(s.marginal_error, o.tolerance);
    // Values: the dual of the returned potentials, the primal of the returned plan (both from the
    // reference's definitions), and the optimum's value.
    const double scale = 1 + std::abs(unbalanced_primal(dp, u.eps, ref.P));
    EXPECT_NEAR(s.dual_cost, unbalanced_dual(dp, u.eps, f, g), 1e-10 * scale);
    EXPECT_NEAR(s.regularized_cost, unbalanced_primal(dp, u.eps, P), 1e-9 * scale);
    EXPECT_NEAR(s.dual_cost, unbalanced_primal(dp, u.eps, ref.P), 1e-8 * scale);
    EXPECT_NEAR(s.dual_gap, 0.0, 1e-8 * scale);
    EXPECT_NEAR(s.plan_mass, total(ref.P), 1e-9 * total(ref.P));
    // The marginal KL terms of the returned plan.
    std::vector<double> r(std::size_t(u.n), 0.0), c(std::size_t(u.m), 0.0);
    for (std::int64_t i = 0; i < u.n; ++i)
      for (std::int64_t j = 0; j < u.m; ++j) {
        r[std::size_t(i)] += P[std::size_t(i * u.m + j)];
        c[std::size_t(j)] += P[std::size_t(i * u.m + j)];
      }
    EXPECT_NEAR(s.marginal_kl_a, generalized_kl(r, dp.a), 1e-9 * (1 + s.marginal_kl_a));
    EXPECT_NEAR(s.marginal_kl_b, generalized_kl(c, dp.b), 1e-9 * (1 + s.marginal_kl_b));
    // A strict side keeps its marginal.
    if (!std::isfinite(u.rho_a)) EXPECT_NEAR(total(r), k.mass_a, 1e-9);
    if (!std::isfinite(u.rho_b)) EXPECT_NEAR(total(c), k.mass_b, 1e-9);
    // Zero weights: their rows and columns of the plan are empty.
    for (std::int64_t i = 0; i < u.n; ++i)
      if (u.a[std::size_t(i)] == 0) EXPECT_EQ(r[std::size_t(i)], 0.0);
  }
}

TEST_P(Unbalanced, Float32AgreesWithFloat64) {
  const UCase& k = GetParam();
  const UData u = make_data(k);
  Context ctx(ContextOptions{Backend::kCpu, 0});
  const SinkhornSummary s64 = solve_sinkhorn(ctx, u.problem(), tight());
  ASSERT_TRUE(s64.converged()) << s64.full_report();
  const Typed<float> t(u, true);
  const SinkhornSummary s32 = solve_sinkhorn(ctx, t.problem, tight(1e-4));
  ASSERT_TRUE(s32.converged()) << s32.full_report();
  EXPECT_LE(s32.marginal_error, 1e-4);
  EXPECT_NEAR(s32.dual_cost, s64.dual_cost, 1e-3 * (1 + std::abs(s64.dual_cost)));
  EXPECT_NEAR(s32.plan_mass, s64.plan_mass, 1e-3 * s64.plan_mass);
}

INSTANTIATE_TEST_SUITE_P(Cases, Unbalanced, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<UCase>& i) {
                           std::string s = i.param.name;
                           for (char& ch : s)
                             if (ch == '.') ch = '_';
                           return s;
                         });

TEST(UnbalancedLimits, LargeRhoRecoversTheBalancedSolution) {
  UCase k{"limit", 30, 24, 2, 0.1, 1.0, kInf, kInf, 1.0, 1.0};
  UData u = make_data(k);
  Context ctx(ContextOptions{Backend::kCpu, 0});
  Potentials<double> pb;
  const SinkhornSummary bal = solve_sinkhorn(ctx, u.problem(), tight(), &pb);
  ASSERT_TRUE(bal.converged());
  const UnbalancedDense dp = u.dense();
  const std::vector<double> Pb = plan_of(dp, u.eps, std::vector<double>(pb.f.data(), pb.f.data() + u.n),
                                         std::vector<double>(pb.g.data(), pb.g.data() + u.m));
  double prev_value_gap = kInf, prev_plan_gap = kInf;
  for (const double rho : {1e1, 1e2, 1e3}) {
    u.rho_a = u.rho_b = rho;
    Potentials<double> pu;
    SinkhornOptions o = tight(1e-10);
    o.relaxation = 0;  // the slow mass mode (rate ~ 1 - eps / rho) needs over-relaxation
    const SinkhornSummary s = solve_sinkhorn(ctx, u.problem(), o, &pu);
    ASSERT_TRUE(s.converged()) << rho << "\n" << s.full_report();
    const std::vector<double> P = plan_of(dp, u.eps, std::vector<double>(pu.f.data(), pu.f.data() + u.n),
                                          std::vector<double>(pu.g.data(), pu.g.data() + u.m));
    const double value_gap = std::abs(s.dual_cost - bal.dual_cost);
    const double plan_gap = max_abs_diff(P, Pb);
    // The gap closes like 1 / rho (measured: 0.257, 0.0333, 0.00345 for rho = 10, 100, 1000).
    EXPECT_LT(value_gap, 5.0 / rho) << rho;
    EXPECT_LT(plan_gap, 1.0 / rho) << rho;
    if (std::isfinite(prev_value_gap)) EXPECT_GT(prev_value_gap / value_gap, 7.0) << rho;
    std::printf("rho %g: value gap %.3g, plan gap %.3g, %lld iterations\n", rho, value_gap,
                plan_gap, static_cast<long long>(s.iterations));
    EXPECT_LT(value_gap, prev_value_gap) << rho;
    EXPECT_LT(plan_gap, prev_plan_gap) << rho;
    prev_value_gap = value_gap;
    prev_plan_gap = plan_gap;
  }
}

// ---- divergence ---------------------------------------------------------------------------

double reference_divergence(const UData& u) {
  auto value = [&](const std::vector<double>& x, const std::vector<double>& y,
                   const std::vector<double>& a, const std::vector<double>& b) {
    const UnbalancedDense p = make_unbalanced(x, y, u.d, a, b, u.c, u.rho_a, u.rho_b);
    const UnbalancedSolution s = solve_unbalanced(p, u.eps);
    return unbalanced_dual(p, u.eps, s.f, s.g);
  };
  const double dm = total(u.a) - total(u.b);
  return value(u.x, u.y, u.a, u.b) - 0.5 * value(u.x, u.x, u.a, u.a) -
         0.5 * value(u.y, u.y, u.b, u.b) + 0.5 * u.eps * dm * dm;
}

TEST(UnbalancedDivergence, ZeroOnItselfPositiveSymmetricAndEqualToTheReference) {
  Context ctx(ContextOptions{Backend::kCpu, 0});
  for (const double rho : {0.1, 1.0}) {
    SCOPED_TRACE(rho);
    UCase k{"div", 22, 18, 2, 0.1, 1.0, rho, rho, 1.0, 1.6};
    const UData u = make_data(k);
    // S(a, a) = 0: the same cloud and weights on both sides.
    UData same = u;
    same.y = u.x;
    same.b = u.a;
    same.m = u.n;
    const DivergenceSummary s0 = sinkhorn_divergence(ctx, same.problem(), tight());
    ASSERT_TRUE(s0.converged()) << s0.full_report();
    EXPECT_NEAR(s0.divergence_raw, 0.0, 1e-12);
    // S >= 0 and the reference value.
    const DivergenceSummary s = sinkhorn_divergence(ctx, u.problem(), tight());
    ASSERT_TRUE(s.converged()) << s.full_report();
    const double ref = reference_divergence(u);
    EXPECT_GT(ref, 0.0);
    EXPECT_GE(s.divergence, 0.0);
    EXPECT_NEAR(s.divergence, ref, 1e-8 * (1 + std::abs(ref)));
    // Symmetry: S(a, b) = S(b, a).
    UData swapped = u;
    std::swap(swapped.x, swapped.y);
    std::swap(swapped.a, swapped.b);
    std::swap(swapped.n, swapped.m);
    const DivergenceSummary t = sinkhorn_divergence(ctx, swapped.problem(), tight());
    ASSERT_TRUE(t.converged());
    EXPECT_NEAR(s.divergence, t.divergence, 1e-9 * (1 + std::abs(ref)));
    // The mass term matters: without it the value would be off by eps/2 (m_a - m_b)^2.
    EXPECT_GT(0.5 * u.eps * 0.36, 1e3 * std::abs(s.divergence - ref));
  }
}

// ---- gradients ----------------------------------------------------------------------------

// Central differences of the fp64 value (solved to 1e-12) against the envelope gradients.
TEST(UnbalancedGradients, MatchFiniteDifferences) {
  Context ctx(ContextOptions{Backend::kCpu, 0});
  const UCase cases[] = {
      {"both", 12, 9, 2, 0.2, 1.0, 0.7, 0.7, 1.0, 1.5},
      {"c_half", 10, 11, 2, 0.2, 0.5, 2.0, 2.0, 1.4, 0.9},
      {"semi", 12, 9, 2, 0.2, 1.0, 0.7, kInf, 1.3, 1.0},
  };
  for (const UCase& k : cases) {
    SCOPED_TRACE(k.name);
    const UData u = make_data(k, 11);
    const bool debias_ok = k.rho_a == k.rho_b;
    for (const bool debias : {false, true}) {
      if (debias && !debias_ok) continue;
      SCOPED_TRACE(debias ? "divergence" : "OT");
      auto value = [&](const UData& v) {
        if (debias) {
          const DivergenceSummary s = sinkhorn_divergence(ctx, v.problem(), tight(1e-12));
          EXPECT_TRUE(s.converged());
          return s.divergence_raw;
        }
        const SinkhornSummary s = solve_sinkhorn(ctx, v.problem(), tight(1e-12));
        EXPECT_TRUE(s.converged());
        return s.dual_cost;
      };
      SinkhornSolver<double> solver(ctx, u.problem());
      std::vector<double> gx(std::size_t(u.n * u.d)), gy(std::size_t(u.m * u.d));
      std::vector<double> ga(std::size_t(u.n)), gb(std::size_t(u.m));
      GradientOutput<double> go;
      go.x = host_matrix(gx.data(), u.n, u.d);
      go.y = host_matrix(gy.data(), u.m, u.d);
      go.a = host_vector(ga.data(), u.n);
      go.b = host_vector(gb.data(), u.m);
      if (debias) {
        DivergencePotentials<double> dp;
        ASSERT_TRUE(solver.solve_divergence(tight(1e-12), &dp).converged());
        solver.divergence_gradient(dp, go);
      } else {
        Potentials<double> pot;
        ASSERT_TRUE(solver.solve(tight(1e-12), &pot).converged());
        solver.gradient(pot, go);
      }
      const double h = 1e-4;
      double worst = 0, scale = 0;
      for (const std::int64_t i : {std::int64_t(0), std::int64_t(3), u.n - 1}) {
        for (std::int64_t q = 0; q < u.d; ++q) {
          UData p = u, m = u;
          p.x[std::size_t(i * u.d + q)] += h;
          m.x[std::size_t(i * u.d + q)] -= h;
          const double fd = (value(p) - value(m)) / (2 * h);
          worst = std::max(worst, std::abs(fd - gx[std::size_t(i * u.d + q)]));
          scale = std::max(scale, std::abs(fd));
        }
        UData p = u, m = u;
        p.a[std::size_t(i)] += h;
        m.a[std::size_t(i)] -= h;
        const double fda = (value(p) - value(m)) / (2 * h);
        worst = std::max(worst, std::abs(fda - ga[std::size_t(i)]));
        scale = std::max(scale, std::abs(fda));
      }
      for (const std::int64_t j : {std::int64_t(1), u.m - 2}) {
        {
          UData p = u, m = u;
          p.y[std::size_t(j * u.d)] += h;
          m.y[std::size_t(j * u.d)] -= h;
          const double fdy = (value(p) - value(m)) / (2 * h);
          worst = std::max(worst, std::abs(fdy - gy[std::size_t(j * u.d)]));
          scale = std::max(scale, std::abs(fdy));
        }
        UData p = u, m = u;
        p.b[std::size_t(j)] += h;
        m.b[std::size_t(j)] -= h;
        const double fdb = (value(p) - value(m)) / (2 * h);
        worst = std::max(worst, std::abs(fdb - gb[std::size_t(j)]));
        scale = std::max(scale, std::abs(fdb));
      }
      EXPECT_GT(scale, 1e-2);
      EXPECT_LT(worst, 1e-6 * (1 + scale));
    }
  }
}

// The x-gradient carries the transported row mass P 1 = a exp(-f / rho), not a: with a
// stretched target (most mass destroyed) the two differ a lot, and only the former is right.
TEST(UnbalancedGradients, UseTheTransportedRowMass) {
  Context ctx(ContextOptions{Backend::kCpu, 0});
  UCase k{"mass", 10, 8, 2, 0.1, 1.0, 0.3, 0.3, 1.0, 1.0};
  UData u = make_data(k, 5);
  for (double& v : u.y) v *= 3;
  SinkhornSolver<double> solver(ctx, u.problem());
  Potentials<double> pot;
  ASSERT_TRUE(solver.solve(tight(1e-12), &pot).converged());
  std::vector<double> gx(std::size_t(u.n * u.d));
  GradientOutput<double> go;
  go.x = host_matrix(gx.data(), u.n, u.d);
  solver.gradient(pot, go);
  // The gradient a public implementation computes: 2c a_i (x_i - T(x_i)), T the barycentric map.
  std::vector<double> map(std::size_t(u.n * u.d));
  solver.barycentric_map(pot, host_matrix(map.data(), u.n, u.d));
  double diff = 0, norm = 0;
  for (std::int64_t i = 0; i < u.n; ++i)
    for (std::int64_t q = 0; q < u.d; ++q) {
      const std::size_t e = std::size_t(i * u.d + q);
      const double dropped = 2 * u.c * u.a[std::size_t(i)] * (u.x[e] - map[e]);
      diff = std::max(diff, std::abs(dropped - gx[e]));
      norm = std::max(norm, std::abs(gx[e]));
    }
  EXPECT_GT(diff, 0.1 * norm) << "the row mass factor should change the gradient here";
  // And the right one matches a finite difference (first coordinate of point 0).
  const double h = 1e-4;
  UData p = u, m = u;
  p.x[0] += h;
  m.x[0] -= h;
  const double fd = (solve_sinkhorn(ctx, p.problem(), tight(1e-12)).dual_cost -
                     solve_sinkhorn(ctx, m.problem(), tight(1e-12)).dual_cost) /
                    (2 * h);
  EXPECT_NEAR(gx[0], fd, 1e-6 * (1 + std::abs(fd)));
}

// ---- multiscale ---------------------------------------------------------------------------

// The multiscale solver on unbalanced and semi-unbalanced problems: certified (its bound above
// the dense float64 evaluation over every pair), and the same values as the dense solver.
template <class T>
void check_multiscale(const Context& ctx, double rho_a, double rho_b, double tol) {
  // 1-D clouds on [0, 3]: Morton order is the sorted order and the row tiles are short
  // intervals, so the screen prunes most pairs at this eps with few points.
  Rng rng(17);
  const std::int64_t n = 1500, m = 1200, d = 1;
  std::uniform_real_distribution<double> U(0.0, 3.0);
  UData u;
  u.n = n;
  u.m = m;
  u.d = d;
  u.x.resize(std::size_t(n));
  u.y.resize(std::size_t(m));
  for (double& v : u.x) v = U(rng);
  for (double& v : u.y) v = 0.1 + 0.9 * U(rng);
  u.a = scaled(random_weights(rng, n), 1.0);
  u.b = scaled(random_weights(rng, m), 1.5);
  u.eps = 0.002;
  u.rho_a = rho_a;
  u.rho_b = rho_b;
  const Typed<T> t(u, std::is_same<T, float>::value);
  const Problem<T>& p = t.problem;
  SinkhornOptions o = tight(tol);
  o.solver = SolverKind::kMultiscale;
  o.multiscale.verify = true;
  o.multiscale.max_density = 1.0;
  const SinkhornSummary ms = solve_sinkhorn(ctx, p, o);
  ASSERT_TRUE(ms.converged()) << ms.full_report();
  EXPECT_EQ(ms.solver, "multiscale");
  EXPECT_TRUE(ms.unbalanced());
  EXPECT_LT(ms.kept_fraction, 0.4) << "the screen should prune at this eps";
  EXPECT_GE(ms.marginal_error, ms.verified_error) << ms.full_report();
  o.solver = SolverKind::kDense;
  const SinkhornSummary dn = solve_sinkhorn(ctx, p, o);
  ASSERT_TRUE(dn.converged()) << dn.full_report();
  // Both plans are within tol of the optimality conditions: their values agree to about
  // tol times the potentials' range.
  const double vtol = 20 * tol * (1 + std::abs(dn.dual_cost));
  EXPECT_NEAR(ms.dual_cost, dn.dual_cost, vtol);
  EXPECT_NEAR(ms.regularized_cost, dn.regularized_cost, vtol);
  EXPECT_NEAR(ms.plan_mass, dn.plan_mass, 10 * tol * dn.plan_mass);
  EXPECT_NEAR(ms.mass_b, 1.5, 1e-6);
}

TEST(UnbalancedMultiscale, CertifiedAndEqualToDense) {
  Context ctx(ContextOptions{Backend::kCpu, 0});
  check_multiscale<double>(ctx, 0.05, 0.05, 1e-6);
  check_multiscale<double>(ctx, kInf, 0.02, 1e-6);
  check_multiscale<float>(ctx, 0.05, 0.05, 1e-3);
}

// ---- refusals -----------------------------------------------------------------------------

TEST(UnbalancedRefusals, NameTheField) {
  Context ctx(ContextOptions{Backend::kCpu, 0});
  UCase k{"refuse", 12, 10, 2, 0.1, 1.0, 1.0, 2.0, 1.0, 1.5};
  UData u = make_data(k);
  auto expect_invalid = [](auto&& fn, const std::string& what) {
    try {
      fn();
      ADD_FAILURE() << "expected InvalidArgument naming " << what;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  // Penalties out of range.
  for (const double bad : {0.0, -1.0, std::nan("")}) {
    UData v = u;
    v.rho_a = bad;
    expect_invalid([&] { validate(v.problem()); }, "problem.rho_a");
    v = u;
    v.rho_b = bad;
    expect_invalid([&] { validate(v.problem()); }, "problem.rho_b");
  }
  // Unequal masses are a balanced problem's error only, and the message points to rho.
  {
    UData v = u;
    v.rho_a = v.rho_b = kInf;
    expect_invalid([&] { validate(v.problem()); }, "rho_a / rho_b");
    EXPECT_NO_THROW(validate(u.problem()));
  }
  // The divergence needs one penalty for both sides.
  expect_invalid([&] { sinkhorn_divergence(ctx, u.problem(), tight()); }, "one marginal penalty");
  // The coarse correction is balanced-only.
  {
    SinkhornOptions c = tight();
    c.coarse_blocks_x.assign(std::size_t(u.n), 0);
    c.coarse_blocks_y.assign(std::size_t(u.m), 0);
    expect_invalid([&] { solve_sinkhorn(ctx, u.problem(), c); }, "coarse");
    const SinkhornSummary s = solve_sinkhorn(ctx, u.problem(), tight());
    EXPECT_EQ(s.solver, "dense");
  }
  // Hessian-vector products linearize the balanced constraints.
  {
    SinkhornSolver<double> solver(ctx, u.problem());
    Potentials<double> pot;
    ASSERT_TRUE(solver.solve(tight(), &pot).converged());
    std::vector<double> A(std::size_t(u.n * u.d), 1.0), out(A.size());
    expect_invalid(
        [&] {
          solver.hvp(pot, host_matrix<const double>(A.data(), u.n, u.d),
                     host_matrix(out.data(), u.n, u.d));
        },
        "balanced problems only");
  }
}

// ---- GPU ------------------------------------------------------------------------------------

TEST(CudaUnbalanced, AgreesWithTheCpuEngine) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  Context cpu(ContextOptions{Backend::kCpu, 0});
  Context gpu(ContextOptions{Backend::kCuda, 0});
  for (const UCase& k : kCases) {
    SCOPED_TRACE(k.name);
    const UData u = make_data(k);
    const SinkhornSummary c = solve_sinkhorn(cpu, u.problem(), tight());
    ASSERT_TRUE(c.converged());
    Potentials<double> pg;
    const SinkhornSummary g = solve_sinkhorn(gpu, u.problem(), tight(), &pg);
    ASSERT_TRUE(g.converged()) << g.full_report();
    EXPECT_EQ(g.backend, Backend::kCuda);
    EXPECT_NEAR(g.dual_cost, c.dual_cost, 1e-9 * (1 + std::abs(c.dual_cost)));
    EXPECT_NEAR(g.regularized_cost, c.regularized_cost, 1e-9 * (1 + std::abs(c.dual_cost)));
    EXPECT_NEAR(g.plan_mass, c.plan_mass, 1e-9 * c.plan_mass);
    // The CPU engine certifies the GPU's potentials.
    auto oracle = make_oracle(cpu, u.problem(), Precision::kFp64);
    const std::vector<double> f = to_host(gpu, pg.f.cview()), gg = to_host(gpu, pg.g.cview());
    EXPECT_LE(oracle->certify(u.eps, f.data(), gg.data()).bound, 2 * g.marginal_error + 1e-13);
    // fp32 on the GPU, to its tolerance.
    const Typed<float> t(u, false);
    const SinkhornSummary s32 = solve_sinkhorn(gpu, t.problem, tight(1e-4));
    ASSERT_TRUE(s32.converged()) << s32.full_report();
    EXPECT_NEAR(s32.dual_cost, c.dual_cost, 1e-3 * (1 + std::abs(c.dual_cost)));
  }
  // The multiscale solver on the GPU.
  check_multiscale<float>(gpu, 0.05, 0.05, 1e-3);
  check_multiscale<double>(gpu, kInf, 0.02, 1e-6);
  // The divergence and the gradient on the GPU.
  UCase k{"div", 40, 30, 3, 0.1, 1.0, 0.5, 0.5, 1.0, 1.4};
  const UData u = make_data(k);
  const DivergenceSummary dc = sinkhorn_divergence(cpu, u.problem(), tight());
  const DivergenceSummary dg = sinkhorn_divergence(gpu, u.problem(), tight());
  ASSERT_TRUE(dg.converged());
  EXPECT_NEAR(dg.divergence, dc.divergence, 1e-9 * (1 + dc.divergence));
  std::vector<double> gx_c(std::size_t(u.n * u.d)), gx_g(gx_c.size());
  for (int e = 0; e < 2; ++e) {
    const Context& ctx = e == 0 ? cpu : gpu;
    SinkhornSolver<double> solver(ctx, u.problem());
    Potentials<double> pot;
    ASSERT_TRUE(solver.solve(tight(), &pot).converged());
    GradientOutput<double> go;
    go.x = host_matrix((e == 0 ? gx_c : gx_g).data(), u.n, u.d);
    solver.gradient(pot, go);
  }
  EXPECT_LT(max_abs_diff(gx_c, gx_g), 1e-8 * (1 + max_abs(gx_c)));
}

}  // namespace
}  // namespace kantor::testing
