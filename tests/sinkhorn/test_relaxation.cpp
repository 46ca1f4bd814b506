// Accelerations of the Sinkhorn loop that keep its fixed point and certificate:
// over-relaxation (SinkhornOptions::relaxation), fewer iterations on a slowly converging problem
// (small eps against the cost range), with the automatic factor and a fixed one; the coarse
// correction (coarse_blocks_x / _y), the same certified solution in fewer iterations when mass
// must move between two distant clusters; validation of both options.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kantor/context.hpp"
#include "kantor/error.hpp"
#include "kantor/sinkhorn.hpp"
#include "solvers/relaxation.hpp"
#include "support/dense_reference.hpp"
#include "support/random_problems.hpp"

namespace kantor::testing {
namespace {

struct Slow {
  std::vector<double> x, y;
  std::int64_t n = 150, m = 120, d = 2;
  explicit Slow(std::uint64_t seed) {
    Rng rng(seed);
    x = gaussian_cloud(rng, n, d, 0.0, 1.0);
    y = mixture_cloud(rng, m, d, 3, 2.0);
  }
  Problem<double> problem(double eps) const {
    Problem<double> p;
    p.cost = SqEuclidean<double>{host_matrix<const double>(x.data(), n, d),
                                 host_matrix<const double>(y.data(), m, d), 1.0};
    p.epsilon = eps;
    return p;
  }
};

TEST(Relaxation, ReachesThePlainFixedPointInFewerIterations) {
  const Slow data(41);
  Context ctx(ContextOptions{Backend::kCpu, 2});
  SinkhornOptions plain;
  plain.tolerance = 1e-9;
  plain.max_iterations = 200000;
  const double eps = 0.01;
  Potentials<double> p0, p1, p2;
  const SinkhornSummary s0 = solve_sinkhorn(ctx, data.problem(eps), plain, &p0);
  SinkhornOptions autorel = plain;
  autorel.relaxation = 0;
  const SinkhornSummary s1 = solve_sinkhorn(ctx, data.problem(eps), autorel, &p1);
  SinkhornOptions fixed = plain;
  fixed.relaxation = 1.5;
  const SinkhornSummary s2 = solve_sinkhorn(ctx, data.problem(eps), fixed, &p2);
  ASSERT_TRUE(s0.converged()) << s0.brief_report();
  ASSERT_TRUE(s1.converged()) << s1.full_report();
  ASSERT_TRUE(s2.converged()) << s2.full_report();
  EXPECT_EQ(s0.relaxation, 1.0);
  EXPECT_GT(s1.relaxation, 1.05) << "the automatic factor engaged";
  EXPECT_EQ(s2.relaxation, 1.5);
  // Fewer iterations at the target eps (annealing is the same for all three).
  const std::int64_t t0 = s0.iterations - s0.annealing_iterations;
  const std::int64_t t1 = s1.iterations - s1.annealing_iterations;
  const std::int64_t t2 = s2.iterations - s2.annealing_iterations;
  EXPECT_LT(2 * t1, t0) << "plain " << t0 << ", auto " << t1;
  EXPECT_LT(t2, t0) << "plain " << t0 << ", 1.5: " << t2;
  // The same solution: dual costs within the tolerance's effect, potentials close (up to the
  // constant shift f + c, g - c every dual solution admits).
  EXPECT_NEAR(s1.dual_cost, s0.dual_cost, 1e-7 * std::abs(s0.dual_cost));
  EXPECT_NEAR(s2.dual_cost, s0.dual_cost, 1e-7 * std::abs(s0.dual_cost));
  const std::vector<double> f0 = to_host(ctx, p0.f.cview()), f1 = to_host(ctx, p1.f.cview());
  const std::vector<double> g0 = to_host(ctx, p0.g.cview()), g1 = to_host(ctx, p1.g.cview());
  // The certificate property: each reported error bounds the true one of its potentials.
  const DenseProblem ref = make_dense_problem(data.x, data.y, data.d, std::vector<double>{},
                                              std::vector<double>{}, 1.0);
  for (const auto* run : {&p1, &p2}) {
    const std::vector<double> f = to_host(ctx, run->f.cview()), g = to_host(ctx, run->g.cview());
    EXPECT_GE((run == &p1 ? s1 : s2).marginal_error, dense_marginal_error(ref, eps, f, g));
  }
  const double shift = f1[0] - f0[0];
  for (std::size_t i = 0; i < f0.size(); ++i) EXPECT_NEAR(f1[i] - shift, f0[i], 1e-5);
  for (std::size_t j = 0; j < g0.size(); ++j) EXPECT_NEAR(g1[j] + shift, g0[j], 1e-5);
}

TEST(Relaxation, OptionIsValidated) {
  SinkhornOptions o;
  std::string why;
  for (double bad : {-1.0, 0.5, 2.0, 3.0, double(NAN)}) {
    o.relaxation = bad;
    EXPECT_FALSE(o.is_valid(&why)) << bad;
    EXPECT_NE(why.find("relaxation must be 0 (automatic) or in [1, 2)"), std::string::npos) << why;
  }
  for (double good : {0.0, 1.0, 1.9}) {
    o.relaxation = good;
    EXPECT_TRUE(o.is_valid(&why)) << good << ": " << why;
  }
}

// The SOR relation behind the automatic factor (solvers/relaxation.hpp), against a linear
// iteration where Young's theory is exact: SOR on the 1-D Poisson matrix tridiag(-1, 2, -1)
// (consistently ordered), Jacobi radius mu = cos(pi / (N + 1)), optimum 2 / (1 + sqrt(1 - mu^2)).
// The rate measured at w = 1 and at w = 1.3 (below the optimum) gives that optimum back.
TEST(Relaxation, SorRelationRecoversTheOptimalFactorOfALinearIteration) {
  const int N = 40;
  const double pi = std::acos(-1.0), mu = std::cos(pi / (N + 1));
  const double w_opt = 2.0 / (1.0 + std::sqrt(1.0 - mu * mu));
  auto measured_rate = [&](double w) {
    // Ax = 0 from a random start: the error is the iterate; its norm ratio per sweep, late.
    Rng rng(7);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::vector<double> x(N);
    for (double& v : x) v = u(rng);
    double rate = 0;
    for (int k = 0; k < 4000; ++k) {
      for (int i = 0; i < N; ++i) {
        const double gs = 0.5 * ((i > 0 ? x[i - 1] : 0.0) + (i + 1 < N ? x[i + 1] : 0.0));
        x[i] = (1 - w) * x[i] + w * gs;
      }
      double norm = 0;
      for (double v : x) norm += v * v;
      norm = std::sqrt(norm);
      rate = norm;  // the previous iterate had norm 1
      for (double& v : x) v /= norm;  // keep it representable
    }
    return rate;
  };
  const double plain = measured_rate(1.0), relaxed = measured_rate(1.3);
  EXPECT_NEAR(plain, mu * mu, 1e-6) << "Gauss-Seidel's rate is mu^2";
  EXPECT_NEAR(detail::sor_optimal_factor(plain, 1.0), w_opt, 1e-4);
  EXPECT_LT(relaxed, plain);
  EXPECT_GT(relaxed, 1.3 - 1) << "below the optimum the rate exceeds w - 1";
  EXPECT_NEAR(detail::sor_optimal_factor(relaxed, 1.3), w_opt, 1e-4);
  // At w = 1 the relation is the plain formula, bit for bit.
  EXPECT_EQ(detail::sor_optimal_factor(0.9, 1.0), 2.0 / (1.0 + std::sqrt(1.0 - 0.9)));
}

TEST(CoarseCorrection, ReachesThePlainFixedPointInFewerIterations) {
  // Two clusters 10 apart on each side, masses 0.6 / 0.4 against 0.4 / 0.6: 0.2 of the mass must
  // cross at cost ~100 = 100 eps. Measured: plain 310 iterations, corrected 200, same solution.
  Rng rng(43);
  const std::int64_t n = 40, m = 30, d = 2;
  std::vector<double> x = gaussian_cloud(rng, n, d, 0.0, 0.3), y = gaussian_cloud(rng, m, d, 0.2, 0.3);
  std::vector<double> a(static_cast<std::size_t>(n)), b(static_cast<std::size_t>(m));
  std::vector<std::int32_t> bx(static_cast<std::size_t>(n)), by(static_cast<std::size_t>(m));
  for (std::int64_t i = 0; i < n; ++i) {
    bx[std::size_t(i)] = i % 2;
    x[std::size_t(i * d)] += 10.0 * double(i % 2);
    a[std::size_t(i)] = i % 2 ? 0.4 / 20 : 0.6 / 20;
  }
  for (std::int64_t j = 0; j < m; ++j) {
    by[std::size_t(j)] = j % 2;
    y[std::size_t(j * d)] += 10.0 * double(j % 2);
    b[std::size_t(j)] = j % 2 ? 0.6 / 15 : 0.4 / 15;
  }
  Problem<double> p;
  p.cost = SqEuclidean<double>{host_matrix<const double>(x.data(), n, d),
                               host_matrix<const double>(y.data(), m, d), 1.0};
  p.a = host_vector<const double>(a.data(), n);
  p.b = host_vector<const double>(b.data(), m);
  p.epsilon = 1.0;
  Context ctx(ContextOptions{Backend::kCpu, 2});
  SinkhornOptions o;
  o.tolerance = 1e-9;
  o.max_iterations = 2000;
  // Fixed eps: annealing from the largest cost would settle the split while the clusters are
  // still coupled (a warm start, or a solve at fixed eps, has no such help).
  o.anneal = false;
  Potentials<double> p0, p1;
  const SinkhornSummary plain = solve_sinkhorn(ctx, p, o, &p0);
  o.coarse_blocks_x = bx;
  o.coarse_blocks_y = by;
  const SinkhornSummary coarse = solve_sinkhorn(ctx, p, o, &p1);
  ASSERT_TRUE(coarse.converged()) << coarse.full_report();
  EXPECT_LE(coarse.marginal_error, 1e-9);  // the certificate of the returned plan
  // ... which bounds the true marginal error of the returned potentials.
  const DenseProblem ref = make_dense_problem(x, y, d, a, b, 1.0);
  EXPECT_GE(coarse.marginal_error, dense_marginal_error(ref, p.epsilon, to_host(ctx, p1.f.cview()),
                                                        to_host(ctx, p1.g.cview())));
  EXPECT_GE(coarse.coarse_corrections, 1);
  EXPECT_LT(coarse.iterations, plain.iterations);
  EXPECT_NEAR(coarse.dual_cost, plain.dual_cost, 1e-8 * std::abs(plain.dual_cost));
}

TEST(CoarseCorrection, OptionsAreValidated) {
  SinkhornOptions o;
  std::string why;
  o.coarse_blocks_x = {0, 1};
  EXPECT_FALSE(o.is_valid(&why));
  EXPECT_NE(why.find("both be given"), std::string::npos) << why;
  o.coarse_blocks_y = {0, -1};
  EXPECT_FALSE(o.is_valid(&why));
  EXPECT_NE(why.find("coarse_blocks_y[1] = -1"), std::string::npos) << why;
  o.coarse_blocks_y = {0, 0, 0};
  ASSERT_TRUE(o.is_valid(&why)) << why;
  Rng rng(1);
  const std::vector<double> x = gaussian_cloud(rng, 2, 1, 0, 1), y = gaussian_cloud(rng, 2, 1, 0, 1);
  Problem<double> p;
  p.cost = SqEuclidean<double>{host_matrix<const double>(x.data(), 2, 1),
                               host_matrix<const double>(y.data(), 2, 1), 1.0};
  Context ctx(ContextOptions{Backend::kCpu, 1});
  try {
    solve_sinkhorn(ctx, p, o);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("coarse_blocks_y 3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kantor::testing
