// OTDD (kantor/otdd.hpp) against independent references: Bures distances against closed forms
// (diagonal, commuting and 2 x 2 non-commuting covariances) and against the exact OT of two large
// Gaussian samples; the unbiased class covariances; the dataset distance in converged mode
// against the float64 dense reference with the label table added; the compatible mode against a
// dense float64 re-implementation of GeomLoss's loop; symmetry, relabelling invariance, D(A,A) = 0
// and label self-distances; bad input.
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "kantor/context.hpp"
#include "kantor/error.hpp"
#include "kantor/otdd.hpp"
#include "support/dense_reference.hpp"
#include "support/gpu.hpp"

namespace kantor::testing {
namespace {

using otdd::Dataset;

std::vector<double> random_spd(std::mt19937_64& rng, int d, double scale) {
  std::normal_distribution<double> nd;
  Eigen::MatrixXd A(d, d);
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < d; ++j) A(i, j) = nd(rng);
  Eigen::MatrixXd S = scale * A * A.transpose() / d + 0.1 * Eigen::MatrixXd::Identity(d, d);
  return std::vector<double>(S.data(), S.data() + d * d);  // symmetric: layout does not matter
}

Eigen::MatrixXd random_rotation(std::mt19937_64& rng, int d) {
  std::normal_distribution<double> nd;
  Eigen::MatrixXd A(d, d);
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < d; ++j) A(i, j) = nd(rng);
  Eigen::HouseholderQR<Eigen::MatrixXd> qr(A);
  return qr.householderQ();
}

TEST(Bures, DiagonalCovariancesMatchTheClosedForm) {
  const int d = 5;
  std::vector<double> m1{0, 1, 2, 3, 4}, m2{1, 1, 0, 3, -1}, S1(d * d, 0.0), S2(d * d, 0.0);
  const double s1[d] = {1, 4, 0.25, 0, 9}, s2[d] = {2, 1, 0.25, 3, 0};
  double expect = 0;
  for (int k = 0; k < d; ++k) {
    S1[k * d + k] = s1[k];
    S2[k * d + k] = s2[k];
    expect += (m1[k] - m2[k]) * (m1[k] - m2[k]) + std::pow(std::sqrt(s1[k]) - std::sqrt(s2[k]), 2);
  }
  EXPECT_NEAR(otdd::bures_squared(d, m1.data(), S1.data(), m2.data(), S2.data()), expect, 1e-12);
}

TEST(Bures, CommutingRankDeficientCovariancesMatchTheClosedForm) {
  std::mt19937_64 rng(3);
  const int d = 12;
  const Eigen::MatrixXd Q = random_rotation(rng, d);
  Eigen::VectorXd l1(d), l2(d);
  std::uniform_real_distribution<double> u(0.0, 3.0);
  for (int k = 0; k < d; ++k) {
    l1(k) = k < 4 ? 0.0 : u(rng);  // rank 8: zero-variance directions
    l2(k) = k % 3 == 0 ? 0.0 : u(rng);
  }
  const Eigen::MatrixXd S1 = Q * l1.asDiagonal() * Q.transpose();
  const Eigen::MatrixXd S2 = Q * l2.asDiagonal() * Q.transpose();
  std::vector<double> m1(d), m2(d);
  for (int k = 0; k < d; ++k) {
    m1[k] = u(rng);
    m2[k] = u(rng);
  }
  double expect = 0;
  for (int k = 0; k < d; ++k)
    expect += (m1[k] - m2[k]) * (m1[k] - m2[k]) + std::pow(std::sqrt(l1(k)) - std::sqrt(l2(k)), 2);
  EXPECT_NEAR(otdd::bures_squared(d, m1.data(), S1.data(), m2.data(), S2.data()), expect, 1e-9);
}

TEST(Bures, NonCommutingTwoByTwoMatchesTheClosedForm) {
  // For 2 x 2 PSD M: Tr M^1/2 = sqrt(Tr M + 2 sqrt(det M)); with M = S1^1/2 S2 S1^1/2,
  // Tr M = Tr(S1 S2) and det M = det S1 det S2.
  std::mt19937_64 rng(5);
  for (int rep = 0; rep < 20; ++rep) {
    const std::vector<double> S1 = random_spd(rng, 2, 2.0), S2 = random_spd(rng, 2, 0.5);
    const double m1[2] = {0.3, -1}, m2[2] = {1.5, 0.2};
    const Eigen::Map<const Eigen::Matrix2d> A(S1.data()), B(S2.data());
    const double tr = (A * B).trace(), det = A.determinant() * B.determinant();
    const double expect = std::pow(1.2, 2) + std::pow(1.2, 2) + A.trace() + B.trace() -
                          2 * std::sqrt(tr + 2 * std::sqrt(det));
    EXPECT_NEAR(otdd::bures_squared(2, m1, S1.data(), m2, S2.data()), expect, 1e-12);
  }
}

TEST(Bures, EqualGaussiansAreExactlyZeroAndTheValueIsSymmetric) {
  std::mt19937_64 rng(7);
  const int d = 30;
  const std::vector<double> S1 = random_spd(rng, d, 1.0), S2 = random_spd(rng, d, 2.0);
  std::vector<double> m1(d, 0.5), m2(d, -0.25);
  EXPECT_EQ(otdd::bures_squared(d, m1.data(), S1.data(), m1.data(), S1.data()), 0.0);
  const double ab = otdd::bures_squared(d, m1.data(), S1.data(), m2.data(), S2.data());
  const double ba = otdd::bures_squared(d, m2.data(), S2.data(), m1.data(), S1.data());
  EXPECT_GT(ab, 1.0);
  EXPECT_NEAR(ab, ba, 1e-10 * ab);
}

// Samples of N(mean, L L^T) in `d` dimensions.
std::vector<double> gaussian_sample(std::mt19937_64& rng, std::int64_t n, const Eigen::MatrixXd& L,
                                    const Eigen::VectorXd& mean) {
  std::normal_distribution<double> nd;
  const int d = int(mean.size());
  std::vector<double> x(std::size_t(n * d));
  for (std::int64_t i = 0; i < n; ++i) {
    Eigen::VectorXd z(d);
    for (int k = 0; k < d; ++k) z(k) = nd(rng);
    const Eigen::VectorXd v = mean + L * z;
    for (int k = 0; k < d; ++k) x[std::size_t(i * d + k)] = v(k);
  }
  return x;
}

TEST(Bures, MatchesTheExactOtOfTwoLargeGaussianSamples) {
  // The exact label distance (debiased S_eps, cost |x - y|^2, small eps) between large samples
  // of two Gaussians approaches their W2^2, which is the Bures value of the true parameters.
  std::mt19937_64 rng(11);
  const int d = 2;
  Eigen::MatrixXd L1(2, 2), L2(2, 2);
  L1 << 1.0, 0.0, 0.6, 0.5;
  L2 << 0.4, 0.0, -0.3, 1.2;
  Eigen::VectorXd mu1(2), mu2(2);
  mu1 << 0, 0;
  mu2 << 1.5, -0.5;
  const std::int64_t n = 1000;
  std::vector<double> x = gaussian_sample(rng, n, L1, mu1), y = gaussian_sample(rng, n, L2, mu2);
  std::vector<std::int32_t> la(std::size_t(n), 0), lb(std::size_t(n), 0);
  otdd::LabelDistanceOptions o;
  o.method = otdd::LabelDistance::kExact;
  o.inner_epsilon = 0.01;
  o.inner.precision = Precision::kFp32;
  o.inner.tolerance = 1e-4;
  Context ctx(ContextOptions{Backend::kCpu, 2});
  const otdd::LabelTable t = otdd::label_distances(
      ctx, Dataset{host_matrix<const double>(x.data(), n, d), host_vector<const std::int32_t>(la.data(), n)},
      Dataset{host_matrix<const double>(y.data(), n, d), host_vector<const std::int32_t>(lb.data(), n)}, o);
  const Eigen::MatrixXd S1 = L1 * L1.transpose(), S2 = L2 * L2.transpose();
  const double truth = otdd::bures_squared(2, mu1.data(), S1.data(), mu2.data(), S2.data());
  // Sampling error of W2^2 at n = 1000 in 2-D is a few percent.
  EXPECT_NEAR(t.cross(0, 0), truth, 0.06 * truth) << "Bures " << truth;
}

struct Labelled {
  std::int64_t n = 0, d = 0;
  std::vector<double> x;
  std::vector<std::int32_t> l;
  Dataset view() const {
    return {host_matrix<const double>(x.data(), n, d), host_vector<const std::int32_t>(l.data(), n)};
  }
};

/// n points in `classes` Gaussian classes (class k centred at shift + k * spread e_(k mod d)),
/// labels `ids[k]`, rows in random class order.
Labelled make_data(std::mt19937_64& rng, std::int64_t n, std::int64_t d,
                   const std::vector<std::int32_t>& ids, double shift, double spread) {
  Labelled s;
  s.n = n;
  s.d = d;
  std::normal_distribution<double> nd;
  std::uniform_int_distribution<int> pick(0, int(ids.size()) - 1);
  for (std::int64_t i = 0; i < n; ++i) {
    const int k = i < std::int64_t(ids.size()) * 2 ? int(i % std::int64_t(ids.size())) : pick(rng);
    s.l.push_back(ids[std::size_t(k)]);
    for (std::int64_t c = 0; c < d; ++c)
      s.x.push_back(shift + (c == k % d ? spread * k : 0.0) + (0.5 + 0.2 * k) * nd(rng));
  }
  return s;
}

TEST(ClassStatistics, UnbiasedCovariancesAndMeans) {
  std::mt19937_64 rng(13);
  const Labelled a = make_data(rng, 200, 3, {4, 9, 2}, 0.0, 1.0);
  const otdd::ClassStatistics s = otdd::class_statistics(a.view(), true, 2);
  ASSERT_EQ(s.classes, (std::vector<std::int32_t>{2, 4, 9}));
  for (std::int64_t c = 0; c < 3; ++c) {
    std::vector<std::int64_t> rows;
    for (std::int64_t i = 0; i < a.n; ++i)
      if (a.l[std::size_t(i)] == s.classes[std::size_t(c)]) rows.push_back(i);
    ASSERT_EQ(s.counts[std::size_t(c)], std::int64_t(rows.size()));
    for (int k = 0; k < 3; ++k) {
      double mu_k = 0;
      for (auto i : rows) mu_k += a.x[std::size_t(i * 3 + k)];
      mu_k /= double(rows.size());
      EXPECT_NEAR(s.means[std::size_t(c * 3 + k)], mu_k, 1e-12);
      for (int q = 0; q < 3; ++q) {
        double mu_q = 0, cov = 0;
        for (auto i : rows) mu_q += a.x[std::size_t(i * 3 + q)];
        mu_q /= double(rows.size());
        for (auto i : rows)
          cov += (a.x[std::size_t(i * 3 + k)] - mu_k) * (a.x[std::size_t(i * 3 + q)] - mu_q);
        cov /= double(rows.size() - 1);
        EXPECT_NEAR(s.covariances[std::size_t(c * 9 + k * 3 + q)], cov, 1e-12);
      }
    }
  }
}

/// The dense float64 problem of the union label space: x's rows labelled by their class index,
/// y's by La + their class index.
DenseProblem dense_of(const Labelled& x, const Labelled& y, const otdd::LabelTable& t,
                      double cx, double cw, bool x_is_a, bool y_is_a) {
  DenseProblem p = make_dense_problem(x.x, y.x, x.d, std::vector<double>{}, std::vector<double>{}, cx);
  auto index = [&](const Labelled& s, bool is_a) {
    const auto& classes = is_a ? t.classes_a : t.classes_b;
    const std::int32_t offset = is_a ? 0 : std::int32_t(t.classes_a.size());
    std::vector<std::int32_t> out;
    for (auto l : s.l)
      out.push_back(offset + std::int32_t(std::lower_bound(classes.begin(), classes.end(), l) - classes.begin()));
    return out;
  };
  add_label_term(&p, index(x, x_is_a), index(y, y_is_a), t.values, t.size(), cw);
  return p;
}

TEST(DatasetDistance, ConvergedModeMatchesTheDenseFloat64Reference) {
  std::mt19937_64 rng(17);
  const Labelled a = make_data(rng, 40, 3, {0, 1, 2}, 0.0, 1.0);
  const Labelled b = make_data(rng, 33, 3, {5, 7}, 0.4, 1.5);
  Context ctx(ContextOptions{Backend::kCpu, 2});
  otdd::OtddOptions o;
  o.mode = otdd::Mode::kConverged;
  o.precision = Precision::kFp64;
  o.tolerance = 1e-10;
  o.max_iterations = 100000;
  o.epsilon = 0.5;
  const otdd::OtddSummary s = otdd::dataset_distance(ctx, a.view(), b.view(), o);
  ASSERT_TRUE(s.converged) << s.full_report();
  ASSERT_EQ(s.table.size(), 5);
  const double eps = o.epsilon;
  const DenseProblem xy = dense_of(a, b, s.table, 0.5, 0.5, true, false);
  const DenseProblem xx = dense_of(a, a, s.table, 0.5, 0.5, true, true);
  const DenseProblem yy = dense_of(b, b, s.table, 0.5, 0.5, false, false);
  const DenseSolution sxy = dense_solve(xy, eps), sxx = dense_solve_self(xx, eps),
                      syy = dense_solve_self(yy, eps);
  const double ref = dense_dual_value(xy, sxy.f, sxy.g) - 0.5 * dense_dual_value(xx, sxx.f, sxx.g) -
                     0.5 * dense_dual_value(yy, syy.f, syy.g);
  EXPECT_GT(ref, 0.1);  // a non-trivial value
  EXPECT_NEAR(s.distance, ref, 1e-8 * std::max(1.0, ref));
  EXPECT_NEAR(s.ot_xy, dense_dual_value(xy, sxy.f, sxy.g), 1e-8);
  // The reference's plan has the right marginals (the reference is converged).
  EXPECT_LT(sxy.marginal_error, 1e-10);
}

/// GeomLoss's sinkhorn_loop on one problem, dense and in float64, written from its description:
/// a full softmin step from zero at eps_0, one averaged (Jacobi) step per eps, a final full step;
/// returns <a, f> + <b, g>. The debiased loss <a, f_ab - f_aa> + <b, g_ab - g_bb> is this value
/// of (x, y) minus half of it for (x, x) and for (y, y) (a symmetric self-problem keeps f = g).
double dense_geomloss(const DenseProblem& p, const std::vector<double>& sched) {
  std::vector<double> f(std::size_t(p.n), 0.0), g(std::size_t(p.m), 0.0);
  auto step = [&](double eps, double w) {
    const std::vector<double> tf = dense_update_f(p, eps, g), tg = dense_update_g(p, eps, f);
    for (std::size_t i = 0; i < f.size(); ++i) f[i] = (1 - w) * f[i] + w * tf[i];
    for (std::size_t j = 0; j < g.size(); ++j) g[j] = (1 - w) * g[j] + w * tg[j];
  };
  step(sched.front(), 1.0);
  for (double e : sched) step(e, 0.5);
  step(sched.back(), 1.0);
  return dense_dual_value(p, f, g);
}

TEST(DatasetDistance, CompatibleModeMatchesADenseGeomLossLoop) {
  std::mt19937_64 rng(19);
  const Labelled a = make_data(rng, 37, 4, {3, 1, 8}, 0.0, 2.0);
  const Labelled b = make_data(rng, 29, 4, {0, 6}, 0.3, 1.0);
  Context ctx(ContextOptions{Backend::kCpu, 2});
  otdd::OtddOptions o;
  o.precision = Precision::kFp64;
  const otdd::OtddSummary s = otdd::dataset_distance(ctx, a.view(), b.view(), o);
  // The diameter of the augmented samples: features plus the union label index column.
  std::vector<double> lo(5, INFINITY), hi(5, -INFINITY);
  for (const Labelled* z : {&a, &b})
    for (std::int64_t i = 0; i < z->n; ++i) {
      for (int k = 0; k < 4; ++k) {
        lo[k] = std::min(lo[k], z->x[std::size_t(i * 4 + k)]);
        hi[k] = std::max(hi[k], z->x[std::size_t(i * 4 + k)]);
      }
    }
  lo[4] = 0;
  hi[4] = 4;  // 3 + 2 classes: union indices 0..4
  double d2 = 0;
  for (int k = 0; k < 5; ++k) d2 += (hi[k] - lo[k]) * (hi[k] - lo[k]);
  EXPECT_NEAR(s.diameter, std::sqrt(d2), 1e-12);
  ASSERT_EQ(s.schedule, otdd::geomloss_schedule(std::sqrt(d2), 0.1, 0.5));
  EXPECT_EQ(s.iterations, std::int64_t(s.schedule.size()) + 2);
  const DenseProblem xy = dense_of(a, b, s.table, 0.5, 0.5, true, false);
  const DenseProblem xx = dense_of(a, a, s.table, 0.5, 0.5, true, true);
  const DenseProblem yy = dense_of(b, b, s.table, 0.5, 0.5, false, false);
  const double ref = dense_geomloss(xy, s.schedule) - 0.5 * dense_geomloss(xx, s.schedule) -
                     0.5 * dense_geomloss(yy, s.schedule);
  EXPECT_NEAR(s.distance, ref, 1e-9 * std::abs(ref));
  EXPECT_FALSE(s.converged);
  EXPECT_GT(s.marginal_error_xy, 0.0);  // reported, whatever it is
}

TEST(DatasetDistance, CompatibleExactLabelDistanceIsTheGeomLossLoopOfEachPair) {
  // Compatible mode's exact label distance: per pair of classes, GeomLoss's non-debiased loop
  // with cost |x - y|^2 / 2 at eps 0.1 from the pair's own diameter.
  std::mt19937_64 rng(41);
  const Labelled a = make_data(rng, 30, 3, {0, 1}, 0.0, 1.5);
  const Labelled b = make_data(rng, 26, 3, {4}, 0.5, 1.0);
  Context ctx(ContextOptions{Backend::kCpu, 2});
  otdd::OtddOptions oo;
  oo.labels.method = otdd::LabelDistance::kExact;
  oo.precision = Precision::kFp64;
  const otdd::LabelDistanceOptions lo = otdd::effective_label_options(oo);
  EXPECT_TRUE(lo.inner_compatible);
  EXPECT_EQ(lo.inner_scale, 0.5);
  EXPECT_FALSE(lo.inner_debiased);
  const otdd::LabelTable t = otdd::label_distances(ctx, a.view(), b.view(), lo);
  // The reference for the pair (class 1 of A, class 4 of B).
  std::vector<double> xs, ys;
  for (std::int64_t i = 0; i < a.n; ++i)
    if (a.l[std::size_t(i)] == 1) xs.insert(xs.end(), a.x.begin() + i * 3, a.x.begin() + (i + 1) * 3);
  ys = b.x;
  const DenseProblem p = make_dense_problem(xs, ys, 3, std::vector<double>{}, std::vector<double>{}, 0.5);
  double d2 = 0;
  for (int k = 0; k < 3; ++k) {
    double lo_k = INFINITY, hi_k = -INFINITY;
    for (const auto* z : {&xs, &ys})
      for (std::size_t i = std::size_t(k); i < z->size(); i += 3) {
        lo_k = std::min(lo_k, (*z)[i]);
        hi_k = std::max(hi_k, (*z)[i]);
      }
    d2 += (hi_k - lo_k) * (hi_k - lo_k);
  }
  const std::vector<double> sched = otdd::geomloss_schedule(std::sqrt(d2), 0.1, 0.5);
  const double ref = dense_geomloss(p, sched);
  EXPECT_NEAR(t.cross(1, 0), ref, 1e-9 * std::abs(ref));
}

TEST(DatasetDistance, GeomLossScheduleMatchesNumpyArange) {
  // diameter 10, eps 0.1: 2 ln 10 = 4.605, 2 ln sqrt(0.1) = -2.303, step 2 ln 0.5 = -1.386:
  // arange gives ceil(6.908 / 1.386) = 5 values.
  const std::vector<double> s = otdd::geomloss_schedule(10.0, 0.1, 0.5);
  const std::vector<double> expect{100, 100, 25, 6.25, 1.5625, 0.390625, 0.1};
  ASSERT_EQ(s.size(), expect.size());
  for (std::size_t i = 0; i < s.size(); ++i) EXPECT_NEAR(s[i], expect[i], 1e-12 * expect[i]);
  // A diameter below blur: no annealing values, [D^2, eps].
  const std::vector<double> t = otdd::geomloss_schedule(0.2, 0.1, 0.5);
  ASSERT_EQ(t.size(), 2u);
}

TEST(DatasetDistance, SymmetricInvariantToRelabellingAndZeroOnItself) {
  std::mt19937_64 rng(23);
  const Labelled a = make_data(rng, 45, 3, {0, 1, 2}, 0.0, 1.0);
  const Labelled b = make_data(rng, 38, 3, {0, 1, 2}, 0.5, 1.2);
  Context ctx(ContextOptions{Backend::kCpu, 2});
  for (otdd::Mode mode : {otdd::Mode::kCompatible, otdd::Mode::kConverged}) {
    otdd::OtddOptions o;
    o.mode = mode;
    o.precision = Precision::kFp64;
    o.tolerance = 1e-8;
    o.epsilon = 0.3;
    const double ab = otdd::dataset_distance(ctx, a.view(), b.view(), o).distance;
    const double ba = otdd::dataset_distance(ctx, b.view(), a.view(), o).distance;
    EXPECT_GT(ab, 0.05);
    EXPECT_NEAR(ab, ba, 1e-9 * ab) << to_string(mode);
    // Relabel the classes on both sides (a different permutation per side).
    Labelled ar = a, br = b;
    for (auto& l : ar.l) l = std::int32_t((l + 1) % 3) * 10;
    for (auto& l : br.l) l = std::int32_t(2 - l) - 5;
    const double rel = otdd::dataset_distance(ctx, ar.view(), br.view(), o).distance;
    EXPECT_NEAR(rel, ab, 1e-9 * ab) << to_string(mode);
    const otdd::OtddSummary self = otdd::dataset_distance(ctx, a.view(), a.view(), o);
    // Compatible: the cross and self loops run the same steps on the same costs; converged: the
    // cross problem stops at its own tolerance.
    EXPECT_NEAR(self.distance, 0.0, mode == otdd::Mode::kCompatible ? 1e-12 : 1e-7)
        << to_string(mode);
    // Same class in both datasets: label self-distance exactly 0 (Bures of equal statistics).
    for (std::int64_t p = 0; p < 3; ++p) EXPECT_EQ(self.table.cross(p, p), 0.0);
    for (std::int64_t p = 0; p < 3; ++p) EXPECT_GT(self.table.cross(p, (p + 1) % 3), 0.0);
  }
}

TEST(DatasetDistance, ExactLabelSelfDistancesVanishWhenDebiased) {
  std::mt19937_64 rng(29);
  const Labelled a = make_data(rng, 60, 2, {0, 1}, 0.0, 2.0);
  Context ctx(ContextOptions{Backend::kCpu, 2});
  otdd::LabelDistanceOptions o;
  o.method = otdd::LabelDistance::kExact;
  o.inner.precision = Precision::kFp64;
  o.inner.tolerance = 1e-10;
  const otdd::LabelTable t = otdd::label_distances(ctx, a.view(), a.view(), o);
  EXPECT_EQ(t.cross(0, 0), 0.0);
  EXPECT_EQ(t.cross(1, 1), 0.0);
  EXPECT_GT(t.cross(0, 1), 1.0);
  EXPECT_NEAR(t.cross(0, 1), t.cross(1, 0), 1e-9 * t.cross(0, 1));
  EXPECT_NEAR(t(0, 1), t.cross(0, 1), 1e-9 * t.cross(0, 1));
}

TEST(DatasetDistance, BadInputNamesTheProblem) {
  std::mt19937_64 rng(31);
  const Labelled a = make_data(rng, 20, 3, {0, 1}, 0.0, 1.0);
  Labelled b = make_data(rng, 20, 2, {0, 1}, 0.0, 1.0);
  Context ctx(ContextOptions{Backend::kCpu, 1});
  auto message = [&](const Labelled& x, const Labelled& y, otdd::OtddOptions o = {}) {
    try {
      otdd::dataset_distance(ctx, x.view(), y.view(), o);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(a, b).find("different dimensions"), std::string::npos);
  Labelled c = a;
  c.l.pop_back();
  Dataset bad = c.view();
  bad.labels.size = std::int64_t(c.l.size());
  try {
    otdd::dataset_distance(ctx, bad, a.view(), {});
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("labels has 19 entries"), std::string::npos) << e.what();
  }
  Labelled one = a;
  one.l[0] = 7;  // a class of one sample
  EXPECT_NE(message(one, a).find("class 7 has 1 sample"), std::string::npos) << message(one, a);
  Labelled nan = a;
  nan.x[4] = NAN;
  EXPECT_NE(message(nan, a).find("not finite"), std::string::npos);
  otdd::OtddOptions o;
  o.epsilon = -1;
  EXPECT_NE(message(a, a, o).find("epsilon must be > 0"), std::string::npos);
}

TEST(CudaOtdd, BothModesMatchTheCpuEngine) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  std::mt19937_64 rng(37);
  // Rows of a class contiguous or not, 4 + 3 classes, d = 20: the CUDA label-augmented kernels
  // in fp32 against the CPU engine in fp64, in both modes, with the Gaussian and the exact table.
  const Labelled a = make_data(rng, 700, 20, {0, 1, 2, 3}, 0.0, 1.0);
  const Labelled b = make_data(rng, 500, 20, {1, 4, 6}, 0.3, 1.5);
  Context cpu(ContextOptions{Backend::kCpu, 0});
  Context gpu(ContextOptions{Backend::kCuda, 0});
  for (otdd::LabelDistance ld : {otdd::LabelDistance::kGaussian, otdd::LabelDistance::kExact})
    for (otdd::Mode mode : {otdd::Mode::kCompatible, otdd::Mode::kConverged}) {
      otdd::OtddOptions o;
      o.mode = mode;
      o.labels.method = ld;
      o.labels.inner.tolerance = 1e-4;
      o.tolerance = 1e-4;
      o.epsilon = 0.5;
      o.precision = Precision::kFp64;
      const otdd::OtddSummary c = otdd::dataset_distance(cpu, a.view(), b.view(), o);
      o.precision = Precision::kFp32;
      const otdd::OtddSummary g = otdd::dataset_distance(gpu, a.view(), b.view(), o);
      ASSERT_EQ(c.table.values.size(), g.table.values.size());
      for (std::size_t k = 0; k < c.table.values.size(); ++k)
        EXPECT_NEAR(g.table.values[k], c.table.values[k],
                    (ld == otdd::LabelDistance::kGaussian ? 1e-9 : 1e-3) * (1 + c.table.values[k]));
      EXPECT_GT(c.distance, 0.1);
      EXPECT_NEAR(g.distance, c.distance, 2e-3 * c.distance)
          << to_string(ld) << " " << to_string(mode);
      if (mode == otdd::Mode::kConverged) EXPECT_TRUE(g.converged) << g.full_report();
    }
}

/// Mean and unbiased covariance (row-major d x d) of rows `rows` of the n x d row-major x.
void group_statistics(const std::vector<double>& x, std::int64_t d,
                      const std::vector<std::int64_t>& rows, std::vector<double>* mean,
                      std::vector<double>* cov) {
  const double n = double(rows.size());
  mean->assign(std::size_t(d), 0.0);
  cov->assign(std::size_t(d * d), 0.0);
  for (auto i : rows)
    for (std::int64_t k = 0; k < d; ++k) (*mean)[std::size_t(k)] += x[std::size_t(i * d + k)] / n;
  for (auto i : rows)
    for (std::int64_t k = 0; k < d; ++k)
      for (std::int64_t q = 0; q < d; ++q)
        (*cov)[std::size_t(k * d + q)] += (x[std::size_t(i * d + k)] - (*mean)[std::size_t(k)]) *
                                          (x[std::size_t(i * d + q)] - (*mean)[std::size_t(q)]) /
                                          (n - 1);
}

TEST(BuresTableCuda, RefusesAContextWithoutTheCudaEngine) {
  const std::vector<double> x(12, 1.0);
  otdd::RowGroups g;
  g.matrices = {host_matrix<const double>(x.data(), 4, 3)};
  g.matrix = {0, 0};
  g.rows = {{0, 1}, {2, 3}};
  Context cpu(ContextOptions{Backend::kCpu, 0});
  // A CUDA build names the backend; a CPU-only build says it has no CUDA engine.
  try {
    otdd::bures_table_cuda(cpu, g);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("backend is cpu"), std::string::npos) << e.what();
  } catch (const NotCompiled& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA engine"), std::string::npos) << e.what();
  }
}

TEST(CudaOtdd, BuresTableMatchesTheHostFormulaOnRankDeficientGroups) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  // d = 40, two matrices, six groups: 12 rows (rank 11 < d), 2 rows (rank 1), two columns of
  // zero variance everywhere, one group 10x wider, and a group of the second matrix that holds
  // the same rows as group 0 in the same order (an equal Gaussian: exactly 0).
  std::mt19937_64 rng(71);
  std::normal_distribution<double> nd;
  const std::int64_t d = 40, na = 260, nb = 150;
  std::vector<double> A(std::size_t(na * d)), B(std::size_t(nb * d));
  for (std::int64_t i = 0; i < na; ++i)
    for (std::int64_t k = 0; k < d; ++k)
      A[std::size_t(i * d + k)] = (k == 3 || k == 17) ? 0.5 : (i % 3) * 0.7 + (1 + (i % 3)) * nd(rng);
  for (std::int64_t i = 0; i < nb; ++i)
    for (std::int64_t k = 0; k < d; ++k)
      B[std::size_t(i * d + k)] = (k == 3 || k == 17) ? 0.5 : 0.2 + (i % 2 ? 10.0 : 0.8) * nd(rng);
  std::vector<std::vector<std::int64_t>> rows(6);
  for (std::int64_t i = 0; i < 12; ++i) rows[0].push_back(5 + 7 * i);  // rank 11
  for (std::int64_t i = 1; i < na; i += 2) rows[1].push_back(i);
  for (std::int64_t i = 0; i < na; i += 4) rows[2].push_back(i);
  for (std::int64_t i = 0; i < 12; ++i) {  // group 3: group 0's rows copied into B, in order
    const std::int64_t at = 3 + 11 * i;
    std::copy_n(&A[std::size_t(rows[0][std::size_t(i)] * d)], d, &B[std::size_t(at * d)]);
    rows[3].push_back(at);
  }
  rows[4] = {0, 2};  // rank 1
  for (std::int64_t i = 1; i < nb; i += 2)
    if ((i - 3) % 11 != 0) rows[5].push_back(i);  // the 10x wider rows
  otdd::RowGroups g;
  g.matrices = {host_matrix<const double>(A.data(), na, d),
                host_matrix<const double>(B.data(), nb, d)};
  g.matrix = {0, 0, 0, 1, 1, 1};
  g.rows = rows;
  Context gpu(ContextOptions{Backend::kCuda, 0});
  double sec[3] = {-1, -1, -1};
  const std::vector<double> w = otdd::bures_table_cuda(gpu, g, &sec);
  ASSERT_EQ(w.size(), 36u);
  for (double s : sec) EXPECT_GE(s, 0.0);
  std::vector<std::vector<double>> m(6), S(6);
  for (int u = 0; u < 6; ++u)
    group_statistics(g.matrix[std::size_t(u)] ? B : A, d, rows[std::size_t(u)], &m[std::size_t(u)],
                     &S[std::size_t(u)]);
  for (int u = 0; u < 6; ++u) {
    EXPECT_EQ(w[std::size_t(u * 6 + u)], 0.0);
    for (int v = 0; v < 6; ++v) {
      if (u == v) continue;
      const double ref = otdd::bures_squared(d, m[std::size_t(u)].data(), S[std::size_t(u)].data(),
                                             m[std::size_t(v)].data(), S[std::size_t(v)].data());
      EXPECT_NEAR(w[std::size_t(u * 6 + v)], ref, 1e-9 * (1 + ref)) << u << " " << v;
      EXPECT_EQ(w[std::size_t(u * 6 + v)], w[std::size_t(v * 6 + u)]);
      EXPECT_GE(w[std::size_t(u * 6 + v)], 0.0);
    }
  }
  EXPECT_EQ(w[0 * 6 + 3], 0.0);  // equal Gaussians, bitwise
  EXPECT_GT(w[0 * 6 + 1], 1.0);
  // Relabelling: the groups in another order give the table in that order (here also with the
  // pairs split over several eigensolver calls).
  const std::vector<int> perm = {4, 2, 5, 0, 3, 1};
  otdd::RowGroups gp = g;
  for (int u = 0; u < 6; ++u) {
    gp.matrix[std::size_t(u)] = g.matrix[std::size_t(perm[std::size_t(u)])];
    gp.rows[std::size_t(u)] = g.rows[std::size_t(perm[std::size_t(u)])];
  }
  gp.max_pairs_per_call = 4;  // 15 pairs in 4 batched calls (the last one short)
  const std::vector<double> wp = otdd::bures_table_cuda(gpu, gp);
  for (int u = 0; u < 6; ++u)
    for (int v = 0; v < 6; ++v) {
      const double ref = w[std::size_t(perm[std::size_t(u)] * 6 + perm[std::size_t(v)])];
      EXPECT_NEAR(wp[std::size_t(u * 6 + v)], ref, 1e-12 * (1 + ref)) << u << " " << v;
    }
  // Bad input names the problem.
  auto message = [&](const otdd::RowGroups& bad) {
    try {
      otdd::bures_table_cuda(gpu, bad);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  otdd::RowGroups bad = g;
  bad.rows[4] = {7};
  EXPECT_NE(message(bad).find("group 4 has 1 rows"), std::string::npos) << message(bad);
  bad = g;
  bad.rows[2].push_back(na);
  EXPECT_NE(message(bad).find("group 2 names row 260 of a matrix of 260 rows"), std::string::npos)
      << message(bad);
  bad = g;
  bad.max_pairs_per_call = -1;
  EXPECT_NE(message(bad).find("max_pairs_per_call is -1"), std::string::npos) << message(bad);
  bad = g;
  bad.matrix[1] = 2;
  EXPECT_NE(message(bad).find("group 1 names matrix 2"), std::string::npos) << message(bad);
  bad = g;
  bad.matrices[1] = host_matrix<const double>(B.data(), nb, d - 1);
  EXPECT_NE(message(bad).find("columns"), std::string::npos) << message(bad);
}

TEST(CudaOtdd, BuresTableOfManyGroups) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  // 400 groups (79,800 pairs: more than a grid's 65,535 blocks in y), d = 3, 4 rows each; the
  // last group repeats the rows of the first (exactly 0).
  std::mt19937_64 rng(72);
  std::normal_distribution<double> nd;
  const std::int64_t d = 3, G = 400, n = 4 * G;
  std::vector<double> x(std::size_t(n * d));
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t k = 0; k < d; ++k)
      x[std::size_t(i * d + k)] = 0.01 * double(i / 4) + (1 + 0.1 * double(k)) * nd(rng);
  otdd::RowGroups g;
  g.matrices = {host_matrix<const double>(x.data(), n, d)};
  for (std::int64_t u = 0; u < G; ++u) {
    g.matrix.push_back(0);
    const std::int64_t b = u == G - 1 ? 0 : 4 * u;
    g.rows.push_back({b, b + 1, b + 2, b + 3});
  }
  Context gpu(ContextOptions{Backend::kCuda, 0});
  const std::vector<double> w = otdd::bures_table_cuda(gpu, g);
  ASSERT_EQ(w.size(), std::size_t(G * G));
  std::vector<std::vector<double>> m(static_cast<std::size_t>(G)), S(static_cast<std::size_t>(G));
  for (std::int64_t u = 0; u < G; ++u)
    group_statistics(x, d, g.rows[std::size_t(u)], &m[std::size_t(u)], &S[std::size_t(u)]);
  double worst = 0;
  for (std::int64_t u = 0; u < G; ++u)
    for (std::int64_t v = u + 1; v < G; ++v) {
      const double ref = otdd::bures_squared(d, m[std::size_t(u)].data(), S[std::size_t(u)].data(),
                                             m[std::size_t(v)].data(), S[std::size_t(v)].data());
      const double got = w[std::size_t(u * G + v)];
      worst = std::max(worst, std::abs(got - ref) / (1 + ref));
      ASSERT_EQ(got, w[std::size_t(v * G + u)]);
    }
  EXPECT_LT(worst, 1e-9);
  EXPECT_EQ(w[std::size_t(0 * G + G - 1)], 0.0);
  EXPECT_GT(w[std::size_t(0 * G + 1)], 0.0);
}

}  // namespace
}  // namespace kantor::testing
