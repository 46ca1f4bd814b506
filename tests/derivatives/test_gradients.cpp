// Gradients of OT_eps and of the debiased divergence (SinkhornSolver::gradient,
// divergence_gradient) on the CPU engine: against the float64 dense reference
// (support/dense_derivatives.hpp) in fp64 and fp32, and against fourth-order central finite
// differences of the fp64 values solved to 1e-12 at every moved point (solve_sinkhorn,
// sinkhorn_divergence). Cases: c = 1 and 1/2, uniform and non-uniform weights, n != m, a zero
// weight.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "derivatives/derivative_cases.hpp"

namespace kantor::testing {
namespace {

const std::vector<DerivCase> kCases = {
    DerivCase{"n7_m5_d2_c1_uniform", 7, 5, 2, 0.3, 1.0, false},
    DerivCase{"n7_m5_d2_c1_weights", 7, 5, 2, 0.3, 1.0, true},
    DerivCase{"n6_m9_d3_c05_weights", 6, 9, 3, 0.4, 0.5, true},
    DerivCase{"n8_m6_d2_c1_zero_weight", 8, 6, 2, 0.3, 1.0, true, true},
    DerivCase{"n9_m7_d2_c05_small_eps_unit", 9, 7, 2, 0.02, 0.5, true, false, true, 1.0},
};

class Gradient : public ::testing::TestWithParam<DerivCase> {};

template <class T>
void check_gradient_vs_reference(const DerivCase& c) {
  const RawData raw = make_raw(c);
  const Precision prec = default_precision<T>();
  Context ctx = cpu_context();
  LibRun<T> run(ctx, raw, prec, tight_options(prec));
  ASSERT_TRUE(run.summary.converged()) << run.summary.full_report();
  const auto g = run.gradient();

  const DenseProblem dp = raw.dense<T>();
  const DenseOt ref = dense_ot(dp, c.eps);
  const double mc = dp.max_cost();
  const double marginal = run.summary.marginal_error;
  EXPECT_TRUE(std::isfinite(g.summary.marginal_error));
  EXPECT_LE(g.summary.marginal_error, 10 * solve_tolerance(prec)) << "certificate of the inputs";
  EXPECT_EQ(g.summary.epsilon, c.eps);
  // The value: <a,f> + <b,g> (value_tol of the solver tests).
  EXPECT_NEAR(g.summary.value, ref.value,
              10 * marginal * (1 + mc) + plan_rtol<T>(mc, c.eps) * (1 + mc));

  const double atol_x = position_gradient_atol(prec, marginal, dp, c.eps);
  const double atol_w = weight_gradient_atol(prec, marginal, raw_total(raw.a, c.n), mc, c.eps);
  const double atol_wb = weight_gradient_atol(prec, marginal, raw_total(raw.b, c.m), mc, c.eps);
  const std::vector<double> rx = dense_grad_x(ref), ry = dense_grad_y(ref);
  const std::vector<double> ra = dense_grad_a(ref, raw_total(raw.a, c.n));
  const std::vector<double> rb = dense_grad_b(ref, raw_total(raw.b, c.m));
  EXPECT_TRUE(all_close(g.x, rx, atol_x)) << "dOT/dx";
  EXPECT_TRUE(all_close(g.y, ry, atol_x)) << "dOT/dy";
  EXPECT_TRUE(all_close(g.a, ra, atol_w)) << "dOT/da";
  EXPECT_TRUE(all_close(g.b, rb, atol_wb)) << "dOT/db";
  // The bounds must be well below the gradients themselves (else the comparison is empty).
  EXPECT_LT(atol_x, 0.1 * inf_norm(rx)) << "tolerance out of scale";
  EXPECT_LT(atol_w, 0.1 * inf_norm(ra)) << "tolerance out of scale";
  std::printf("%s %s: |dx err| %.3g (bound %.3g, |g| %.3g), |da err| %.3g (bound %.3g, |g| %.3g)\n",
              c.name.c_str(), std::is_same<T, double>::value ? "fp64" : "fp32",
              max_abs_diff(g.x, rx), atol_x, inf_norm(rx), max_abs_diff(g.a, ra), atol_w,
              inf_norm(ra));
  if (c.zero_weight) {
    for (std::int64_t k = 0; k < c.d; ++k)
      EXPECT_EQ(g.x[static_cast<std::size_t>(2 * c.d + k)], 0.0) << "a masked point's position gradient";
  }
}

TEST_P(Gradient, Fp64MatchesDenseReference) { check_gradient_vs_reference<double>(GetParam()); }
TEST_P(Gradient, Fp32MatchesDenseReference) { check_gradient_vs_reference<float>(GetParam()); }

// Value of OT_eps at raw data r (fp64, solved to 1e-12 from a cold start).
double ot_value(const Context& ctx, const RawData& r) {
  const PointData<double> data = r.data<double>();
  const SinkhornSummary s = solve_sinkhorn(ctx, data.problem(), tight_options(Precision::kFp64));
  EXPECT_TRUE(s.converged()) << s.brief_report();
  return s.dual_cost;
}
double divergence_value(const Context& ctx, const RawData& r) {
  const PointData<double> data = r.data<double>();
  const DivergenceSummary s =
      sinkhorn_divergence(ctx, data.problem(), tight_options(Precision::kFp64));
  EXPECT_TRUE(s.converged()) << s.brief_report();
  return s.divergence_raw;
}

// Raw weights can only move together with the other side's total (the library refuses masses
// that differ by more than 1e-6 relative): moving A_i by t, B is rescaled by (|A| + t) / |A|,
// which leaves b / |b| and hence the value unchanged apart from the move of A_i.
RawData move_weight(const RawData& raw, int side, std::size_t q, double t) {
  RawData r = raw;
  std::vector<double>& w = side == 0 ? r.a : r.b;
  std::vector<double>& o = side == 0 ? r.b : r.a;
  double total = 0;
  for (double e : w) total += e;
  w[q] += t;
  for (double& e : o) e *= (total + t) / total;
  return r;
}

struct FdGradient {
  std::vector<double> x, y, a, b;
};

FdGradient finite_difference_gradient(const Context& ctx, const RawData& raw, double h,
                                      const std::function<double(const Context&, const RawData&)>& value) {
  FdGradient fd;
  fd.x.resize(raw.x.size());
  fd.y.resize(raw.y.size());
  for (std::size_t q = 0; q < raw.x.size(); ++q)
    fd.x[q] = central_difference([&](double t) { RawData r = raw; r.x[q] += t; return value(ctx, r); }, h);
  for (std::size_t q = 0; q < raw.y.size(); ++q)
    fd.y[q] = central_difference([&](double t) { RawData r = raw; r.y[q] += t; return value(ctx, r); }, h);
  for (int side = 0; side < 2; ++side) {
    const std::vector<double>& w = side == 0 ? raw.a : raw.b;
    std::vector<double>& out = side == 0 ? fd.a : fd.b;
    out.resize(w.size());
    double total = 0;
    for (double e : w) total += e;
    const double hw = 1e-4 * total;
    for (std::size_t q = 0; q < w.size(); ++q) {
      auto F = [&](double t) { return value(ctx, move_weight(raw, side, q, t)); };
      // A zero weight cannot go negative: one-sided second-order difference.
      out[q] = w[q] > 0 ? central_difference(F, hw) : (-3 * F(0) + 4 * F(hw) - F(2 * hw)) / (2 * hw);
    }
  }
  return fd;
}

TEST_P(Gradient, Fp64MatchesFiniteDifferences) {
  const DerivCase& c = GetParam();
  const RawData raw = make_raw(c);
  Context ctx = cpu_context();
  LibRun<double> run(ctx, raw, Precision::kFp64, tight_options(Precision::kFp64));
  ASSERT_TRUE(run.summary.converged()) << run.summary.full_report();
  const auto g = run.gradient();
  const double h = fd_step(raw.dense<double>(), c.eps);
  const FdGradient fd = finite_difference_gradient(ctx, raw, h, ot_value);
  EXPECT_LT(max_rel_diff(g.x, fd.x), kFdRtol) << "dOT/dx";
  EXPECT_LT(max_rel_diff(g.y, fd.y), kFdRtol) << "dOT/dy";
  if (c.random_weights) {
    EXPECT_LT(max_rel_diff(g.a, fd.a), kFdRtol) << "dOT/da";
    EXPECT_LT(max_rel_diff(g.b, fd.b), kFdRtol) << "dOT/db";
  }
  std::printf("%s: FD rel err x %.3g y %.3g a %.3g b %.3g\n", c.name.c_str(),
              max_rel_diff(g.x, fd.x), max_rel_diff(g.y, fd.y),
              c.random_weights ? max_rel_diff(g.a, fd.a) : 0.0,
              c.random_weights ? max_rel_diff(g.b, fd.b) : 0.0);
}

TEST_P(Gradient, UniformWeightGradientIsTheCenteredPotential) {
  // Empty weights: |a| = 1 by convention, so dOT/da = f - <a,f> with a = 1/n: it sums to 0.
  const DerivCase& c = GetParam();
  if (c.random_weights) GTEST_SKIP() << "uniform-weight case only";
  Context ctx = cpu_context();
  LibRun<double> run(ctx, make_raw(c), Precision::kFp64, tight_options(Precision::kFp64));
  const auto g = run.gradient();
  double sa = 0, sb = 0;
  for (double e : g.a) sa += e;
  for (double e : g.b) sb += e;
  EXPECT_NEAR(sa, 0.0, 1e-12 * c.n);
  EXPECT_NEAR(sb, 0.0, 1e-12 * c.m);
}

TEST_P(Gradient, CertifiesUnconvergedPotentials) {
  // Potentials of 3 fixed-eps iterations: the summaries' marginal_error is the certificate of
  // exactly those potentials (an upper bound of their true L1 marginal error, measured here by
  // the dense reference, with rounding slack only).
  const DerivCase& c = GetParam();
  const RawData raw = make_raw(c);
  Context ctx = cpu_context();
  SinkhornOptions o;
  o.anneal = false;
  o.max_iterations = 3;
  LibRun<double> run(ctx, raw, Precision::kFp64, o);
  ASSERT_FALSE(run.summary.converged());
  const std::vector<double> f(run.pot.f.data(), run.pot.f.data() + c.n);
  const std::vector<double> g(run.pot.g.data(), run.pot.g.data() + c.m);
  const double truth = dense_marginal_error(raw.dense<double>(), c.eps, f, g);
  ASSERT_GT(truth, 1e-6);
  const auto gr = run.gradient();
  EXPECT_GE(gr.summary.marginal_error, truth * (1 - 1e-9));
  EXPECT_LE(gr.summary.marginal_error, truth * (1 + 1e-6) + 1e-12);
  HvpSummary hs;
  run.hvp(random_direction(c.n * c.d, 13), HvpOptions{}, &hs);
  EXPECT_GE(hs.marginal_error, truth * (1 - 1e-9));
  EXPECT_LE(hs.marginal_error, truth * (1 + 1e-6) + 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Cases, Gradient, ::testing::ValuesIn(kCases), case_name);

// ---------------------------------------------------------------------------------------------
// The debiased divergence.

class DivergenceGradient : public ::testing::TestWithParam<DerivCase> {};

template <class T>
void check_divergence_gradient_vs_reference(const DerivCase& c) {
  const RawData raw = make_raw(c);
  const Precision prec = default_precision<T>();
  Context ctx = cpu_context();
  LibDivRun<T> run(ctx, raw, prec, tight_options(prec));
  ASSERT_TRUE(run.summary.converged()) << run.summary.full_report();
  const auto g = run.gradient();
  const DenseProblem dp = raw.dense<T>();
  const DenseDivergence ref = dense_divergence(dp, c.eps);
  const double mc = dp.max_cost();
  const double marginal = std::max({run.summary.xy.marginal_error, run.summary.xx.marginal_error,
                                    run.summary.yy.marginal_error});
  EXPECT_LE(g.summary.marginal_error, 10 * solve_tolerance(prec));
  EXPECT_NEAR(g.summary.value, ref.value,
              3 * (10 * marginal * (1 + mc) + plan_rtol<T>(mc, c.eps) * (1 + mc)));
  // Three plans enter (the self-term with weight 2 x 1/2): three times the OT bounds.
  const double atol_x = 3 * position_gradient_atol(prec, marginal, dp, c.eps);
  const double atol_a = 3 * weight_gradient_atol(prec, marginal, raw_total(raw.a, c.n), mc, c.eps);
  const double atol_b = 3 * weight_gradient_atol(prec, marginal, raw_total(raw.b, c.m), mc, c.eps);
  EXPECT_TRUE(all_close(g.x, dense_divergence_grad_x(ref), atol_x)) << "dS/dx";
  EXPECT_TRUE(all_close(g.y, dense_divergence_grad_y(ref), atol_x)) << "dS/dy";
  EXPECT_TRUE(all_close(g.a, dense_divergence_grad_a(ref, raw_total(raw.a, c.n)), atol_a)) << "dS/da";
  EXPECT_TRUE(all_close(g.b, dense_divergence_grad_b(ref, raw_total(raw.b, c.m)), atol_b)) << "dS/db";
  // The x-part of OT(x, x) alone (half the self-term) is wrong by a visible amount: the check
  // above would catch it.
  std::vector<double> wrong = dense_grad_x(ref.xy);
  const std::vector<double> half_self = dense_grad_x(ref.xx);
  for (std::size_t k = 0; k < wrong.size(); ++k) wrong[k] -= 0.5 * half_self[k];
  double worst = 0;
  for (std::size_t k = 0; k < wrong.size(); ++k)
    worst = std::max(worst, std::abs(wrong[k] - dense_divergence_grad_x(ref)[k]));
  // (In fp32 the bound is ~1% of the gradient: the mistake, half the self-term's gradient, is
  // small where the self-plan is nearly diagonal, so only fp64 is asked to resolve it.)
  if (std::is_same<T, double>::value)
    EXPECT_GT(worst, 100 * atol_x) << "the reference cannot tell the mistake";
}

TEST_P(DivergenceGradient, Fp64MatchesDenseReference) {
  check_divergence_gradient_vs_reference<double>(GetParam());
}
TEST_P(DivergenceGradient, Fp32MatchesDenseReference) {
  check_divergence_gradient_vs_reference<float>(GetParam());
}

TEST_P(DivergenceGradient, Fp64MatchesFiniteDifferences) {
  const DerivCase& c = GetParam();
  const RawData raw = make_raw(c);
  Context ctx = cpu_context();
  LibDivRun<double> run(ctx, raw, Precision::kFp64, tight_options(Precision::kFp64));
  ASSERT_TRUE(run.summary.converged()) << run.summary.full_report();
  const auto g = run.gradient();
  const DenseProblem dp = raw.dense<double>();
  const double h = fd_step(dp, c.eps);
  const FdGradient fd = finite_difference_gradient(ctx, raw, h, divergence_value);
  // Near x = y the divergence gradient is small compared with each term's: relative to the
  // OT gradient's scale 2c D / n (a thousandth of it as the floor).
  const double floor = 1e-3 * 2 * c.c * dense_diameter(dp) / double(c.n);
  EXPECT_LT(max_rel_diff(g.x, fd.x, floor), kFdRtol) << "dS/dx";
  EXPECT_LT(max_rel_diff(g.y, fd.y, floor), kFdRtol) << "dS/dy";
  if (c.random_weights) {
    EXPECT_LT(max_rel_diff(g.a, fd.a), kFdRtol) << "dS/da";
    EXPECT_LT(max_rel_diff(g.b, fd.b), kFdRtol) << "dS/db";
  }
  std::printf("%s: divergence FD rel err x %.3g y %.3g a %.3g b %.3g\n", c.name.c_str(),
              max_rel_diff(g.x, fd.x, floor), max_rel_diff(g.y, fd.y, floor),
              c.random_weights ? max_rel_diff(g.a, fd.a) : 0.0,
              c.random_weights ? max_rel_diff(g.b, fd.b) : 0.0);
}

INSTANTIATE_TEST_SUITE_P(Cases, DivergenceGradient, ::testing::ValuesIn(kCases), case_name);

// certify = false skips only the certificate: the same blocks, bit for bit, and a NaN
// marginal_error instead of the bound (which the default call reports).
TEST(GradientCertify, SkippingTheCertificateChangesNothingElse) {
  Context ctx = cpu_context();
  const RawData raw = make_raw(kCases[1]);
  LibRun<double> run(ctx, raw, Precision::kFp64, tight_options(Precision::kFp64));
  ASSERT_TRUE(run.summary.converged());
  const GradientBlocks with = run.gradient();
  const GradientBlocks without = gradient_blocks<double>(
      run.n(), run.m(), run.d(),
      [&](const GradientOutput<double>& out) { return run.solver->gradient(run.pot, out, false); });
  EXPECT_TRUE(std::isfinite(with.summary.marginal_error));
  EXPECT_TRUE(std::isnan(without.summary.marginal_error));
  EXPECT_EQ(with.x, without.x);
  EXPECT_EQ(with.y, without.y);
  EXPECT_EQ(with.a, without.a);
  EXPECT_EQ(with.b, without.b);
  EXPECT_EQ(with.summary.value, without.summary.value);
  LibDivRun<double> div(ctx, raw, Precision::kFp64, tight_options(Precision::kFp64));
  const GradientBlocks dwith = div.gradient();
  const GradientBlocks dwithout = gradient_blocks<double>(
      div.n(), div.m(), div.d(), [&](const GradientOutput<double>& out) {
        return div.solver->divergence_gradient(div.pot, out, false);
      });
  EXPECT_TRUE(std::isnan(dwithout.summary.marginal_error));
  EXPECT_EQ(dwith.x, dwithout.x);
  EXPECT_EQ(dwith.b, dwithout.b);
  HvpOptions o = tight_hvp(Precision::kFp64);
  HvpSummary hs1, hs2;
  const std::vector<double> A = random_direction(run.n() * run.d(), 5);
  const std::vector<double> h1 = run.hvp(A, o, &hs1);
  o.certify = false;
  const std::vector<double> h2 = run.hvp(A, o, &hs2);
  EXPECT_TRUE(std::isfinite(hs1.marginal_error));
  EXPECT_TRUE(std::isnan(hs2.marginal_error));
  EXPECT_EQ(h1, h2);
}

}  // namespace
}  // namespace kantor::testing
