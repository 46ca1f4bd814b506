// Self-tests of the float64 dense derivative references (tests/support/dense_derivatives.hpp),
// which use no library code: the dense gradients against finite differences of the dense value,
// the dense Hessians against finite differences of the dense gradients, closed forms along
// translations, symmetry, and the two classic mistakes the references must tell apart (the
// x-block alone of OT(x, x), and 4c/eps in place of (2c)^2/eps).
#include <gtest/gtest.h>

#include <Eigen/Eigenvalues>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "support/dense_derivatives.hpp"
#include "support/random_problems.hpp"

namespace kantor::testing {
namespace {

// Finite differences of values solved to 1e-14 (the dense reference) with the fourth-order
// stencil and the step of fd_step: truncation ~ (1/20)^4 relative, noise ~ 1e-14 / h.
constexpr double kDenseFdRtol = 1e-6;
// Symmetry of a Hessian made column by column from LU solves: rounding of the solves.
constexpr double kSymmetryRtol = 1e-10;

struct RefCase {
  std::string name;
  std::int64_t n, m, d;
  double eps, c;
  bool random_weights, zero_weight;
  double raw_mass;  // total of the raw weights (1 = already normalized)
};
std::ostream& operator<<(std::ostream& os, const RefCase& c) { return os << c.name; }

struct RawCase {
  std::vector<double> x, y, a, b;  // raw
  std::int64_t d;
  double c;
  DenseProblem dense() const { return make_dense_problem(x, y, d, a, b, c); }
};

RawCase make_raw(const RefCase& c) {
  Rng rng(1234 + std::uint64_t(c.n * 7 + c.m * 3 + c.d));
  RawCase r;
  r.d = c.d;
  r.c = c.c;
  r.x = gaussian_cloud(rng, c.n, c.d, 0.0, 1.0);
  r.y = gaussian_cloud(rng, c.m, c.d, 0.4, 0.8);
  if (c.random_weights) {
    r.a = random_weights(rng, c.n);
    r.b = random_weights(rng, c.m);
    if (c.zero_weight) r.a = with_zeros(r.a, 2, 100);
    double ta = 0, tb = 0;
    for (double& e : r.a) ta += e;
    for (double& e : r.b) tb += e;
    for (double& e : r.a) e *= c.raw_mass / ta;
    for (double& e : r.b) e *= c.raw_mass / tb;
  }
  return r;
}

double total(const std::vector<double>& w) {
  double s = 0;
  for (double e : w) s += e;
  return s;
}

class DenseReference : public ::testing::TestWithParam<RefCase> {};

TEST_P(DenseReference, GradientsMatchFiniteDifferencesOfTheValue) {
  const RefCase& c = GetParam();
  const RawCase raw = make_raw(c);
  const DenseProblem p = raw.dense();
  const DenseOt s = dense_ot(p, c.eps);
  const double h = fd_step(p, c.eps);
  auto value_at = [&](const RawCase& r) { return dense_ot(r.dense(), c.eps).value; };

  std::vector<double> fd_x(raw.x.size()), fd_y(raw.y.size());
  for (std::size_t q = 0; q < raw.x.size(); ++q)
    fd_x[q] = central_difference(
        [&](double t) { RawCase r = raw; r.x[q] += t; return value_at(r); }, h);
  for (std::size_t q = 0; q < raw.y.size(); ++q)
    fd_y[q] = central_difference(
        [&](double t) { RawCase r = raw; r.y[q] += t; return value_at(r); }, h);
  EXPECT_LT(max_rel_diff(dense_grad_x(s), fd_x), kDenseFdRtol);
  EXPECT_LT(max_rel_diff(dense_grad_y(s), fd_y), kDenseFdRtol);

  if (c.random_weights) {
    // Raw weights: the value depends on a / |a| only (make_dense_problem normalizes).
    const double hw = 1e-4 * c.raw_mass;
    std::vector<double> fd_a(raw.a.size()), fd_b(raw.b.size());
    for (std::size_t q = 0; q < raw.a.size(); ++q) {
      auto F = [&](double t) { RawCase r = raw; r.a[q] += t; return value_at(r); };
      // A zero weight cannot go negative: one-sided second-order difference there.
      fd_a[q] = raw.a[q] > 0 ? central_difference(F, hw)
                             : (-3 * F(0) + 4 * F(hw) - F(2 * hw)) / (2 * hw);
    }
    for (std::size_t q = 0; q < raw.b.size(); ++q)
      fd_b[q] = central_difference(
          [&](double t) { RawCase r = raw; r.b[q] += t; return value_at(r); }, hw);
    EXPECT_LT(max_rel_diff(dense_grad_a(s, total(raw.a)), fd_a), kDenseFdRtol);
    EXPECT_LT(max_rel_diff(dense_grad_b(s, total(raw.b)), fd_b), kDenseFdRtol);
  }
  if (c.zero_weight) {
    // A masked point does not move the value: its position gradient is exactly 0.
    for (std::int64_t k = 0; k < c.d; ++k) EXPECT_EQ(dense_grad_x(s)[static_cast<std::size_t>(2 * c.d + k)], 0.0);
  }
}

TEST_P(DenseReference, JointHessianMatchesFiniteDifferencesOfTheGradient) {
  const RefCase& c = GetParam();
  const RawCase raw = make_raw(c);
  const DenseProblem p = raw.dense();
  const DenseOt s = dense_ot(p, c.eps);
  const Eigen::MatrixXd H = dense_joint_hessian(s);
  const std::int64_t nd = c.n * c.d, V = (c.n + c.m) * c.d;
  ASSERT_EQ(H.rows(), V);
  EXPECT_LT((H - H.transpose()).norm(), kSymmetryRtol * H.norm()) << "not symmetric";

  const double h = fd_step(p, c.eps);
  auto grad_at = [&](const RawCase& r) {
    const DenseOt t = dense_ot(r.dense(), c.eps);
    std::vector<double> g = dense_grad_x(t);
    const std::vector<double> gy = dense_grad_y(t);
    g.insert(g.end(), gy.begin(), gy.end());
    return g;
  };
  double worst = 0;
  for (std::int64_t q = 0; q < V; ++q) {
    const std::vector<double> fd = central_difference(
        [&](double t) {
          RawCase r = raw;
          if (q < nd) r.x[static_cast<std::size_t>(q)] += t; else r.y[static_cast<std::size_t>(q - nd)] += t;
          return grad_at(r);
        },
        h);
    const std::vector<double> col(H.col(q).data(), H.col(q).data() + V);
    // Relative to the Hessian's largest entry (a column can be nearly 0).
    worst = std::max(worst, max_rel_diff(col, fd, H.cwiseAbs().maxCoeff()));
  }
  EXPECT_LT(worst, kDenseFdRtol);
}

TEST_P(DenseReference, TranslationClosedForms) {
  // OT(x + t 1v, y) = OT + 2ct <v, mean_a x - mean_b y> + c t^2 |v|^2 (the cross term is
  // separable and absorbed by the potentials): sum_i dOT/dx_i = 2c (mean_a x - mean_b y),
  // <1v, H_xx 1v> = 2c |v|^2, and a common translation of x and y leaves OT unchanged (the
  // joint Hessian annihilates (1v, 1v)).
  const RefCase& c = GetParam();
  const DenseProblem p = make_raw(c).dense();
  const DenseOt s = dense_ot(p, c.eps);
  const std::vector<double> gx = dense_grad_x(s);
  const Eigen::MatrixXd H = dense_joint_hessian(s);
  const std::int64_t nd = c.n * c.d;
  for (std::int64_t k = 0; k < c.d; ++k) {
    double sum = 0, mx = 0, my = 0;
    for (std::int64_t i = 0; i < c.n; ++i) {
      sum += gx[static_cast<std::size_t>(i * c.d + k)];
      mx += p.a[static_cast<std::size_t>(i)] * p.x[static_cast<std::size_t>(i * c.d + k)];
    }
    for (std::int64_t j = 0; j < c.m; ++j) my += p.b[static_cast<std::size_t>(j)] * p.y[static_cast<std::size_t>(j * c.d + k)];
    EXPECT_NEAR(sum, 2 * c.c * (mx - my), 1e-12);

    Eigen::VectorXd ux = Eigen::VectorXd::Zero(H.rows()), uxy = ux;
    for (std::int64_t i = 0; i < c.n; ++i) ux(i * c.d + k) = uxy(i * c.d + k) = 1;
    for (std::int64_t j = 0; j < c.m; ++j) uxy(nd + j * c.d + k) = 1;
    EXPECT_NEAR(ux.dot(H * ux), 2 * c.c, 1e-10);
    EXPECT_LT((H * uxy).norm(), 1e-10 * H.norm());
  }
}

TEST_P(DenseReference, SelfAndDivergenceHessiansMatchFiniteDifferences) {
  const RefCase& c = GetParam();
  const RawCase raw = make_raw(c);
  const DenseProblem p = raw.dense();
  const DenseDivergence s = dense_divergence(p, c.eps);
  const std::int64_t nd = c.n * c.d;
  const double h = fd_step(p, c.eps);
  // At small eps the self-problem of isolated points is degenerate (P nearly diagonal, OT(x, x)
  // flat: gradient ~1e-17): relative errors there are measured against a thousandth of the
  // natural scales, 2c D / n (gradient) and 2c / n (Hessian), not against ~0.
  const double grad_floor = 1e-3 * 2 * c.c * dense_diameter(p) / double(c.n);
  const double hess_floor = 1e-3 * 2 * c.c / double(c.n);

  // x -> OT(x, x): gradient and Hessian against finite differences of the self-problem solved
  // anew (dense_solve_self) at each moved x.
  auto self_at = [&](const RawCase& r) {
    return dense_ot(dense_self_problem(r.dense(), 0), c.eps);
  };
  const Eigen::MatrixXd Hs = dense_self_hessian(s.xx);
  EXPECT_LT((Hs - Hs.transpose()).norm(), kSymmetryRtol * Hs.norm());
  const Eigen::MatrixXd Hd = dense_divergence_hessian(s);
  std::vector<double> fd_self_value(static_cast<std::size_t>(nd)), fd_div_value(static_cast<std::size_t>(nd));
  double worst_self = 0, worst_div = 0;
  for (std::int64_t q = 0; q < nd; ++q) {
    fd_self_value[static_cast<std::size_t>(q)] = central_difference(
        [&](double t) { RawCase r = raw; r.x[static_cast<std::size_t>(q)] += t; return self_at(r).value; }, h);
    fd_div_value[static_cast<std::size_t>(q)] = central_difference(
        [&](double t) {
          RawCase r = raw;
          r.x[static_cast<std::size_t>(q)] += t;
          return dense_divergence(r.dense(), c.eps).value;
        },
        h);
    const std::vector<double> fd_self = central_difference(
        [&](double t) {
          RawCase r = raw;
          r.x[static_cast<std::size_t>(q)] += t;
          return dense_self_grad(self_at(r));
        },
        h);
    const std::vector<double> fd_div = central_difference(
        [&](double t) {
          RawCase r = raw;
          r.x[static_cast<std::size_t>(q)] += t;
          return dense_divergence_grad_x(dense_divergence(r.dense(), c.eps));
        },
        h);
    const std::vector<double> cs(Hs.col(q).data(), Hs.col(q).data() + nd);
    const std::vector<double> cd(Hd.col(q).data(), Hd.col(q).data() + nd);
    worst_self = std::max(worst_self, max_rel_diff(cs, fd_self, std::max(Hs.cwiseAbs().maxCoeff(), hess_floor)));
    worst_div = std::max(worst_div, max_rel_diff(cd, fd_div, std::max(Hd.cwiseAbs().maxCoeff(), hess_floor)));
  }
  EXPECT_LT(max_rel_diff(dense_self_grad(s.xx), fd_self_value, grad_floor), kDenseFdRtol) << "self gradient";
  EXPECT_LT(max_rel_diff(dense_divergence_grad_x(s), fd_div_value, grad_floor), kDenseFdRtol)
      << "divergence gradient";
  EXPECT_LT(worst_self, kDenseFdRtol) << "Hessian of x -> OT(x, x)";
  EXPECT_LT(worst_div, kDenseFdRtol) << "divergence Hessian";

  // The divergence gradients in y, a, b against finite differences of the divergence value.
  std::vector<double> fd_y(raw.y.size());
  for (std::size_t q = 0; q < raw.y.size(); ++q)
    fd_y[q] = central_difference(
        [&](double t) { RawCase r = raw; r.y[q] += t; return dense_divergence(r.dense(), c.eps).value; },
        h);
  EXPECT_LT(max_rel_diff(dense_divergence_grad_y(s), fd_y), kDenseFdRtol) << "dS/dy";
  if (c.random_weights) {
    const double hw = 1e-4 * c.raw_mass;
    std::vector<double> fd_a(raw.a.size()), fd_b(raw.b.size());
    for (std::size_t q = 0; q < raw.a.size(); ++q) {
      auto F = [&](double t) {
        RawCase r = raw;
        r.a[q] += t;
        return dense_divergence(r.dense(), c.eps).value;
      };
      fd_a[q] = raw.a[q] > 0 ? central_difference(F, hw)
                             : (-3 * F(0) + 4 * F(hw) - F(2 * hw)) / (2 * hw);
    }
    for (std::size_t q = 0; q < raw.b.size(); ++q)
      fd_b[q] = central_difference(
          [&](double t) { RawCase r = raw; r.b[q] += t; return dense_divergence(r.dense(), c.eps).value; },
          hw);
    EXPECT_LT(max_rel_diff(dense_divergence_grad_a(s, total(raw.a)), fd_a), kDenseFdRtol) << "dS/da";
    EXPECT_LT(max_rel_diff(dense_divergence_grad_b(s, total(raw.b)), fd_b), kDenseFdRtol) << "dS/db";
  }

  // The x-block alone of the self-problem's joint Hessian is a different (wrong) matrix.
  const Eigen::MatrixXd wrong = dense_hessian_x(s.xx);
  const double rel = (wrong - Hs).norm() / Hs.norm();
  EXPECT_GT(rel, 0.3) << "the x-block alone of OT(x, x) should be far from its full Hessian";
  const Eigen::MatrixXd wrong_div = dense_hessian_x(s.xy) - 0.5 * wrong;
  EXPECT_GT((wrong_div - Hd).norm() / Hd.norm(), 0.1);
  RecordProperty("x_block_rel_diff", std::to_string(rel));
}

TEST_P(DenseReference, CostFactorMutantIsVisiblyDifferent) {
  // A 4c/eps in place of (2c)^2/eps (dC computed with the factor 2 instead of 2c) differs from
  // the truth when c != 1 by far more than the finite-difference tolerance (the mutant would
  // fail JointHessianMatchesFiniteDifferencesOfTheGradient). The size of the difference
  // depends on the regime (the eps-dependent part of H fades at small eps).
  const RefCase& c = GetParam();
  if (c.c == 1.0) GTEST_SKIP() << "c = 1: the two coincide";
  const DenseOt s = dense_ot(make_raw(c).dense(), c.eps);
  const Eigen::MatrixXd H = dense_hessian_x(s), Hm = dense_hessian_x(s, 2.0);
  const double rel = (H - Hm).norm() / H.norm();
  EXPECT_GT(rel, 1e3 * kDenseFdRtol);
  RecordProperty("mutant_rel_diff", std::to_string(rel));
  std::printf("4c/eps mutant: relative difference %.3g\n", rel);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, DenseReference,
    ::testing::Values(RefCase{"n5_m4_d2_c1", 5, 4, 2, 0.5, 1.0, false, false, 1.0},
                      RefCase{"n6_m5_d2_c05_weights", 6, 5, 2, 0.3, 0.5, true, false, 3.0},
                      RefCase{"n6_m7_d1_c1_zero_weight", 6, 7, 1, 0.4, 1.0, true, true, 2.0},
                      RefCase{"n4_m6_d3_c2_small_eps", 4, 6, 3, 0.1, 2.0, true, false, 1.0}),
    [](const ::testing::TestParamInfo<RefCase>& i) { return i.param.name; });

TEST(DenseReferenceSpectrum, IndefiniteAndDefiniteConfigurationsExist) {
  // Clustered sources against spread targets at small eps: splitting the cluster lowers the
  // cost, so H_xx has a negative eigenvalue; well separated matched pairs at moderate eps: PD.
  Rng rng(5);
  const std::vector<double> x = gaussian_cloud(rng, 6, 2, 0.0, 0.05);
  const std::vector<double> y = gaussian_cloud(rng, 6, 2, 0.0, 1.0);
  const DenseOt s = dense_ot(make_dense_problem(x, y, 2, std::vector<double>{},
                                                std::vector<double>{}, 1.0), 0.1);
  const Eigen::VectorXd ev = Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(dense_hessian_x(s)).eigenvalues();
  EXPECT_LT(ev.minCoeff(), -0.1 * ev.maxCoeff());
}

}  // namespace
}  // namespace kantor::testing
