// The multiscale solver's Gaussian lift (solvers/multiscale_lift.hpp; docs/multiscale.md,
// step 3): the cell's Gaussian terms against numerical integration, the one-more-coordinate
// operands against the score they stand for, and the lift's first pair against the centroids'.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include "kantor/buffer.hpp"
#include "kantor/context.hpp"
#include "kantor/sinkhorn.hpp"
#include "solvers/multiscale_lift.hpp"
#include "solvers/multiscale_screen.hpp"
#include "support/gpu.hpp"

namespace kantor::testing {
namespace {

using multiscale::CellKernel;
using multiscale::gaussian_cell;
using multiscale::kMaxCellRatio;

// log E exp((2 c w delta - c delta^2) / eps) for delta ~ N(0, s) in one coordinate, by the
// trapezoid rule over +-12 standard deviations (the integrand is smooth and its tails negligible).
double log_moment_1d(double c, double eps, double s, double w) {
  const double sd = std::sqrt(s), lo = -12 * sd, hi = 12 * sd;
  const int steps = 200000;
  const double h = (hi - lo) / steps;
  double sum = 0;
  for (int k = 0; k <= steps; ++k) {
    const double t = lo + k * h;
    const double v = std::exp(-t * t / (2 * s) + (2 * c * w * t - c * t * t) / eps);
    sum += (k == 0 || k == steps ? 0.5 : 1.0) * v;
  }
  return std::log(sum * h / std::sqrt(2 * M_PI * s));
}

// Below the clip, the cell's terms are the Gaussian integral: in d coordinates the moment is the
// product of the coordinates' ones, eps log E = kappa |w|^2 + shift.
TEST(MultiscaleLift, TheCellsTermsAreTheGaussianIntegral) {
  struct Case {
    double c, eps, s;
    std::vector<double> w;
  };
  const Case cases[] = {{1.0, 0.0025, 3.2e-5, {0.01, -0.02, 0.005}},  // 2^20 points in cells of 8
                        {1.0, 0.0025, 1.2e-4, {0.03, 0.0, -0.01}},    // 2^17
                        {2.5, 0.01, 1.0e-3, {0.05}},                  // d = 1, another scale
                        {0.5, 0.04, 1.9e-2, {0.1, -0.1, 0.2, 0.05, 0.0, -0.3}}};  // d = 6
  for (const Case& k : cases) {
    const int d = int(k.w.size());
    ASSERT_LE(2 * k.c * k.s / k.eps, kMaxCellRatio) << "a case below the clip";
    double expected = 0, w2 = 0;
    for (double wa : k.w) {
      expected += k.eps * log_moment_1d(k.c, k.eps, k.s, wa);
      w2 += wa * wa;
    }
    const CellKernel ck = gaussian_cell(k.c, k.eps, d, k.s);
    EXPECT_NEAR(ck.kappa * w2 + ck.shift, expected, 1e-9 * k.eps + 1e-6 * std::abs(expected))
        << "c " << k.c << " eps " << k.eps << " s " << k.s << " d " << d;
  }
  // Zero spread: the centroid's kernel. Past the clip: kappa = c r / (1 + r) at r = the clip.
  const CellKernel zero = gaussian_cell(1.0, 0.0025, 3, 0.0);
  EXPECT_EQ(zero.kappa, 0.0);
  EXPECT_EQ(zero.shift, 0.0);
  const CellKernel wide = gaussian_cell(2.0, 0.01, 3, 1.0);
  EXPECT_DOUBLE_EQ(wide.kappa, 2.0 * kMaxCellRatio / (1 + kMaxCellRatio));
  EXPECT_DOUBLE_EQ(wide.shift, -1.5 * 0.01 * std::log1p(kMaxCellRatio));
}

// The engines see c |q - k|^2 with the key potential f_I + shift'_I; with the row shift
// c |p - mid|^4 added back that is the Gaussian score f_I - c |x_I - p|^2 + kappa_I |p - T_I|^2 +
// shift_I of every (cell, point) pair, in double to rounding, and the centroid's score for a
// cell without a usable image (no mass, a non-finite image).
TEST(MultiscaleLift, TheOperandsInOneMoreCoordinateAreTheGaussianScore) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> U(-1.0, 1.0);
  const int d = 3;
  const std::int64_t K = 40, n = 30;
  const double c = 1.7, eps = 0.01;
  const double mid[d] = {0.2, -0.1, 0.4};
  std::vector<double> cells(K * d), images(K * d), mass(K), spread(K), pts(n * d), f(K);
  for (std::int64_t k = 0; k < K; ++k) {
    mass[k] = 0.5 + 0.5 * (U(rng) + 1);
    for (int a = 0; a < d; ++a) {
      cells[k * d + a] = U(rng);
      images[k * d + a] = mass[k] * (cells[k * d + a] + 0.3 * U(rng));  // unnormalized
    }
    spread[k] = 0.2 * eps * (U(rng) + 1.2);  // 2 c s / eps from 0.14 to 1.5: some clipped
    f[k] = 0.3 * U(rng);
  }
  mass[3] = 0;              // no mass: the centroid's kernel
  images[5 * d + 1] = NAN;  // a non-finite image: the same
  for (double& v : pts) v = U(rng);
  std::vector<double> keys, shift;
  detail::UninitVector<double> queries, row;
  multiscale::lift_keys(cells.data(), spread.data(), images.data(), mass.data(), K, d, mid, c, eps,
                        1, &keys, &shift);
  multiscale::lift_queries(pts.data(), n, d, mid, c, 1, &queries, &row);
  ASSERT_EQ(keys.size(), std::size_t(K * (d + 1)));
  ASSERT_EQ(queries.size(), std::size_t(n * (d + 1)));
  for (std::int64_t k = 0; k < K; ++k) {
    const bool usable = k != 3 && k != 5;
    const CellKernel ck = usable ? gaussian_cell(c, eps, d, spread[k]) : CellKernel{};
    for (std::int64_t j = 0; j < n; ++j) {
      double qk = 0, xp = 0, pt = 0;
      for (int a = 0; a <= d; ++a) {
        const double v = queries[j * (d + 1) + a] - keys[k * (d + 1) + a];
        qk += v * v;
      }
      for (int a = 0; a < d; ++a) {
        const double p = pts[j * d + a];
        xp += (cells[k * d + a] - p) * (cells[k * d + a] - p);
        const double t = usable ? images[k * d + a] / mass[k] : 0.0;
        pt += (p - t) * (p - t);
      }
      const double engine = f[k] + shift[k] - c * qk + row[j];
      const double score = f[k] - c * xp + (usable ? ck.kappa * pt + ck.shift : 0.0);
      EXPECT_NEAR(engine, score, 1e-12) << "cell " << k << " point " << j;
    }
  }
}

// |a - b|^2 over d coordinates.
double dist2(const double* a, const double* b, std::int64_t d) {
  double s = 0;
  for (std::int64_t k = 0; k < d; ++k) s += (a[k] - b[k]) * (a[k] - b[k]);
  return s;
}

// -eps log sum_k w_k exp(s_k / eps), in double.
double neg_lse(const std::vector<double>& s, const std::vector<double>& w, double eps) {
  double mx = -HUGE_VAL;
  for (std::size_t k = 0; k < s.size(); ++k)
    if (w[k] > 0) mx = std::max(mx, s[k]);
  double sum = 0;
  for (std::size_t k = 0; k < s.size(); ++k)
    if (w[k] > 0) sum += w[k] * std::exp((s[k] - mx) / eps);
  return -mx - eps * std::log(sum);
}

// The method in float64, independently of the solver's plumbing: the clouds (x uniform,
// y = (0.8 u + 0.1)^2) at 4,096 points a side, Morton-sorted, cells of 8, eps = 0.05 (the cells'
// median 2 c s / eps ~ 0.1, as at 2^20 points and the eps), the coarse problem solved by
// the dense float64 solver. Lifted g_0 over the x cells, f_1 = T(g_0) over every point pair:
// the column error of (f_1, g_0) of the Gaussian lift (its operands, row shift and all, as the
// engines receive them) is below the centroids' lift's (0.0169 against 0.0226 here; a numpy
// model of the same data and eps: 0.0147 against 0.0205, and 4.1e-3 against 9.2e-3 at eps 0.1).
TEST(MultiscaleLift, TheGaussianLiftsFirstPairIsNearerItsMarginals) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> U(0.0, 1.0);
  const std::int64_t n = 4096, d = 3, cell = 8, K = n / cell;
  const double eps = 0.05, c = 1.0;
  std::vector<double> x0(n * d), y0(n * d);
  for (double& v : x0) v = U(rng);
  for (double& v : y0) {
    const double u = 0.8 * U(rng) + 0.1;
    v = u * u;
  }
  multiscale::Order ox, oy;
  multiscale::morton_order(x0.data(), n, y0.data(), n, int(d), &ox, &oy, 1);
  std::vector<double> x(n * d), y(n * d);
  for (std::int64_t k = 0; k < n; ++k)
    for (std::int64_t a = 0; a < d; ++a) {
      x[k * d + a] = x0[ox[k] * d + a];
      y[k * d + a] = y0[oy[k] * d + a];
    }
  // Cells: centroids, masses, spreads (uniform weights 1 / n).
  auto cells = [&](const std::vector<double>& p, std::vector<double>* cen,
                   std::vector<double>* spread) {
    cen->assign(K * d, 0.0);
    spread->assign(K, 0.0);
    for (std::int64_t k = 0; k < K; ++k) {
      for (std::int64_t i = k * cell; i < (k + 1) * cell; ++i)
        for (std::int64_t a = 0; a < d; ++a) (*cen)[k * d + a] += p[i * d + a] / cell;
      for (std::int64_t i = k * cell; i < (k + 1) * cell; ++i)
        for (std::int64_t a = 0; a < d; ++a) {
          const double v = p[i * d + a] - (*cen)[k * d + a];
          (*spread)[k] += v * v / double(cell * d);
        }
    }
  };
  std::vector<double> xc, yc, sx, sy;
  cells(x, &xc, &sx);
  cells(y, &yc, &sy);
  std::vector<double> r(sx.size());
  for (std::size_t k = 0; k < sx.size(); ++k) r[k] = 2 * c * sx[k] / eps;
  std::nth_element(r.begin(), r.begin() + r.size() / 2, r.end());
  ASSERT_LT(r[r.size() / 2], multiscale::kMaxMedianCellRatio);
  EXPECT_DOUBLE_EQ(multiscale::median_cell_ratio(sx, c, eps), r[r.size() / 2]);
  // The coarse problem, solved dense in float64 to a tight tolerance.
  Context ctx(ContextOptions{Backend::kCpu, 2});
  Problem<double> coarse;
  coarse.cost = SqEuclidean<double>{host_matrix(xc.data(), K, d), host_matrix(yc.data(), K, d), c};
  coarse.epsilon = eps;
  SinkhornOptions o;
  o.tolerance = 1e-10;
  Potentials<double> pc;
  ASSERT_TRUE(solve_sinkhorn(ctx, coarse, o, &pc).converged());
  const std::vector<double> fc = to_host(ctx, pc.f.cview()), gc = to_host(ctx, pc.g.cview());
  const std::vector<double> wc(K, 1.0 / K), wp(n, 1.0 / n);
  // The coarse plan's images of the x cells and their masses.
  std::vector<double> images(K * d, 0.0), mass(K, 0.0);
  for (std::int64_t I = 0; I < K; ++I)
    for (std::int64_t J = 0; J < K; ++J) {
      const double cost = dist2(&xc[I * d], &yc[J * d], d);
      const double pij = std::exp((fc[I] + gc[J] - c * cost) / eps) / double(K * K);
      mass[I] += pij;
      for (std::int64_t a = 0; a < d; ++a) images[I * d + a] += pij * yc[J * d + a];
    }
  // g_0 both ways.
  const double mid[3] = {0.5, 0.5, 0.5};
  std::vector<double> keys, shift;
  detail::UninitVector<double> queries, row;
  multiscale::lift_keys(xc.data(), sx.data(), images.data(), mass.data(), K, int(d), mid, c, eps, 1,
                        &keys, &shift);
  multiscale::lift_queries(y.data(), n, int(d), mid, c, 1, &queries, &row);
  std::vector<double> g_plain(n), g_gauss(n), sc(K);
  for (std::int64_t j = 0; j < n; ++j) {
    for (std::int64_t I = 0; I < K; ++I) sc[I] = fc[I] - c * dist2(&xc[I * d], &y[j * d], d);
    g_plain[j] = neg_lse(sc, wc, eps);
    for (std::int64_t I = 0; I < K; ++I)
      sc[I] = fc[I] + shift[I] - c * dist2(&queries[j * (d + 1)], &keys[I * (d + 1)], d + 1);
    g_gauss[j] = neg_lse(sc, wc, eps) - row[j];
  }
  // The column error of (f_1, g_0), f_1 = T(g_0) over every pair.
  auto column_error = [&](const std::vector<double>& g0) {
    std::vector<double> f1(n), s(n), col(n, 0.0);
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t j = 0; j < n; ++j) s[j] = g0[j] - c * dist2(&x[i * d], &y[j * d], d);
      f1[i] = neg_lse(s, wp, eps);
      for (std::int64_t j = 0; j < n; ++j)
        col[j] += std::exp((f1[i] + s[j]) / eps) / double(n) / double(n);
    }
    double e = 0;
    for (std::int64_t j = 0; j < n; ++j) e += std::abs(col[j] - 1.0 / double(n));
    return e;
  };
  const double e_plain = column_error(g_plain), e_gauss = column_error(g_gauss);
  EXPECT_LT(e_gauss, 0.8 * e_plain) << "Gaussian " << e_gauss << ", centroids " << e_plain;
}

// The probe's excess (lift_excess): sum_J b_J (e^delta_J - 1)_+ / sum_J b_J with delta_J =
// (coarse_J - (probe_J - shift_J)) / eps, by hand: a cell credited less (delta < 0) counts
// nothing, delta = ln 2 on a quarter of the mass gives 1/4, delta = ln 3 on half of it 1, a
// delta past 50 counts as 50, a NaN makes the verdict NaN (no tolerance accepts it).
TEST(MultiscaleLift, TheProbesExcessIsTheExtraCreditedMass) {
  const double eps = 0.01;
  const std::vector<double> b = {1, 1, 2};
  const std::vector<double> shift = {0.5, -1.0, 2.0};
  auto excess = [&](const std::vector<double>& delta) {
    std::vector<double> coarse(3), probe(3);
    for (std::size_t j = 0; j < 3; ++j) {
      coarse[j] = 0.25 * double(j);
      probe[j] = coarse[j] - delta[j] * eps + shift[j];
    }
    return multiscale::lift_excess(coarse.data(), probe.data(), shift.data(), b.data(), 3, eps);
  };
  EXPECT_EQ(excess({-1.0, -0.5, -3.0}), 0.0);
  EXPECT_NEAR(excess({std::log(2.0), -0.5, -3.0}), 0.25, 1e-12);
  EXPECT_NEAR(excess({-1.0, -0.5, std::log(3.0)}), 1.0, 1e-12);
  EXPECT_NEAR(excess({-1.0, 80.0, 0.0}), std::expm1(50.0) / 4, 1e-12 * std::expm1(50.0));
  EXPECT_TRUE(std::isnan(excess({0.0, std::nan(""), 0.0})));
  // A cell of zero weight counts nothing, NaN or not; no weight at all gives NaN.
  const std::vector<double> zero = {0, 0, 0}, flat = {0, 0, 0}, holed = {0, std::nan(""), 0};
  std::vector<double> b0 = b;
  b0[1] = 0;
  EXPECT_EQ(multiscale::lift_excess(flat.data(), holed.data(), zero.data(), b0.data(), 3, eps),
            0.0);
  EXPECT_TRUE(std::isnan(
      multiscale::lift_excess(flat.data(), flat.data(), zero.data(), zero.data(), 3, eps)));
}

// In the solver: both lifts certify the same solution (the clouds at 16,384 points, eps
// 0.02, where the level takes the Gaussian lift; under the sanitizers 8,192 points at eps 0.04);
// at eps = 0.0025 the level's median is past kMaxMedianCellRatio and the two solves are one, bit
// for bit.
void check_solver_lifts(Backend backend) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> U(0.0, 1.0);
  // Under the sanitizers 8,192 points at eps 0.04 (the lift is taken there too: its cells are
  // narrow enough against that eps), the lifted case only (the other eps solves the default
  // path, twice, which the multiscale tests run there already): at 16,384 points and eps 0.02
  // the fine level's dense fallback took two minutes of the sanitizer stage.
  const bool sanitizer = std::getenv("KANTOR_UNDER_SANITIZER") != nullptr;
  const std::int64_t n = sanitizer ? 8192 : 16384, d = 3;
  const double lifted_eps = sanitizer ? 0.04 : 0.02;
  std::vector<float> x(n * d), y(n * d);
  for (float& v : x) v = float(U(rng));
  for (float& v : y) {
    const double u = 0.8 * U(rng) + 0.1;
    v = float(u * u);
  }
  Context ctx(ContextOptions{backend, 2});
  Problem<float> p;
  p.cost = SqEuclidean<float>{host_matrix(x.data(), n, d), host_matrix(y.data(), n, d), 1.0};
  SinkhornOptions o;
  o.solver = SolverKind::kMultiscale;
  o.tolerance = 5e-3;
  o.record_iterations = true;
  o.multiscale.verify = true;
  ASSERT_TRUE(o.multiscale.gaussian_lift) << "on by default";
  SinkhornOptions plain = o;
  plain.multiscale.gaussian_lift = false;
  plain.multiscale.verify = false;  // the dense float64 checks dominate the test's time
  for (const double eps : {lifted_eps, 0.0025}) {
    if (sanitizer && eps != lifted_eps) continue;
    p.epsilon = eps;
    Potentials<float> pg, pp;
    SinkhornOptions og = o;
    og.multiscale.verify = eps == lifted_eps;  // at 0.0025 the two solves are one path
    const SinkhornSummary sg = solve_sinkhorn(ctx, p, og, &pg);
    const SinkhornSummary sp = solve_sinkhorn(ctx, p, plain, &pp);
    ASSERT_TRUE(sg.converged()) << sg.full_report();
    ASSERT_TRUE(sp.converged()) << sp.full_report();
    if (og.multiscale.verify) EXPECT_GE(sg.marginal_error, sg.verified_error) << eps;
    EXPECT_NEAR(sg.dual_cost, sp.dual_cost, 2e-5 * std::abs(sp.dual_cost)) << eps;
    ASSERT_FALSE(sg.records.empty());
    ASSERT_FALSE(sp.records.empty());
    if (eps == lifted_eps) {  // the Gaussian lift ran (its probe passed): another first pair
      EXPECT_EQ(sg.solver_note.find("declined"), std::string::npos) << sg.solver_note;
      EXPECT_GT(std::abs(sg.records.front().marginal_error - sp.records.front().marginal_error),
                1e-3 * sp.records.front().marginal_error);
    } else {  // one path (the CUDA engine's residual sums may differ in rounding)
      EXPECT_NEAR(sg.records.front().marginal_error, sp.records.front().marginal_error,
                  1e-9 + 1e-5 * sp.records.front().marginal_error);
      EXPECT_EQ(sg.fine_updates, sp.fine_updates);
    }
  }
}

TEST(MultiscaleLift, BothLiftsCertifyTheSameSolution) { check_solver_lifts(Backend::kCpu); }

TEST(CudaMultiscaleLift, BothLiftsCertifyTheSameSolution) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  check_solver_lifts(Backend::kCuda);
}

}  // namespace
}  // namespace kantor::testing
