// The derivatives on the CUDA engine (fp32, tf32) against the CPU engine in fp64 on the same
// (float-rounded) inputs: gradients, HVP, divergence gradient and HVP, inverse HVP. Skips when
// no GPU is visible (or in a CPU-only build). Tolerances: derivative_cases.hpp, from the
// precision's pass accuracy (tf32: 3e-4, the coordinates' 11 significant bits), the stopping
// tolerance and the conditioning 1 + max_cost / eps.
#include <gtest/gtest.h>

#include <Eigen/Eigenvalues>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "derivatives/derivative_cases.hpp"
#include "support/gpu.hpp"

namespace kantor::testing {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible (or a CPU-only build)"

struct CudaCase {
  std::string name;
  Precision precision;
  DerivCase c;
};
std::ostream& operator<<(std::ostream& os, const CudaCase& c) { return os << c.name; }

// The raw data rounded to float: what both engines see.
RawData float_rounded(RawData r) {
  for (auto* v : {&r.x, &r.y, &r.a, &r.b})
    for (double& e : *v) e = double(float(e));
  return r;
}

Context cuda_context() {
  ContextOptions o;
  o.backend = Backend::kCuda;
  return Context(o);
}

// The engine of `gpu` (any backend) in precision cc.precision against the CPU engine in fp64.
void compare_with_cpu_fp64(Context& gpu, const CudaCase& cc) {
  const DerivCase& c = cc.c;
  const Precision prec = cc.precision;
  const RawData raw = float_rounded(make_raw(c));
  Context cpu = cpu_context();

  LibRun<double> ref(cpu, raw, Precision::kFp64, tight_options(Precision::kFp64));
  ASSERT_TRUE(ref.summary.converged()) << ref.summary.full_report();
  LibRun<float> run(gpu, raw, prec, tight_options(prec));
  ASSERT_TRUE(run.summary.converged()) << run.summary.full_report();
  const DenseProblem dp = raw.dense<double>();
  const double mc = dp.max_cost();
  const double marginal = run.summary.marginal_error + ref.summary.marginal_error;

  // Gradients.
  const auto gr = ref.gradient();
  const auto gg = run.gradient();
  EXPECT_NEAR(gg.summary.value, gr.summary.value,
              10 * marginal * (1 + mc) + pass_accuracy(prec) * (1 + mc / c.eps) * (1 + mc));
  const double atol_x = position_gradient_atol(prec, marginal, dp, c.eps);
  EXPECT_TRUE(all_close(gg.x, gr.x, atol_x)) << "dOT/dx";
  EXPECT_TRUE(all_close(gg.y, gr.y, atol_x)) << "dOT/dy";
  EXPECT_TRUE(all_close(gg.a, gr.a, weight_gradient_atol(prec, marginal, raw_total(raw.a, c.n), mc, c.eps)))
      << "dOT/da";
  EXPECT_TRUE(all_close(gg.b, gr.b, weight_gradient_atol(prec, marginal, raw_total(raw.b, c.m), mc, c.eps)))
      << "dOT/db";

  // HVP.
  const double rtol = derivative_rtol(prec, marginal, cg_tolerance(prec), mc, c.eps);
  const std::vector<double> A = random_direction(c.n * c.d, 21);
  HvpSummary hr, hg;
  const std::vector<double> want = ref.hvp(A, tight_hvp(Precision::kFp64), &hr);
  const std::vector<double> got = run.hvp(A, tight_hvp(prec), &hg);
  ASSERT_TRUE(hr.converged) << hr.message;
  EXPECT_TRUE(hg.converged) << hg.message;
  EXPECT_LT(rel_l2(got, want), rtol) << "H A";
  std::printf("%s: gradient x err %.3g (bound %.3g), HVP rel err %.3g (bound %.3g), %lld CG its\n",
              cc.name.c_str(), max_abs_diff(gg.x, gr.x), atol_x, rel_l2(got, want), rtol,
              static_cast<long long>(hg.cg_iterations));

  // Divergence.
  LibDivRun<double> dref(cpu, raw, Precision::kFp64, tight_options(Precision::kFp64));
  LibDivRun<float> drun(gpu, raw, prec, tight_options(prec));
  ASSERT_TRUE(dref.summary.converged());
  ASSERT_TRUE(drun.summary.converged()) << drun.summary.full_report();
  const double dmarg = std::max({drun.summary.xy.marginal_error, drun.summary.xx.marginal_error,
                                 drun.summary.yy.marginal_error}) +
                       std::max({dref.summary.xy.marginal_error, dref.summary.xx.marginal_error,
                                 dref.summary.yy.marginal_error});
  const auto dgr = dref.gradient();
  const auto dgg = drun.gradient();
  EXPECT_TRUE(all_close(dgg.x, dgr.x, 3 * position_gradient_atol(prec, dmarg, dp, c.eps)))
      << "dS/dx";
  EXPECT_TRUE(all_close(dgg.y, dgr.y, 3 * position_gradient_atol(prec, dmarg, dp, c.eps)))
      << "dS/dy";
  HvpSummary dhr, dhg;
  const std::vector<double> dwant = dref.hvp(A, tight_hvp(Precision::kFp64), &dhr);
  const std::vector<double> dgot = drun.hvp(A, tight_hvp(prec), &dhg);
  EXPECT_TRUE(dhg.converged) << dhg.message;
  // Relative to the (x, y) part's size (S's Hessian can be much smaller than each part).
  const std::vector<double> part = want;
  double e2 = 0, p2 = 0;
  for (std::size_t q = 0; q < dwant.size(); ++q) {
    e2 += (dgot[q] - dwant[q]) * (dgot[q] - dwant[q]);
    p2 += std::max(dwant[q] * dwant[q], part[q] * part[q]);
  }
  const double drtol = 2 * derivative_rtol(prec, dmarg, cg_tolerance(prec), mc, c.eps);
  EXPECT_LT(std::sqrt(e2 / p2), drtol) << "H_S A";
}

class CudaDerivatives : public ::testing::TestWithParam<CudaCase> {};

TEST_P(CudaDerivatives, MatchCpuFp64) {
  SKIP_WITHOUT_GPU();
  Context gpu = cuda_context();
  compare_with_cpu_fp64(gpu, GetParam());
}

// The same comparison on the CPU engine in fp32 (runs everywhere; it also exercises the
// comparison itself where no GPU is visible).
class EngineComparison : public ::testing::TestWithParam<CudaCase> {};

TEST_P(EngineComparison, CpuFp32MatchesCpuFp64) {
  if (GetParam().precision != Precision::kFp32) GTEST_SKIP() << "the CPU engine has no tf32";
  Context cpu = cpu_context();
  compare_with_cpu_fp64(cpu, GetParam());
}

TEST(CudaInverseHvp, MatchesCpuFp64) {
  SKIP_WITHOUT_GPU();
  // A positive definite case (checked with the dense Hessian).
  RawData raw = pd_case();
  raw = float_rounded(raw);
  const Eigen::MatrixXd H = dense_hessian_x(dense_ot(raw.dense<double>(), raw.eps));
  const Eigen::VectorXd ev = Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(H).eigenvalues();
  ASSERT_GT(ev.minCoeff(), 0.0);
  Context gpu = cuda_context();
  LibRun<float> run(gpu, raw, Precision::kFp32, tight_options(Precision::kFp32));
  ASSERT_TRUE(run.summary.converged());
  const std::int64_t n = run.n(), d = run.d();
  const std::vector<double> g = random_direction(n * d, 22);
  const std::vector<float> gf(g.begin(), g.end());
  std::vector<float> s(static_cast<std::size_t>(n * d), 0.f);
  InverseHvpOptions o;
  o.tolerance = 1e-4;
  o.hvp = tight_hvp(Precision::kFp32);
  const InverseHvpSummary is = run.solver->inverse_hvp(
      run.pot, host_matrix<const float>(gf.data(), n, d), host_matrix(s.data(), n, d), o);
  EXPECT_TRUE(is.converged()) << is.message;
  const double kappa = ev.maxCoeff() / ev.minCoeff();
  const double rtol = derivative_rtol(Precision::kFp32, run.summary.marginal_error,
                                      cg_tolerance(Precision::kFp32),
                                      raw.dense<double>().max_cost(), raw.eps);
  EXPECT_LT(rel_l2(dense_matvec(H, to_double(s)), g), 10 * o.tolerance + rtol * kappa);
}

// Unit-cube clouds (c D^2 = 3c): the conditioning 1 + max_cost / eps stays ~10, so the fp32
// and tf32 bounds (derivative_cases.hpp) stay a few percent.
std::vector<CudaCase> cuda_cases() {
  std::vector<CudaCase> out;
  for (Precision p : {Precision::kFp32, Precision::kTf32}) {
    const std::string pn = p == Precision::kFp32 ? "fp32" : "tf32";
    out.push_back({pn + "_n40_m33_d3_c1", p, DerivCase{"", 40, 33, 3, 0.3, 1.0, true, false, true}});
    out.push_back({pn + "_n40_m33_d3_c05", p, DerivCase{"", 40, 33, 3, 0.2, 0.5, true, false, true}});
    out.push_back({pn + "_n300_m257_d3_c1", p, DerivCase{"", 300, 257, 3, 0.3, 1.0, true, false, true}});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaDerivatives, ::testing::ValuesIn(cuda_cases()),
                         [](const ::testing::TestParamInfo<CudaCase>& i) { return i.param.name; });
INSTANTIATE_TEST_SUITE_P(Cases, EngineComparison, ::testing::ValuesIn(cuda_cases()),
                         [](const ::testing::TestParamInfo<CudaCase>& i) { return i.param.name; });

}  // namespace
}  // namespace kantor::testing
