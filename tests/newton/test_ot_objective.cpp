// DivergenceObjective (kantor/ot_objectives.hpp) on the CPU engine, in float64 and float32: its
// gradient against central differences of its own values (S_eps and plain OT_eps), its
// Hessian-vector products against central differences of its own gradients, the reuse of a
// trial point's solve by the gradient call that follows it (solves()), warm starts after
// accepted() (fewer Sinkhorn iterations), construction errors (InvalidArgument naming the
// problem), non-finite positions (false, no solve), and small shape-matching runs of minimize()
// with every method (S_eps from its initial value to ~0).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kantor/context.hpp"
#include "kantor/error.hpp"
#include "kantor/newton.hpp"
#include "kantor/ot_objectives.hpp"
#include "kantor/sinkhorn.hpp"

namespace kantor::testing {
namespace {

Context cpu_context() { return Context(ContextOptions{Backend::kCpu, 2}); }

/// The arrays of one problem: source x (the initial positions; the objective's variable), target
/// y, optional weights, in float64 and in the solver's type T. Owns everything the Problem<T>
/// views point at.
template <class T>
struct Clouds {
  std::int64_t n = 0, m = 0, d = 0;
  std::vector<double> x, y, a, b;  // float64 (a, b empty: uniform)
  std::vector<T> xt, yt, at, bt;
  double eps = 0.1;

  Problem<T> problem() const {
    Problem<T> p;
    p.cost = SqEuclidean<T>{host_matrix<const T>(xt.data(), n, d),
                            host_matrix<const T>(yt.data(), m, d), 1.0};
    if (!at.empty()) p.a = host_vector<const T>(at.data(), n);
    if (!bt.empty()) p.b = host_vector<const T>(bt.data(), m);
    p.epsilon = eps;
    // float32: the certificate is evaluated on the caller's float64 coordinates (the objective
    // replaces reference_x by the positions it is given). Both are set here: validate() refuses
    // one side only (see Fp32ProblemWithoutBothReferencesIsUsable).
    if (std::is_same<T, float>::value) {
      p.reference_x = host_matrix<const double>(x.data(), n, d);
      p.reference_y = host_matrix<const double>(y.data(), m, d);
    }
    return p;
  }
};

/// Source N(0, 0.5^2), target N(0.7, 0.4^2) per coordinate; random weights (same total) when
/// `weights`.
template <class T>
Clouds<T> make_clouds(std::int64_t n, std::int64_t m, std::int64_t d, double eps, bool weights,
                      unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> sx(0.0, 0.5), sy(0.7, 0.4);
  std::uniform_real_distribution<double> u(0.5, 1.5);
  Clouds<T> c;
  c.n = n;
  c.m = m;
  c.d = d;
  c.eps = eps;
  for (std::int64_t i = 0; i < n * d; ++i) c.x.push_back(sx(rng));
  for (std::int64_t j = 0; j < m * d; ++j) c.y.push_back(sy(rng));
  if (weights) {
    double ta = 0, tb = 0;
    for (std::int64_t i = 0; i < n; ++i) ta += c.a.emplace_back(u(rng));
    for (std::int64_t j = 0; j < m; ++j) tb += c.b.emplace_back(u(rng));
    for (double& v : c.b) v *= ta / tb;
  }
  c.xt.assign(c.x.begin(), c.x.end());
  c.yt.assign(c.y.begin(), c.y.end());
  c.at.assign(c.a.begin(), c.a.end());
  c.bt.assign(c.b.begin(), c.b.end());
  return c;
}

std::vector<double> random_direction(std::size_t size, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd;
  std::vector<double> v(size);
  for (double& e : v) e = nd(rng);
  return v;
}

double inf_norm(const std::vector<double>& v) {
  double m = 0;
  for (double e : v) m = std::max(m, std::abs(e));
  return m;
}

/// Tight inner solves: the finite differences divide value (gradient) errors by the step.
template <class T>
SinkhornOptions fd_sinkhorn_options() {
  SinkhornOptions o;
  o.tolerance = std::is_same<T, double>::value ? 1e-12 : 1e-5;
  return o;
}
template <class T>
HvpOptions fd_hvp_options() {
  HvpOptions o;
  o.tolerance = std::is_same<T, double>::value ? 1e-11 : 1e-5;
  return o;
}

/// Central-difference step and the accuracy it gives, relative to the largest gradient (HVP)
/// component. float64: step 1e-4, values solved to 1e-12 (value error ~1e-12 / 1e-4 plus a
/// truncation ~1e-8 |f'''|). float32: values carry ~1e-7 relative rounding, so a larger step
/// (3e-3) and a coarser comparison.
template <class T>
double fd_step() {
  return std::is_same<T, double>::value ? 1e-4 : 3e-3;
}
/// Measured worst errors relative to the largest component: gradient 6e-9 (fp64), 4e-5
/// (fp32); HVP 2e-7 (fp64), 2.3e-4 (fp32). The bounds keep a margin of 5 to 10.
template <class T>
double fd_gradient_rtol() {
  return std::is_same<T, double>::value ? 5e-8 : 5e-4;
}
template <class T>
double fd_hvp_rtol() {
  return std::is_same<T, double>::value ? 1e-6 : 3e-3;
}

struct FdCase {
  bool debiased;
  bool weights;
  double eps;
};

template <class T>
void check_gradient_against_values(const FdCase& fc) {
  SCOPED_TRACE(std::string(std::is_same<T, double>::value ? "float64" : "float32") +
               (fc.debiased ? ", S_eps" : ", OT_eps") + (fc.weights ? ", weights" : "") + ", eps " +
               std::to_string(fc.eps));
  const Context ctx = cpu_context();
  const Clouds<T> c = make_clouds<T>(7, 9, 2, fc.eps, fc.weights, 3);
  DivergenceObjective<T> f(ctx, c.problem(), fd_sinkhorn_options<T>(), fd_hvp_options<T>(),
                           fc.debiased);
  const std::int64_t N = f.num_parameters();
  ASSERT_EQ(N, c.n * c.d);
  std::vector<double> g(std::size_t(N), 0.0);
  double fx = 0;
  ASSERT_TRUE(f.evaluate(c.x.data(), &fx, g.data()));
  const double h = fd_step<T>(), scale = inf_norm(g);
  ASSERT_GT(scale, 1e-3) << "the comparison must not be empty";
  double worst = 0;
  for (std::int64_t i = 0; i < N; ++i) {
    std::vector<double> xp = c.x, xm = c.x;
    xp[std::size_t(i)] += h;
    xm[std::size_t(i)] -= h;
    double fp = 0, fm = 0;
    ASSERT_TRUE(f.evaluate(xp.data(), &fp, nullptr));
    ASSERT_TRUE(f.evaluate(xm.data(), &fm, nullptr));
    const double fd = (fp - fm) / (2 * h);
    worst = std::max(worst, std::abs(fd - g[std::size_t(i)]));
    EXPECT_NEAR(fd, g[std::size_t(i)], fd_gradient_rtol<T>() * scale) << "component " << i;
  }
  std::printf("gradient vs central differences: max error %.3g (|g|_inf %.3g)\n", worst, scale);
  if (fc.debiased) {
    // S_eps(x, y) >= 0, and 0 only for equal measures.
    EXPECT_GT(fx, 0);
  }
}

template <class T>
void check_hvp_against_gradients(const FdCase& fc) {
  SCOPED_TRACE(std::string(std::is_same<T, double>::value ? "float64" : "float32") +
               (fc.debiased ? ", S_eps" : ", OT_eps") + (fc.weights ? ", weights" : ""));
  const Context ctx = cpu_context();
  const Clouds<T> c = make_clouds<T>(7, 9, 2, fc.eps, fc.weights, 5);
  DivergenceObjective<T> f(ctx, c.problem(), fd_sinkhorn_options<T>(), fd_hvp_options<T>(),
                           fc.debiased);
  const std::size_t N = std::size_t(f.num_parameters());
  std::vector<double> g(N), gp(N), gm(N), hv(N);
  double fx = 0, fp = 0, fm = 0;
  ASSERT_TRUE(f.evaluate(c.x.data(), &fx, g.data()));
  const std::int64_t cg_before = f.hvp_cg_iterations();
  for (unsigned seed : {11u, 12u}) {
    const std::vector<double> v = random_direction(N, seed);
    // The HVP refers to the last gradient point: re-evaluate at x after the differences below.
    ASSERT_TRUE(f.evaluate(c.x.data(), &fx, g.data()));
    ASSERT_TRUE(f.hessian_vector(v.data(), hv.data()));
    const double h = fd_step<T>();
    std::vector<double> xp = c.x, xm = c.x;
    for (std::size_t i = 0; i < N; ++i) {
      xp[i] += h * v[i];
      xm[i] -= h * v[i];
    }
    ASSERT_TRUE(f.evaluate(xp.data(), &fp, gp.data()));
    ASSERT_TRUE(f.evaluate(xm.data(), &fm, gm.data()));
    const double scale = inf_norm(hv);
    ASSERT_GT(scale, 1e-3);
    double worst = 0;
    for (std::size_t i = 0; i < N; ++i) {
      const double fd = (gp[i] - gm[i]) / (2 * h);
      worst = std::max(worst, std::abs(fd - hv[i]));
      EXPECT_NEAR(fd, hv[i], fd_hvp_rtol<T>() * scale) << "component " << i << ", seed " << seed;
    }
    std::printf("HVP vs central differences of the gradient: max error %.3g (|Hv|_inf %.3g)\n",
                worst, scale);
  }
  EXPECT_GT(f.hvp_cg_iterations(), cg_before) << "the inner CG ran";
}

const FdCase kFdCases[] = {
    {true, false, 0.3}, {true, true, 0.1}, {false, false, 0.3}, {false, true, 0.1}};

TEST(DivergenceObjective, Fp64GradientMatchesCentralDifferencesOfItsValue) {
  for (const FdCase& fc : kFdCases) check_gradient_against_values<double>(fc);
}
TEST(DivergenceObjective, Fp32GradientMatchesCentralDifferencesOfItsValue) {
  for (const FdCase& fc : kFdCases) check_gradient_against_values<float>(fc);
}
TEST(DivergenceObjective, Fp64HessianVectorMatchesCentralDifferencesOfItsGradient) {
  for (const FdCase& fc : kFdCases) check_hvp_against_gradients<double>(fc);
}
TEST(DivergenceObjective, Fp32HessianVectorMatchesCentralDifferencesOfItsGradient) {
  for (const FdCase& fc : kFdCases) check_hvp_against_gradients<float>(fc);
}

// Value-only trial evaluation, then the gradient call at the same x (bitwise), as minimize()
// does for an accepted trial: one solve, the same value.
template <class T>
void check_trial_solve_is_reused(bool debiased) {
  const Context ctx = cpu_context();
  const Clouds<T> c = make_clouds<T>(10, 12, 2, 0.1, true, 7);
  DivergenceObjective<T> f(ctx, c.problem(), SinkhornOptions{}, HvpOptions{}, debiased);
  const std::size_t N = std::size_t(f.num_parameters());
  std::vector<double> g(N), g2(N), hv(N);
  double v0 = 0, v1 = 0, v2 = 0;
  EXPECT_EQ(f.solves(), 0);
  ASSERT_TRUE(f.evaluate(c.x.data(), &v0, g.data()));
  EXPECT_EQ(f.solves(), 1);
  const std::int64_t iterations_after_first = f.sinkhorn_iterations();
  EXPECT_GT(iterations_after_first, 0);

  std::vector<double> trial = c.x;
  for (std::size_t i = 0; i < N; ++i) trial[i] += 0.05 * (i % 3 == 0 ? 1.0 : -0.5);
  ASSERT_TRUE(f.evaluate(trial.data(), &v1, nullptr));
  EXPECT_EQ(f.solves(), 2);
  const std::int64_t iterations_after_trial = f.sinkhorn_iterations();
  ASSERT_TRUE(f.evaluate(trial.data(), &v2, g2.data()));
  EXPECT_EQ(f.solves(), 2) << "the gradient call at the trial point reuses its solve";
  EXPECT_EQ(f.sinkhorn_iterations(), iterations_after_trial);
  EXPECT_EQ(v1, v2) << "the same solve, the same value";
  // The HVP point moved to the trial point with the gradient call.
  ASSERT_TRUE(f.hessian_vector(g2.data(), hv.data()));

  // A value-only call at another point is a new solve; the gradient call at a third point too
  // (the kept trial is not at that x).
  std::vector<double> other = trial;
  other[0] += 1e-3;
  ASSERT_TRUE(f.evaluate(other.data(), &v1, nullptr));
  EXPECT_EQ(f.solves(), 3);
  std::vector<double> third = other;
  third[1] += 1e-3;
  ASSERT_TRUE(f.evaluate(third.data(), &v2, g2.data()));
  EXPECT_EQ(f.solves(), 4);
  // The value-only solve at `other` is still kept (the gradient call at `third` did not match
  // it): a gradient call at `other` reuses it as well.
  ASSERT_TRUE(f.evaluate(other.data(), &v2, g2.data()));
  EXPECT_EQ(f.solves(), 4);
  EXPECT_EQ(v1, v2);
  // Now it is consumed: a second gradient call at `other` solves again.
  ASSERT_TRUE(f.evaluate(other.data(), &v2, g2.data()));
  EXPECT_EQ(f.solves(), 5);
}

TEST(DivergenceObjective, GradientCallAfterATrialEvaluationReusesItsSolve) {
  check_trial_solve_is_reused<double>(true);
  check_trial_solve_is_reused<double>(false);
  check_trial_solve_is_reused<float>(true);
}

// accepted(x) keeps x's potentials: a later solve at a nearby point starts from them (at the
// target eps, no annealing) and needs fewer Sinkhorn iterations than a cold one.
template <class T>
void check_warm_start(bool debiased) {
  SCOPED_TRACE(std::string(std::is_same<T, double>::value ? "float64" : "float32") +
               (debiased ? ", S_eps" : ", OT_eps"));
  const Context ctx = cpu_context();
  const Clouds<T> c = make_clouds<T>(30, 40, 2, 0.02, false, 9);
  const std::size_t N = std::size_t(c.n * c.d);
  std::vector<double> g(N), near = c.x;
  const std::vector<double> v = random_direction(N, 4);
  for (std::size_t i = 0; i < N; ++i) near[i] += 1e-3 * v[i];
  double value = 0;

  DivergenceObjective<T> cold(ctx, c.problem(), SinkhornOptions{}, HvpOptions{}, debiased);
  ASSERT_TRUE(cold.evaluate(c.x.data(), &value, g.data()));
  const std::int64_t cold_first = cold.sinkhorn_iterations();
  ASSERT_TRUE(cold.evaluate(near.data(), &value, g.data()));  // no accepted(): cold again
  const std::int64_t cold_near = cold.sinkhorn_iterations() - cold_first;
  const double cold_value = value;

  DivergenceObjective<T> warm(ctx, c.problem(), SinkhornOptions{}, HvpOptions{}, debiased);
  ASSERT_TRUE(warm.evaluate(c.x.data(), &value, g.data()));
  EXPECT_EQ(warm.sinkhorn_iterations(), cold_first) << "the same first solve";
  warm.accepted(c.x.data());
  const std::int64_t before = warm.sinkhorn_iterations();
  ASSERT_TRUE(warm.evaluate(near.data(), &value, g.data()));
  const std::int64_t warm_near = warm.sinkhorn_iterations() - before;
  std::printf("Sinkhorn iterations at a nearby point: cold %lld, warm %lld\n",
              static_cast<long long>(cold_near), static_cast<long long>(warm_near));
  EXPECT_GT(warm_near, 0);
  // Measured (fp64, eps 0.02, tolerance 1e-9): cold 790, warm 440 for S_eps; 710 / 410 for OT.
  EXPECT_LT(warm_near, cold_near) << "a warm start from a point 1e-3 away";
  // Both solves are converged to the tolerance: the same value up to it.
  const double tol = std::is_same<T, double>::value ? 1e-8 : 1e-3;
  EXPECT_NEAR(value, cold_value, tol * (1 + std::abs(cold_value)));
}

TEST(DivergenceObjective, AcceptedPointWarmStartsLaterSolves) {
  check_warm_start<double>(true);
  check_warm_start<double>(false);
  check_warm_start<float>(true);
}

// Expects `fn` to throw InvalidArgument whose message contains every part.
template <class Fn>
void expect_invalid(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no InvalidArgument; expected one naming " << parts.front();
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    for (const std::string& p : parts)
      EXPECT_NE(what.find(p), std::string::npos) << "expected '" << p << "' in: " << what;
  }
}

TEST(DivergenceObjective, InvalidConstructionThrowsNamingTheProblem) {
  const Context ctx = cpu_context();
  const Clouds<double> c = make_clouds<double>(6, 5, 2, 0.1, false, 1);
  // A label-augmented cost: its derivatives are not implemented.
  const std::vector<std::int32_t> lx = {0, 1, 0, 1, 0, 1}, ly = {1, 0, 1, 0, 1};
  const std::vector<double> W = {0.0, 1.0, 1.0, 0.0};
  Problem<double> labelled = c.problem();
  LabelAugmented<double> la;
  la.features = labelled.features();
  la.labels_x = host_vector<const std::int32_t>(lx.data(), 6);
  la.labels_y = host_vector<const std::int32_t>(ly.data(), 5);
  la.table = host_matrix<const double>(W.data(), 2, 2);
  labelled.cost = la;
  expect_invalid([&] { DivergenceObjective<double> f(ctx, labelled); },
                 {"DivergenceObjective", "squared-Euclidean", "label"});
  expect_invalid([&] { DivergenceObjective<double> f(ctx, labelled, {}, {}, false); },
                 {"squared-Euclidean"});

  // Invalid Sinkhorn options: the field and its value.
  SinkhornOptions bad_scaling;
  bad_scaling.scaling = 1.5;
  expect_invalid([&] { DivergenceObjective<double> f(ctx, c.problem(), bad_scaling); },
                 {"DivergenceObjective", "scaling", "1.5"});
  SinkhornOptions bad_tolerance;
  bad_tolerance.tolerance = -1;
  expect_invalid([&] { DivergenceObjective<double> f(ctx, c.problem(), bad_tolerance); },
                 {"tolerance"});
  // Invalid HVP options.
  HvpOptions bad_hvp;
  bad_hvp.tolerance = 0;
  expect_invalid([&] { DivergenceObjective<double> f(ctx, c.problem(), {}, bad_hvp); },
                 {"DivergenceObjective", "HvpOptions::tolerance"});
  HvpOptions bad_hvp_iterations;
  bad_hvp_iterations.max_iterations = 0;
  expect_invalid([&] { DivergenceObjective<double> f(ctx, c.problem(), {}, bad_hvp_iterations); },
                 {"HvpOptions::max_iterations", "0"});
  // An invalid problem: validate()'s message.
  Problem<double> bad_eps = c.problem();
  bad_eps.epsilon = 0;
  expect_invalid([&] { DivergenceObjective<double> f(ctx, bad_eps); }, {"epsilon"});
  Problem<double> mismatch = c.problem();
  mismatch.features().y = host_matrix<const double>(c.y.data(), 2, 5);  // 5-D target
  expect_invalid([&] { DivergenceObjective<double> f(ctx, mismatch); }, {"dimension mismatch"});
  // float32 as well.
  const Clouds<float> cf = make_clouds<float>(6, 5, 2, 0.1, false, 1);
  expect_invalid([&] { DivergenceObjective<float> f(ctx, cf.problem(), bad_scaling); },
                 {"scaling"});
}

template <class T>
void check_non_finite_positions() {
  const Context ctx = cpu_context();
  const Clouds<T> c = make_clouds<T>(6, 5, 2, 0.1, false, 2);
  DivergenceObjective<T> f(ctx, c.problem());
  const std::size_t N = std::size_t(f.num_parameters());
  std::vector<double> g(N, 7.0), hv(N);
  double value = 0;
  ASSERT_TRUE(f.evaluate(c.x.data(), &value, g.data()));
  const std::int64_t solves = f.solves();
  for (const double bad :
       {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
        -std::numeric_limits<double>::infinity()}) {
    std::vector<double> x = c.x;
    x[3] = bad;
    double v = 42;
    EXPECT_FALSE(f.evaluate(x.data(), &v, nullptr)) << bad;
    EXPECT_FALSE(f.evaluate(x.data(), &v, g.data())) << bad;
  }
  EXPECT_EQ(f.solves(), solves) << "no solve at a non-finite point";
  // The HVP point is still the last good gradient point.
  EXPECT_TRUE(f.hessian_vector(g.data(), hv.data()));
  for (double e : hv) EXPECT_TRUE(std::isfinite(e));
}

TEST(DivergenceObjective, NonFinitePositionsReturnFalseWithoutASolve) {
  check_non_finite_positions<double>();
  check_non_finite_positions<float>();
}

// A float32 problem as a caller writes it: no reference coordinates (the certificate on the
// float32 points), or the target's float64 coordinates only (what `kantor newton --precision
// fp32` passes). The objective sets reference_x to the positions it is given at every solve, so
// both must give a working objective, whose value matches the one with both references set.
TEST(DivergenceObjective, Fp32ProblemWithoutBothReferencesIsUsable) {
  const Context ctx = cpu_context();
  const Clouds<float> c = make_clouds<float>(8, 6, 2, 0.1, false, 4);
  const std::size_t N = std::size_t(c.n * c.d);
  std::vector<double> g(N);
  double want = 0;
  {
    DivergenceObjective<float> both(ctx, c.problem());
    ASSERT_TRUE(both.evaluate(c.x.data(), &want, g.data()));
  }
  for (const bool with_y : {false, true}) {
    SCOPED_TRACE(with_y ? "reference_y only" : "no references");
    Problem<float> p = c.problem();
    p.reference_x = {};
    if (!with_y) p.reference_y = {};
    try {
      DivergenceObjective<float> f(ctx, p);
      double value = 0;
      EXPECT_TRUE(f.evaluate(c.x.data(), &value, g.data()));
      EXPECT_NEAR(value, want, 1e-4 * (1 + std::abs(want)));
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw: " << e.what();
    }
  }
}

TEST(DivergenceObjective, HessianVectorBeforeAnyGradientReturnsFalse) {
  const Context ctx = cpu_context();
  const Clouds<double> c = make_clouds<double>(6, 5, 2, 0.1, false, 2);
  DivergenceObjective<double> f(ctx, c.problem());
  std::vector<double> v(12, 1.0), out(12);
  EXPECT_FALSE(f.hessian_vector(v.data(), out.data()));
  double value = 0;
  ASSERT_TRUE(f.evaluate(c.x.data(), &value, nullptr));  // a value-only call sets no HVP point
  EXPECT_FALSE(f.hessian_vector(v.data(), out.data()));
}

// Shape matching: 24 source points onto 24 target points (a square grid pattern, shifted and
// scaled). S_eps >= 0 with S_eps = 0 exactly at a permutation of the target: every method drives
// it from its initial value to ~0 and moves the points onto the target.
struct MatchCase {
  MinimizerMethod method;
  std::int64_t max_iterations;
};

TEST(DivergenceObjective, ShapeMatchingConvergesWithEveryMethod) {
  const Context ctx = cpu_context();
  const std::int64_t n = 24, d = 2;
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<double> u(-1, 1);
  Clouds<double> c;
  c.n = c.m = n;
  c.d = d;
  c.eps = 0.05;
  for (std::int64_t i = 0; i < n; ++i) {
    // Target: a 6 x 4 grid of spacing 0.4 (well above the blur sqrt(eps) = 0.22) in
    // [0.5, 2.5] x [0, 1.2] with a little jitter; source: a blob.
    c.y.push_back(0.5 + 0.4 * double(i % 6) + 0.01 * u(rng));
    c.y.push_back(0.4 * double(i / 6) + 0.01 * u(rng));
  }
  for (std::int64_t k = 0; k < n * d; ++k) c.x.push_back(0.3 * u(rng));
  c.xt = c.x;
  c.yt = c.y;
  for (const MatchCase mc :
       {MatchCase{MinimizerMethod::kNewtonCG, 100}, MatchCase{MinimizerMethod::kLbfgs, 300},
        MatchCase{MinimizerMethod::kGradientDescent, 2000}}) {
    SCOPED_TRACE(to_string(mc.method));
    DivergenceObjective<double> f(ctx, c.problem());
    NewtonOptions options;
    options.method = mc.method;
    options.max_iterations = mc.max_iterations;
    options.gradient_tolerance = 1e-7;
    std::vector<double> x = c.x;
    const NewtonSummary s = minimize(f, options, x.data());
    std::printf("%s\n", s.brief_report().c_str());
    EXPECT_TRUE(s.converged()) << s.full_report();
    EXPECT_GT(s.initial_objective, 0.1);
    EXPECT_LT(s.final_objective, 1e-4 * s.initial_objective) << s.full_report();
    EXPECT_GE(s.final_objective, -1e-9) << "S_eps >= 0";
    EXPECT_EQ(s.gradient_count, s.accepted_steps + 1) << "one gradient per accepted iterate";
    // Every gradient call after a trial reused the trial's solve: one solve per value-only
    // evaluation plus the initial point's.
    EXPECT_EQ(f.solves(), s.evaluation_count - s.gradient_count + 1);
    if (mc.method == MinimizerMethod::kNewtonCG) {
      EXPECT_GT(s.hvp_count, 0);
    } else {
      EXPECT_EQ(s.hvp_count, 0);
    }
    // Every source point ends near a target point.
    double worst = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      double best = INFINITY;
      for (std::int64_t j = 0; j < n; ++j) {
        double dist = 0;
        for (std::int64_t k = 0; k < d; ++k) {
          const double e = x[std::size_t(i * d + k)] - c.y[std::size_t(j * d + k)];
          dist += e * e;
        }
        best = std::min(best, std::sqrt(dist));
      }
      worst = std::max(worst, best);
    }
    EXPECT_LT(worst, 0.05) << "the farthest source point from the target";
  }
}

}  // namespace
}  // namespace kantor::testing
