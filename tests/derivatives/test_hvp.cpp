// Hessian-vector products of x -> OT_eps(x, y) and x -> S_eps(x, y) and the inverse HVP
// (SinkhornSolver::hvp, divergence_hvp, inverse_hvp) on the CPU engine: against the explicit
// dense Hessians of support/dense_derivatives.hpp (fp64 and fp32), against fourth-order central
// finite differences of the library's own fp64 gradient, symmetry, the closed form of the sum
// over points, c = 1 and 1/2 (with a check that the reference tells 4c/eps from (2c)^2/eps), a
// small eps; the inverse HVP on a positive definite and on an indefinite Hessian (checked with
// the dense Hessian's eigenvalues); CG budgets.
#include <gtest/gtest.h>

#include <Eigen/Eigenvalues>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "derivatives/derivative_cases.hpp"

namespace kantor::testing {
namespace {

const std::vector<DerivCase> kCases = {
    DerivCase{"n7_m5_d2_c1_weights", 7, 5, 2, 0.3, 1.0, true},
    DerivCase{"n6_m9_d3_c05_weights", 6, 9, 3, 0.4, 0.5, true},
    DerivCase{"n8_m6_d2_c05_uniform", 8, 6, 2, 0.5, 0.5, false},
    DerivCase{"n8_m6_d2_c1_zero_weight", 8, 6, 2, 0.3, 1.0, true, true},
    DerivCase{"n12_m10_d2_c1_small_eps_unit", 12, 10, 2, 0.02, 1.0, true, false, true, 1.0},
    DerivCase{"n12_m10_d2_c05_small_eps_unit", 12, 10, 2, 0.02, 0.5, true, false, true, 1.0},
    DerivCase{"n30_m25_d2_c05_weights", 30, 25, 2, 0.2, 0.5, true},
};

// sum_i (H A)_i = 2c sum_i a_i A_i (any A): the derivative of sum_i dOT/dx_i =
// 2c (mean_a x - mean_b y). The same holds for the divergence (the self-term's sum is 0).
std::vector<double> weighted_direction_sum(const DenseProblem& p, const std::vector<double>& A) {
  std::vector<double> s(static_cast<std::size_t>(p.d), 0.0);
  for (std::int64_t i = 0; i < p.n; ++i)
    for (std::int64_t k = 0; k < p.d; ++k)
      s[static_cast<std::size_t>(k)] += 2 * p.c * p.a[static_cast<std::size_t>(i)] * A[static_cast<std::size_t>(i * p.d + k)];
  return s;
}
std::vector<double> point_sum(const std::vector<double>& v, std::int64_t d) {
  std::vector<double> s(static_cast<std::size_t>(d), 0.0);
  for (std::size_t q = 0; q < v.size(); ++q) s[q % static_cast<std::size_t>(d)] += v[q];
  return s;
}

class Hvp : public ::testing::TestWithParam<DerivCase> {};

template <class T>
void check_hvp_vs_dense(const DerivCase& c) {
  const RawData raw = make_raw(c);
  const Precision prec = default_precision<T>();
  Context ctx = cpu_context();
  LibRun<T> run(ctx, raw, prec, tight_options(prec));
  ASSERT_TRUE(run.summary.converged()) << run.summary.full_report();
  const DenseProblem dp = raw.dense<T>();
  const DenseOt ref = dense_ot(dp, c.eps);
  const Eigen::MatrixXd H = dense_hessian_x(ref);
  const double rtol = derivative_rtol(prec, run.summary.marginal_error, cg_tolerance(prec),
                                      dp.max_cost(), c.eps);
  for (std::uint64_t seed : {1, 2}) {
    const std::vector<double> A = random_direction(c.n * c.d, seed);
    HvpSummary hs;
    const std::vector<double> out = run.hvp(A, tight_hvp(prec), &hs);
    EXPECT_TRUE(hs.converged) << hs.message;
    EXPECT_GT(hs.cg_iterations, 0);
    EXPECT_LE(hs.relative_residual, cg_tolerance(prec));
    EXPECT_TRUE(std::isfinite(hs.marginal_error));
    const std::vector<double> want = dense_matvec(H, A);
    const double err = rel_l2(out, want);
    EXPECT_LT(err, rtol) << "H A against the dense Hessian";
    // Closed form of the sum over points.
    const std::vector<double> s = point_sum(out, c.d), s_want = weighted_direction_sum(dp, A);
    EXPECT_LT(max_abs_diff(s, s_want), rtol * (inf_norm(s_want) + 2 * c.c * inf_norm(A)))
        << "sum_i (H A)_i = 2c sum_i a_i A_i";
    // The reference tells a 4c/eps vs (2c)^2/eps mix-up apart at this tolerance.
    if (c.c != 1.0) {
      const double mutant = rel_l2(dense_matvec(dense_hessian_x(ref, 2.0), A), want);
      EXPECT_GT(mutant, 10 * rtol) << "the test could not catch a 4c/eps mix-up";
      std::printf("%s: 4c/eps mutant differs by %.3g (tolerance %.3g)\n", c.name.c_str(), mutant,
                  rtol);
    }
    std::printf("%s %s: HVP rel err %.3g (bound %.3g), %lld CG iterations, residual %.3g\n",
                c.name.c_str(), std::is_same<T, double>::value ? "fp64" : "fp32", err, rtol,
                static_cast<long long>(hs.cg_iterations), hs.relative_residual);
  }
  if (c.zero_weight) {
    // The masked point's gradient is 0 whatever x: its row of H A is 0 (and moving it does
    // nothing to the others: H's column block of that point is 0).
    std::vector<double> A(static_cast<std::size_t>(c.n * c.d), 0.0);
    A[static_cast<std::size_t>(2 * c.d)] = 1;
    HvpSummary hs;
    const std::vector<double> out = run.hvp(A, tight_hvp(prec), &hs);
    EXPECT_LT(inf_norm(out), rtol * 2 * c.c) << "moving a masked point moves no gradient";
  }
}

TEST_P(Hvp, Fp64MatchesDenseHessian) { check_hvp_vs_dense<double>(GetParam()); }
TEST_P(Hvp, Fp32MatchesDenseHessian) { check_hvp_vs_dense<float>(GetParam()); }

// The library's own gradient at raw data r (fp64, solved to 1e-12).
std::vector<double> lib_gradient_x(const Context& ctx, const RawData& r) {
  LibRun<double> run(ctx, r, Precision::kFp64, tight_options(Precision::kFp64));
  EXPECT_TRUE(run.summary.converged()) << run.summary.brief_report();
  return run.gradient().x;
}
std::vector<double> lib_divergence_gradient_x(const Context& ctx, const RawData& r) {
  LibDivRun<double> run(ctx, r, Precision::kFp64, tight_options(Precision::kFp64));
  EXPECT_TRUE(run.summary.converged()) << run.summary.brief_report();
  return run.gradient().x;
}

RawData moved(const RawData& raw, const std::vector<double>& A, double t) {
  RawData r = raw;
  for (std::size_t q = 0; q < r.x.size(); ++q) r.x[q] += t * A[q];
  return r;
}

TEST_P(Hvp, Fp64MatchesFiniteDifferencesOfTheGradient) {
  const DerivCase& c = GetParam();
  const RawData raw = make_raw(c);
  Context ctx = cpu_context();
  LibRun<double> run(ctx, raw, Precision::kFp64, tight_options(Precision::kFp64));
  ASSERT_TRUE(run.summary.converged());
  const std::vector<double> A = random_direction(c.n * c.d, 3);
  HvpSummary hs;
  const std::vector<double> out = run.hvp(A, tight_hvp(Precision::kFp64), &hs);
  // The direction has |A|_inf ~ 2: the step is fd_step / |A|_inf in t.
  const double h = fd_step(raw.dense<double>(), c.eps) / inf_norm(A);
  const std::vector<double> fd =
      central_difference([&](double t) { return lib_gradient_x(ctx, moved(raw, A, t)); }, h);
  const double err = rel_l2(out, fd);
  EXPECT_LT(err, kFdRtol);
  std::printf("%s: HVP vs FD of the gradient: rel err %.3g\n", c.name.c_str(), err);
}

TEST_P(Hvp, Fp64IsSymmetric) {
  const DerivCase& c = GetParam();
  Context ctx = cpu_context();
  LibRun<double> run(ctx, make_raw(c), Precision::kFp64, tight_options(Precision::kFp64));
  const std::vector<double> u = random_direction(c.n * c.d, 4), v = random_direction(c.n * c.d, 5);
  HvpSummary s1, s2;
  const std::vector<double> Hu = run.hvp(u, tight_hvp(Precision::kFp64), &s1);
  const std::vector<double> Hv = run.hvp(v, tight_hvp(Precision::kFp64), &s2);
  const double scale = std::sqrt(dot(u, u) * dot(Hv, Hv)) + std::sqrt(dot(v, v) * dot(Hu, Hu));
  const double rtol = derivative_rtol(Precision::kFp64, run.summary.marginal_error,
                                      cg_tolerance(Precision::kFp64), run.data.dense().max_cost(),
                                      c.eps);
  EXPECT_LT(std::abs(dot(u, Hv) - dot(v, Hu)), rtol * scale)
      << "<u, H v> = " << dot(u, Hv) << ", <v, H u> = " << dot(v, Hu);
}

TEST_P(Hvp, Fp64TranslationCurvatureIs2c) {
  // OT(x + t 1v, y) = OT + 2ct <v, mean_a x - mean_b y> + c t^2 |v|^2: <1v, H 1v> = 2c |v|^2.
  const DerivCase& c = GetParam();
  Context ctx = cpu_context();
  LibRun<double> run(ctx, make_raw(c), Precision::kFp64, tight_options(Precision::kFp64));
  std::vector<double> A(static_cast<std::size_t>(c.n * c.d), 0.0);
  for (std::int64_t i = 0; i < c.n; ++i) A[static_cast<std::size_t>(i * c.d)] = 1;  // v = e_0
  HvpSummary hs;
  const std::vector<double> HA = run.hvp(A, tight_hvp(Precision::kFp64), &hs);
  EXPECT_NEAR(dot(A, HA), 2 * c.c,
              2 * c.c * derivative_rtol(Precision::kFp64, run.summary.marginal_error,
                                        cg_tolerance(Precision::kFp64),
                                        run.data.dense().max_cost(), c.eps));
}

TEST_P(Hvp, ZeroDirectionGivesZero) {
  const DerivCase& c = GetParam();
  Context ctx = cpu_context();
  LibRun<double> run(ctx, make_raw(c), Precision::kFp64, tight_options(Precision::kFp64));
  HvpSummary hs;
  const std::vector<double> out =
      run.hvp(std::vector<double>(static_cast<std::size_t>(c.n * c.d), 0.0), HvpOptions{}, &hs);
  EXPECT_TRUE(hs.converged) << hs.message;
  EXPECT_EQ(inf_norm(out), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Cases, Hvp, ::testing::ValuesIn(kCases), case_name);

// ---------------------------------------------------------------------------------------------
// The divergence HVP.

class DivergenceHvp : public ::testing::TestWithParam<DerivCase> {};

template <class T>
void check_divergence_hvp_vs_dense(const DerivCase& c) {
  const RawData raw = make_raw(c);
  const Precision prec = default_precision<T>();
  Context ctx = cpu_context();
  LibDivRun<T> run(ctx, raw, prec, tight_options(prec));
  ASSERT_TRUE(run.summary.converged()) << run.summary.full_report();
  const DenseProblem dp = raw.dense<T>();
  const DenseDivergence ref = dense_divergence(dp, c.eps);
  const Eigen::MatrixXd H = dense_divergence_hessian(ref);
  const double marginal = std::max({run.summary.xy.marginal_error, run.summary.xx.marginal_error,
                                    run.summary.yy.marginal_error});
  // Two HVPs are combined (the self-term's at (A, A)): twice the bound of one, relative to the
  // larger of the two parts (S's Hessian can be much smaller than each).
  const double rtol = 2 * derivative_rtol(prec, marginal, cg_tolerance(prec), dp.max_cost(), c.eps);
  const std::vector<double> A = random_direction(c.n * c.d, 6);
  HvpSummary hs;
  const std::vector<double> out = run.hvp(A, tight_hvp(prec), &hs);
  EXPECT_TRUE(hs.converged) << hs.message;
  const std::vector<double> want = dense_matvec(H, A);
  const std::vector<double> part = dense_matvec(dense_hessian_x(ref.xy), A);
  const double scale = std::max(std::sqrt(dot(want, want)), std::sqrt(dot(part, part)));
  double err2 = 0;
  for (std::size_t q = 0; q < want.size(); ++q) err2 += (out[q] - want[q]) * (out[q] - want[q]);
  const double err = std::sqrt(err2) / scale;
  EXPECT_LT(err, rtol) << "H_S A against the dense divergence Hessian";
  // The x-block alone of OT(x, x) gives a visibly different answer: the check above catches it.
  const Eigen::MatrixXd wrong = dense_hessian_x(ref.xy) - 0.5 * dense_hessian_x(ref.xx);
  const std::vector<double> w = dense_matvec(wrong, A);
  double werr2 = 0;
  for (std::size_t q = 0; q < want.size(); ++q) werr2 += (w[q] - want[q]) * (w[q] - want[q]);
  const double werr = std::sqrt(werr2) / scale;
  // fp64 resolves it by orders of magnitude; the fp32 bound (a few % here) still excludes it.
  EXPECT_GT(werr, (std::is_same<T, double>::value ? 10 : 1) * rtol)
      << "the reference cannot tell the x-block mistake";
  const std::vector<double> s = point_sum(out, c.d), s_want = weighted_direction_sum(dp, A);
  EXPECT_LT(max_abs_diff(s, s_want), rtol * (inf_norm(s_want) + 2 * c.c * inf_norm(A)));
  std::printf("%s %s: divergence HVP rel err %.3g (bound %.3g; x-block-only mistake: %.3g)\n",
              c.name.c_str(), std::is_same<T, double>::value ? "fp64" : "fp32", err, rtol, werr);
}

TEST_P(DivergenceHvp, Fp64MatchesDenseHessian) { check_divergence_hvp_vs_dense<double>(GetParam()); }
TEST_P(DivergenceHvp, Fp32MatchesDenseHessian) { check_divergence_hvp_vs_dense<float>(GetParam()); }

TEST_P(DivergenceHvp, Fp64MatchesFiniteDifferencesOfTheGradient) {
  const DerivCase& c = GetParam();
  const RawData raw = make_raw(c);
  Context ctx = cpu_context();
  LibDivRun<double> run(ctx, raw, Precision::kFp64, tight_options(Precision::kFp64));
  ASSERT_TRUE(run.summary.converged());
  const std::vector<double> A = random_direction(c.n * c.d, 7);
  HvpSummary hs;
  const std::vector<double> out = run.hvp(A, tight_hvp(Precision::kFp64), &hs);
  const double h = fd_step(raw.dense<double>(), c.eps) / inf_norm(A);
  const std::vector<double> fd = central_difference(
      [&](double t) { return lib_divergence_gradient_x(ctx, moved(raw, A, t)); }, h);
  const double err = rel_l2(out, fd);
  EXPECT_LT(err, kFdRtol);
  std::printf("%s: divergence HVP vs FD of the divergence gradient: rel err %.3g\n",
              c.name.c_str(), err);
}

INSTANTIATE_TEST_SUITE_P(Cases, DivergenceHvp, ::testing::ValuesIn(kCases), case_name);

// ---------------------------------------------------------------------------------------------
// The inverse HVP.

struct Spectrum {
  Eigen::MatrixXd H;
  Eigen::VectorXd values;
  Eigen::MatrixXd vectors;
};
Spectrum spectrum(const RawData& raw) {
  Spectrum s;
  s.H = dense_hessian_x(dense_ot(raw.dense<double>(), raw.eps));
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(s.H);
  s.values = es.eigenvalues();
  s.vectors = es.eigenvectors();
  return s;
}

TEST(InverseHvp, Fp64SolvesAPositiveDefiniteSystem) {
  const RawData raw = pd_case();
  const Spectrum sp = spectrum(raw);
  ASSERT_GT(sp.values.minCoeff(), 0.0) << "the case is not positive definite";
  const double kappa = sp.values.maxCoeff() / sp.values.minCoeff();
  Context ctx = cpu_context();
  LibRun<double> run(ctx, raw, Precision::kFp64, tight_options(Precision::kFp64));
  ASSERT_TRUE(run.summary.converged());
  const std::int64_t n = run.n(), d = run.d();
  const std::vector<double> g = random_direction(n * d, 8);
  std::vector<double> s(static_cast<std::size_t>(n * d), 0.0);
  InverseHvpOptions o;
  o.tolerance = 1e-9;
  o.hvp = tight_hvp(Precision::kFp64);
  const InverseHvpSummary is = run.solver->inverse_hvp(
      run.pot, host_matrix<const double>(g.data(), n, d), host_matrix(s.data(), n, d), o);
  EXPECT_TRUE(is.converged()) << is.message;
  EXPECT_EQ(is.termination, InverseHvpTermination::kConverged);
  EXPECT_GT(is.iterations, 0);
  EXPECT_GE(is.inner_iterations, is.iterations);
  EXPECT_LE(is.relative_residual, o.tolerance);
  EXPECT_GT(is.curvature, 0.0);
  EXPECT_GE(is.curvature, sp.values.minCoeff() * (1 - 1e-6));  // a Rayleigh quotient
  const double rtol = derivative_rtol(Precision::kFp64, run.summary.marginal_error,
                                      cg_tolerance(Precision::kFp64), raw.dense<double>().max_cost(),
                                      raw.eps);
  // H s = g with the dense H: the library's H differs by rtol, amplified by kappa.
  EXPECT_LT(rel_l2(dense_matvec(sp.H, s), g), 10 * o.tolerance + rtol * kappa);
  const Eigen::VectorXd want = sp.H.ldlt().solve(Eigen::Map<const Eigen::VectorXd>(g.data(), n * d));
  EXPECT_LT(rel_l2(s, std::vector<double>(want.data(), want.data() + want.size())),
            kappa * (10 * o.tolerance + rtol * kappa));
  std::printf("PD case: kappa %.3g, %lld iterations, |Hs - g|/|g| (dense H) %.3g\n", kappa,
              static_cast<long long>(is.iterations), rel_l2(dense_matvec(sp.H, s), g));
}

TEST(InverseHvp, Fp64ReportsNegativeCurvature) {
  const RawData raw = indefinite_case();
  const Spectrum sp = spectrum(raw);
  const double lmin = sp.values.minCoeff(), lmax = sp.values.maxCoeff();
  ASSERT_LT(lmin, -0.01 * lmax) << "the case is not indefinite";
  Context ctx = cpu_context();
  LibRun<double> run(ctx, raw, Precision::kFp64, tight_options(Precision::kFp64));
  ASSERT_TRUE(run.summary.converged());
  const std::int64_t n = run.n(), d = run.d();
  // g along the most negative eigenvector: the first CG direction has negative curvature.
  const std::vector<double> g(sp.vectors.col(0).data(), sp.vectors.col(0).data() + n * d);
  std::vector<double> s(static_cast<std::size_t>(n * d), 0.0);
  InverseHvpOptions o;
  o.hvp = tight_hvp(Precision::kFp64);
  const InverseHvpSummary is = run.solver->inverse_hvp(
      run.pot, host_matrix<const double>(g.data(), n, d), host_matrix(s.data(), n, d), o);
  EXPECT_FALSE(is.converged());
  EXPECT_EQ(is.termination, InverseHvpTermination::kNegativeCurvature) << is.message;
  EXPECT_FALSE(is.message.empty());
  EXPECT_NE(is.message, "not run");
  EXPECT_LT(is.curvature, 0.0);
  // A Rayleigh quotient of H: never below its smallest eigenvalue (up to the HVP's accuracy).
  EXPECT_GE(is.curvature, lmin - 1e-6 * std::abs(lmax));
  for (double e : s) EXPECT_TRUE(std::isfinite(e));
  std::printf("indefinite case: eigenvalues [%.3g, %.3g], reported curvature %.6g\n", lmin, lmax,
              is.curvature);

  // A random right-hand side: either solved (check H s = g) or negative curvature reported.
  const std::vector<double> g2 = random_direction(n * d, 9);
  std::vector<double> s2(static_cast<std::size_t>(n * d), 0.0);
  const InverseHvpSummary is2 = run.solver->inverse_hvp(
      run.pot, host_matrix<const double>(g2.data(), n, d), host_matrix(s2.data(), n, d), o);
  if (is2.converged()) {
    EXPECT_LT(rel_l2(dense_matvec(sp.H, s2), g2), 1e-4);
  } else {
    EXPECT_EQ(is2.termination, InverseHvpTermination::kNegativeCurvature) << is2.message;
    EXPECT_LT(is2.curvature, 0.0);
    EXPECT_GE(is2.curvature, lmin - 1e-6 * std::abs(lmax));
  }
}

TEST(InverseHvp, Fp64IterationBudget) {
  const RawData raw = pd_case();
  Context ctx = cpu_context();
  LibRun<double> run(ctx, raw, Precision::kFp64, tight_options(Precision::kFp64));
  const std::int64_t n = run.n(), d = run.d();
  const std::vector<double> g = random_direction(n * d, 10);
  std::vector<double> s(static_cast<std::size_t>(n * d), 0.0);
  InverseHvpOptions o;
  o.tolerance = 1e-12;
  o.max_iterations = 1;
  const InverseHvpSummary is = run.solver->inverse_hvp(
      run.pot, host_matrix<const double>(g.data(), n, d), host_matrix(s.data(), n, d), o);
  EXPECT_EQ(is.termination, InverseHvpTermination::kMaxIterations) << is.message;
  EXPECT_EQ(is.iterations, 1);
  EXPECT_FALSE(is.message.empty());
  EXPECT_NE(is.message, "not run");
  EXPECT_GT(is.relative_residual, o.tolerance);
}

// ---------------------------------------------------------------------------------------------
// CG budget of the inner solve.

TEST(HvpBudget, OneIterationDoesNotConverge) {
  const DerivCase c{"budget", 12, 10, 2, 0.1, 1.0, true};
  Context ctx = cpu_context();
  LibRun<double> run(ctx, make_raw(c), Precision::kFp64, tight_options(Precision::kFp64));
  HvpOptions o;
  o.tolerance = 1e-12;
  o.max_iterations = 1;
  o.check_every = 1;
  HvpSummary hs;
  run.hvp(random_direction(c.n * c.d, 11), o, &hs);
  EXPECT_FALSE(hs.converged);
  EXPECT_FALSE(hs.message.empty());
  EXPECT_NE(hs.message, "not run");
  EXPECT_LE(hs.cg_iterations, 1);
  EXPECT_GT(hs.relative_residual, o.tolerance);

  LibDivRun<double> drun(ctx, make_raw(c), Precision::kFp64, tight_options(Precision::kFp64));
  HvpSummary ds;
  drun.hvp(random_direction(c.n * c.d, 12), o, &ds);
  EXPECT_FALSE(ds.converged);
  EXPECT_FALSE(ds.message.empty());
  EXPECT_NE(ds.message, "not run");
}

}  // namespace
}  // namespace kantor::testing
