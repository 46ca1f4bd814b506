// Solves with a LabelAugmented cost against the float64 dense reference with the same label term
// (tests/support): potentials and dual cost, the certificate property (the reported marginal
// error bounds the true one of the returned potentials), and the debiased divergence, whose
// self-terms use one side's labels on both sides with the same, here non-symmetric, table (so
// that OT(A, A) is not a symmetric problem and no self-problem shortcut may apply).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kantor/context.hpp"
#include "kantor/sinkhorn.hpp"
#include "support/dense_reference.hpp"
#include "support/random_problems.hpp"

namespace kantor::testing {
namespace {

struct LabelData {
  std::vector<double> x, y;
  std::vector<std::int32_t> lx, ly;
  std::vector<double> W;
  std::int64_t n = 37, m = 29, d = 2, L = 4;
  double c = 0.8, c_w = 0.6;

  explicit LabelData(std::uint64_t seed) {
    Rng rng(seed);
    x = gaussian_cloud(rng, n, d, 0.0, 1.0);
    y = gaussian_cloud(rng, m, d, 0.5, 1.0);
    std::uniform_int_distribution<std::int32_t> lab(0, std::int32_t(L - 1));
    std::uniform_real_distribution<double> u(0.0, 2.0);
    lx.resize(std::size_t(n));
    ly.resize(std::size_t(m));
    for (auto& e : lx) e = lab(rng);
    for (auto& e : ly) e = lab(rng);
    W.resize(std::size_t(L * L));
    for (auto& e : W) e = u(rng);  // not symmetric
  }
  Problem<double> problem(double eps) const {
    LabelAugmented<double> l;
    l.features.x = host_matrix<const double>(x.data(), n, d);
    l.features.y = host_matrix<const double>(y.data(), m, d);
    l.features.scale = c;
    l.labels_x = host_vector<const std::int32_t>(lx.data(), n);
    l.labels_y = host_vector<const std::int32_t>(ly.data(), m);
    l.table = host_matrix<const double>(W.data(), L, L);
    l.table_scale = c_w;
    Problem<double> p;
    p.cost = l;
    p.epsilon = eps;
    return p;
  }
  DenseProblem dense(const std::vector<double>& xs, const std::vector<double>& ys,
                     const std::vector<std::int32_t>& ls, const std::vector<std::int32_t>& lt) const {
    DenseProblem r = make_dense_problem(xs, ys, d, std::vector<double>{}, std::vector<double>{}, c);
    add_label_term(&r, ls, lt, W, L, c_w);
    return r;
  }
};

TEST(LabelCost, SolveMatchesTheDenseReferenceAndTheCertificateBoundsTheTrueError) {
  const LabelData data(11);
  const double eps = 0.2;
  Context ctx(ContextOptions{Backend::kCpu, 2});
  SinkhornOptions o;
  o.tolerance = 1e-10;
  o.max_iterations = 20000;
  Potentials<double> pot;
  const SinkhornSummary s = solve_sinkhorn(ctx, data.problem(eps), o, &pot);
  ASSERT_TRUE(s.converged()) << s.brief_report();
  const DenseProblem ref = data.dense(data.x, data.y, data.lx, data.ly);
  const DenseSolution sol = dense_solve(ref, eps);
  EXPECT_NEAR(s.dual_cost, dense_dual_value(ref, sol.f, sol.g), 1e-9);
  const std::vector<double> f = to_host(ctx, pot.f.cview()), g = to_host(ctx, pot.g.cview());
  // The certificate property: the reported error bounds the true one of the returned potentials.
  const double truth = dense_marginal_error(ref, eps, f, g);
  EXPECT_GE(s.marginal_error, truth);
  EXPECT_LE(s.marginal_error, 1e-9);
  // The gauge-free comparison of the potentials: f_i + g_j against the reference's.
  for (std::int64_t i = 0; i < data.n; i += 5)
    for (std::int64_t j = 0; j < data.m; j += 4)
      EXPECT_NEAR(f[std::size_t(i)] + g[std::size_t(j)], sol.f[std::size_t(i)] + sol.g[std::size_t(j)],
                  1e-8);
  // max_cost bounds every cost (the annealing start): the initial eps is at least max C.
  EXPECT_GE(s.initial_epsilon * (1 + 1e-12), ref.max_cost());
}

TEST(LabelCost, DivergenceSelfTermsUseTheirOwnLabelsWithANonSymmetricTable) {
  // eps = 1: with a non-symmetric table the self-terms are solved by alternating updates, whose
  // slow mode f_i - g_i (docs/numerics.md) needs a well-coupled kernel to converge in a test.
  const LabelData data(12);
  const double eps = 1.0;
  Context ctx(ContextOptions{Backend::kCpu, 2});
  SinkhornOptions o;
  o.tolerance = 1e-9;
  o.max_iterations = 50000;
  const DivergenceSummary s = sinkhorn_divergence(ctx, data.problem(eps), o);
  ASSERT_TRUE(s.converged()) << s.brief_report();
  auto ot = [&](const std::vector<double>& xs, const std::vector<double>& ys,
                const std::vector<std::int32_t>& ls, const std::vector<std::int32_t>& lt) {
    const DenseProblem r = data.dense(xs, ys, ls, lt);
    const DenseSolution sol = dense_solve(r, eps);
    return dense_dual_value(r, sol.f, sol.g);
  };
  const double xy = ot(data.x, data.y, data.lx, data.ly);
  const double xx = ot(data.x, data.x, data.lx, data.lx);
  const double yy = ot(data.y, data.y, data.ly, data.ly);
  EXPECT_NEAR(s.xy.dual_cost, xy, 1e-8);
  EXPECT_NEAR(s.xx.dual_cost, xx, 1e-8);
  EXPECT_NEAR(s.yy.dual_cost, yy, 1e-8);
  EXPECT_NEAR(s.divergence_raw, xy - 0.5 * xx - 0.5 * yy, 3e-8);
}

}  // namespace
}  // namespace kantor::testing
