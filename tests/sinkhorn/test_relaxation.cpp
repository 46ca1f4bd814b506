// Over-relaxed Sinkhorn (SinkhornOptions::relaxation): the same certified fixed point as plain
// Sinkhorn, reached in fewer iterations on a slowly converging problem (small eps against the
// cost range), with the automatic factor and a fixed one; validation of the option.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kantor/context.hpp"
#include "kantor/sinkhorn.hpp"
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

}  // namespace
}  // namespace kantor::testing
