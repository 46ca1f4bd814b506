// The minimizer (kantor/newton.hpp): Newton-CG's local quadratic convergence, exact CG on a
// quadratic, negative curvature on a saddle, the trust region's response to a bad model or a
// point outside the domain, Rosenbrock with every method, callbacks, failures, counting,
// SumObjective and options validation.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kantor/error.hpp"
#include "kantor/newton.hpp"
#include "newton/objectives.hpp"

namespace kantor::testing {
namespace {

std::vector<double> random_point(std::int64_t n, double scale, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, scale);
  std::vector<double> x(static_cast<std::size_t>(n));
  for (double& v : x) v = normal(rng);
  return x;
}

double max_abs_diff(const std::vector<double>& x, double v) {
  double m = 0;
  for (double xi : x) m = std::max(m, std::abs(xi - v));
  return m;
}

// Central differences of the gradient and of the gradient along v against the objective's own.
void expect_consistent_derivatives(Objective& f, const std::vector<double>& x, double tol) {
  const std::int64_t n = f.num_parameters();
  std::vector<double> g(static_cast<std::size_t>(n)), gp(g), gm(g), hv(g);
  const std::vector<double> v = random_point(n, 1, 99);
  double fx, fp, fm;
  ASSERT_TRUE(f.evaluate(x.data(), &fx, g.data()));
  ASSERT_TRUE(f.hessian_vector(v.data(), hv.data()));
  const double h = 1e-6;
  for (std::int64_t i = 0; i < n; ++i) {
    std::vector<double> xp = x, xm = x;
    xp[std::size_t(i)] += h;
    xm[std::size_t(i)] -= h;
    ASSERT_TRUE(f.evaluate(xp.data(), &fp, nullptr));
    ASSERT_TRUE(f.evaluate(xm.data(), &fm, nullptr));
    EXPECT_NEAR((fp - fm) / (2 * h), g[std::size_t(i)], tol * (1 + std::abs(g[std::size_t(i)])))
        << "gradient component " << i;
  }
  std::vector<double> xp = x, xm = x;
  for (std::int64_t i = 0; i < n; ++i) {
    xp[std::size_t(i)] += h * v[std::size_t(i)];
    xm[std::size_t(i)] -= h * v[std::size_t(i)];
  }
  ASSERT_TRUE(f.evaluate(xp.data(), &fp, gp.data()));
  ASSERT_TRUE(f.evaluate(xm.data(), &fm, gm.data()));
  for (std::int64_t i = 0; i < n; ++i) {
    const double fd = (gp[std::size_t(i)] - gm[std::size_t(i)]) / (2 * h);
    EXPECT_NEAR(fd, hv[std::size_t(i)], tol * (1 + std::abs(hv[std::size_t(i)])))
        << "Hessian-vector component " << i;
  }
}

TEST(NewtonTestObjectives, DerivativesMatchFiniteDifferences) {
  LogCoshQuartic lcq(6, 9, 1.0, 3);
  expect_consistent_derivatives(lcq, random_point(6, 1.5, 4), 1e-6);
  Rosenbrock rosen(4);
  expect_consistent_derivatives(rosen, {-1.2, 1, 0.3, 0.7}, 1e-6);
  Saddle saddle;
  expect_consistent_derivatives(saddle, {0.4, 0.9}, 1e-6);
  BoxBarrier barrier(3, 3);
  expect_consistent_derivatives(barrier, {0.3, -0.5, 0.8}, 1e-5);
}

// Gradient norms of the accepted iterates, in order (iteration 0 included).
std::vector<double> accepted_gradient_norms(const NewtonSummary& s) {
  std::vector<double> out;
  for (const auto& r : s.records)
    if (r.step_accepted) out.push_back(r.gradient_norm);
  return out;
}

TEST(NewtonCG, ConvergesQuadraticallyNearTheMinimumOfASmoothConvexFunction) {
  LogCoshQuartic f(10, 15, 1.0, 7);
  std::vector<double> x = random_point(10, 2, 8);
  NewtonOptions opt;
  opt.cg_forcing_exponent = 1;  // |r| <= |g|^2: quadratic
  opt.gradient_tolerance = 1e-15;
  opt.function_tolerance = 0;
  opt.max_iterations = 40;
  const NewtonSummary s = minimize(f, opt, x.data());
  ASSERT_TRUE(s.converged() || s.termination == MinimizerTermination::kNoProgress ||
              s.termination == MinimizerTermination::kMaxIterations)
      << s.full_report();
  EXPECT_LE(s.gradient_norm, 1e-12) << s.full_report();
  const std::vector<double> g = accepted_gradient_norms(s);
  // Once close (|g| <= 0.1) and above the rounding floor of the gradient, every step squares the
  // gradient's norm up to a constant: |g_k+1| <= C |g_k|^2. A linearly (or merely
  // superlinearly with order < 2 and a worse constant) converging method fails this.
  int quadratic_steps = 0;
  std::string trace;
  for (double v : g) trace += std::to_string(v) + " ";
  for (std::size_t k = 0; k + 1 < g.size(); ++k) {
    if (g[k] > 0.1 || g[k + 1] < 1e-14) continue;
    EXPECT_LE(g[k + 1], 10 * g[k] * g[k]) << "step " << k << ", gradient norms: " << trace;
    ++quadratic_steps;
  }
  EXPECT_GE(quadratic_steps, 2) << trace;
  EXPECT_EQ(s.negative_curvature_steps, 0);
  EXPECT_TRUE(std::isnan(s.most_negative_curvature));
}

TEST(NewtonCG, DefaultForcingConvergesSuperlinearly) {
  LogCoshQuartic f(30, 40, 0.5, 11);
  std::vector<double> x = random_point(30, 1.5, 12);
  NewtonOptions opt;
  opt.gradient_tolerance = 1e-10;
  opt.function_tolerance = 0;
  const NewtonSummary s = minimize(f, opt, x.data());
  ASSERT_EQ(s.termination, MinimizerTermination::kGradientTolerance) << s.full_report();
  EXPECT_LE(s.outer_iterations, 20) << s.full_report();
  // The forcing tolerance truncates CG far from the minimum: fewer CG iterations than n there.
  EXPECT_LT(s.records[1].cg_iterations, 30);
  const std::vector<double> g = accepted_gradient_norms(s);
  ASSERT_GE(g.size(), 3u);
  // Superlinear: the ratio of consecutive gradient norms goes to 0 (the last ratio is small).
  const std::size_t k = g.size() - 2;
  EXPECT_LE(g[k + 1] / g[k], 1e-2) << s.full_report();
}

TEST(NewtonCG, SolvesAStrictlyConvexQuadraticInOneIterationWithExactCG) {
  const int n = 20;
  std::mt19937_64 rng(5);
  std::normal_distribution<double> normal;
  Matrix m(n, n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) m(i, j) = normal(rng);
  const Matrix q = Eigen::HouseholderQR<Matrix>(m).householderQ();
  Vector lambda(n);
  for (int i = 0; i < n; ++i) lambda(i) = 1 + 9.0 * i / (n - 1);  // spectrum [1, 10]
  const Matrix a = q * lambda.asDiagonal() * q.transpose();
  Vector b(n);
  for (int i = 0; i < n; ++i) b(i) = normal(rng);
  Quadratic f(a, b);
  std::vector<double> x(n, 0.0);
  NewtonOptions opt;
  opt.cg_forcing_max = 1e-12;  // CG solves the Newton system to 1e-12 relative
  opt.initial_trust_radius = 1e6;
  opt.gradient_tolerance = 1e-9;
  const NewtonSummary s = minimize(f, opt, x.data());
  ASSERT_EQ(s.termination, MinimizerTermination::kGradientTolerance) << s.full_report();
  EXPECT_EQ(s.outer_iterations, 1);
  EXPECT_LE(s.cg_iterations, n);
  EXPECT_EQ(s.hvp_count, s.cg_iterations);
  const Vector xstar = q * (q.transpose() * b).cwiseQuotient(lambda);
  EXPECT_LE((as_vector(x.data(), n) - xstar).lpNorm<Eigen::Infinity>(), 1e-9);
  ASSERT_EQ(s.records.size(), 2u);
  // The Lanczos tridiagonal of a converged CG run holds lambda_min as a Ritz value; every
  // curvature estimate is an upper bound of lambda_min.
  EXPECT_NEAR(s.records[1].min_curvature, 1.0, 1e-6);
  EXPECT_GE(s.records[1].min_curvature, 1.0 - 1e-12);
  EXPECT_FALSE(s.records[1].negative_curvature);
  EXPECT_TRUE(s.records[1].step_accepted);
  EXPECT_NEAR(s.records[1].rho, 1.0, 1e-6);
}

TEST(NewtonCG, MinCurvatureIsTheLanczosEstimateNotOnlyTheRayleighQuotients) {
  // Diagonal quadratic with spectrum {1, ..., 100} and g = 1: CG's directions have Rayleigh
  // quotients well above 1 for the first iterations, the smallest Ritz value of the tridiagonal
  // approaches 1 much faster.
  const int n = 100;
  Vector lambda(n), b = Vector::Ones(n);
  for (int i = 0; i < n; ++i) lambda(i) = 1 + i;
  Quadratic f(Matrix(lambda.asDiagonal()), b);
  std::vector<double> x(n, 0.0);
  NewtonOptions opt;
  opt.max_iterations = 1;
  opt.max_cg_iterations = 15;
  opt.cg_forcing_max = 1e-12;
  opt.initial_trust_radius = 1e6;
  const NewtonSummary s = minimize(f, opt, x.data());
  ASSERT_EQ(s.records.size(), 2u);
  EXPECT_EQ(s.records[1].cg_iterations, 15);
  EXPECT_GE(s.records[1].min_curvature, 1.0 - 1e-9);
  EXPECT_LE(s.records[1].min_curvature, 2.0) << "the Ritz value did not reach lambda_min";
}

TEST(NewtonCG, LeavesASaddleAlongNegativeCurvature) {
  for (const std::vector<double>& x0 : {std::vector<double>{0, 1e-3}, {0.3, -1e-3}}) {
    Saddle f;
    std::vector<double> x = x0;
    NewtonOptions opt;
    opt.gradient_tolerance = 1e-10;
    const NewtonSummary s = minimize(f, opt, x.data());
    std::string trace;
    for (const auto& r : s.records)
      trace += std::to_string(r.iteration) + ": f " + std::to_string(r.objective) + " cg " +
               std::to_string(r.cg_iterations) + " neg " + std::to_string(r.negative_curvature) +
               " minc " + std::to_string(r.min_curvature) + " radius " +
               std::to_string(r.trust_radius) + "\n";
    ASSERT_TRUE(s.converged()) << s.full_report() << trace;
    EXPECT_GE(s.negative_curvature_steps, 1) << trace;
    // The Hessian near the saddle is diag(2, -2 + 3 y^2), y = 1e-3 at the start.
    EXPECT_NEAR(s.most_negative_curvature, -2.0, 1e-4) << trace;
    if (x0[0] == 0) {  // g = (0, -2e-3): the first CG direction is the negative one
      EXPECT_TRUE(s.records[1].negative_curvature);
      EXPECT_NEAR(s.records[1].min_curvature, -2.0, 1e-4);
      EXPECT_DOUBLE_EQ(s.records[1].step_norm, opt.initial_trust_radius);  // to the boundary
    }
    EXPECT_NEAR(x[0], 0.0, 1e-8);
    EXPECT_NEAR(x[1], x0[1] > 0 ? std::sqrt(2.0) : -std::sqrt(2.0), 1e-8) << trace;
    EXPECT_NEAR(s.final_objective, -1.0, 1e-12);
  }
}

TEST(NewtonCG, FromExactlyOnTheStableManifoldItStopsAtTheSaddle) {
  // A documented limitation: with y = 0 exactly, the gradient and every Krylov vector have no y
  // component, so CG never sees the negative curvature and Newton converges to the saddle.
  Saddle f;
  std::vector<double> x = {1.0, 0.0};
  NewtonOptions opt;
  opt.gradient_tolerance = 1e-10;
  const NewtonSummary s = minimize(f, opt, x.data());
  EXPECT_TRUE(s.converged());
  EXPECT_EQ(s.negative_curvature_steps, 0);
  EXPECT_NEAR(x[0], 0.0, 1e-10);
  EXPECT_EQ(x[1], 0.0);
}

TEST(NewtonCG, TrustRegionShrinksAfterABadStepAndStillConverges) {
  // f = |x|^2 / 2 with a Hessian-vector product 100 times too small: the model promises a step
  // 100 times too long; the first trial (the full trust radius) overshoots.
  Quadratic base(Matrix::Identity(3, 3), Vector::Zero(3));
  Wrapped f(&base);
  f.hessian_scale = 0.01;
  std::vector<double> x = {3, -2, 1};
  NewtonOptions opt;
  opt.initial_trust_radius = 100;
  opt.max_iterations = 200;
  opt.gradient_tolerance = 1e-8;
  const NewtonSummary s = minimize(f, opt, x.data());
  ASSERT_GE(s.records.size(), 3u);
  const auto& r1 = s.records[1];
  EXPECT_FALSE(r1.step_accepted);
  EXPECT_LT(r1.rho, 0.25);
  EXPECT_DOUBLE_EQ(r1.trust_radius, 100);
  EXPECT_DOUBLE_EQ(r1.step_norm, 100);
  EXPECT_LE(s.records[2].trust_radius, 0.25 * r1.trust_radius);
  EXPECT_EQ(r1.objective, s.records[0].objective);  // the iterate did not move
  EXPECT_TRUE(s.converged()) << s.full_report();
  EXPECT_LE(max_abs_diff(x, 0), 1e-7);
  // The radius grows again after good boundary steps.
  bool grew = false;
  for (std::size_t k = 2; k < s.records.size(); ++k)
    grew = grew || s.records[k].trust_radius > s.records[k - 1].trust_radius;
  EXPECT_TRUE(grew);
}

TEST(NewtonCG, ATrialPointOutsideTheDomainIsARejectedStep) {
  BoxBarrier f(3, 3);
  std::vector<double> x(3, 0.0);  // the Newton step is 1.5 per coordinate: outside (-1, 1)
  NewtonOptions opt;
  opt.initial_trust_radius = 100;
  opt.gradient_tolerance = 1e-10;
  const NewtonSummary s = minimize(f, opt, x.data());
  ASSERT_GE(s.records.size(), 2u);
  EXPECT_FALSE(s.records[1].step_accepted);
  EXPECT_TRUE(std::isnan(s.records[1].rho));
  EXPECT_LT(s.records[2].trust_radius, s.records[1].trust_radius);
  EXPECT_TRUE(s.converged()) << s.full_report();
  EXPECT_LE(max_abs_diff(x, f.minimizer()), 1e-9);
}

TEST(LineSearchMethods, BacktrackOutOfAnInfeasibleTrialPoint) {
  for (MinimizerMethod m : {MinimizerMethod::kLbfgs, MinimizerMethod::kGradientDescent}) {
    BoxBarrier base(2, 3);
    Wrapped f(&base);
    std::vector<double> x(2, 0.0);  // g = (-3, -3): the first trial step (3, 3) is outside
    NewtonOptions opt;
    opt.method = m;
    opt.initial_trust_radius = 100;
    opt.gradient_tolerance = 1e-9;
    opt.max_iterations = 2000;
    const NewtonSummary s = minimize(f, opt, x.data());
    EXPECT_TRUE(s.converged()) << to_string(m) << "\n" << s.full_report();
    EXPECT_LE(max_abs_diff(x, base.minimizer()), 1e-6) << to_string(m);
    EXPECT_GT(s.evaluation_count, s.gradient_count) << to_string(m) << ": no backtracking";
  }
}

struct RosenbrockCase {
  std::int64_t n;
  MinimizerMethod method;
};

NewtonSummary solve_rosenbrock(std::int64_t n, MinimizerMethod method, std::vector<double>* x) {
  Rosenbrock f(n);
  x->assign(std::size_t(n), 1.0);
  for (std::int64_t i = 0; i < n; i += 2) (*x)[std::size_t(i)] = -1.2;
  NewtonOptions opt;
  opt.method = method;
  opt.gradient_tolerance = 1e-9;  // |g0| ~ 216: |g|_inf <= 2.2e-7
  opt.function_tolerance = 0;
  opt.max_iterations = method == MinimizerMethod::kGradientDescent ? 200000 : 2000;
  return minimize(f, opt, x->data());
}

TEST(Rosenbrock, EveryMethodReachesTheMinimumAndNewtonNeedsTheFewestEvaluations) {
  for (std::int64_t n : {2, 10}) {
    std::vector<double> x;
    const NewtonSummary newton = solve_rosenbrock(n, MinimizerMethod::kNewtonCG, &x);
    EXPECT_EQ(newton.termination, MinimizerTermination::kGradientTolerance) << newton.full_report();
    EXPECT_LE(max_abs_diff(x, 1), 1e-6) << "newton-cg n = " << n;
    const NewtonSummary lbfgs = solve_rosenbrock(n, MinimizerMethod::kLbfgs, &x);
    EXPECT_EQ(lbfgs.termination, MinimizerTermination::kGradientTolerance) << lbfgs.full_report();
    EXPECT_LE(max_abs_diff(x, 1), 1e-6) << "lbfgs n = " << n;
    const NewtonSummary gd = solve_rosenbrock(n, MinimizerMethod::kGradientDescent, &x);
    EXPECT_EQ(gd.termination, MinimizerTermination::kGradientTolerance) << gd.full_report();
    EXPECT_LE(max_abs_diff(x, 1), 1e-6) << "gradient descent n = " << n;
    EXPECT_LT(newton.gradient_count + newton.hvp_count, gd.gradient_count)
        << newton.brief_report() << "\n"
        << gd.brief_report();
    EXPECT_LT(lbfgs.gradient_count, gd.gradient_count);
    EXPECT_EQ(newton.hvp_count, newton.cg_iterations);
    EXPECT_EQ(lbfgs.hvp_count, 0);
    EXPECT_EQ(gd.hvp_count, 0);
  }
}

TEST(Minimize, CountsEveryCallAndReportsAcceptedIterates) {
  for (MinimizerMethod m :
       {MinimizerMethod::kNewtonCG, MinimizerMethod::kLbfgs, MinimizerMethod::kGradientDescent}) {
    Rosenbrock base(4);
    Wrapped f(&base);
    std::vector<double> x = {-1.2, 1, -1.2, 1};
    NewtonOptions opt;
    opt.method = m;
    opt.max_iterations = 30;
    const NewtonSummary s = minimize(f, opt, x.data());
    EXPECT_EQ(s.evaluation_count, f.evaluations) << to_string(m);
    EXPECT_EQ(s.gradient_count, f.gradients) << to_string(m);
    EXPECT_EQ(s.hvp_count, f.hvps) << to_string(m);
    EXPECT_EQ(f.accepted_calls, s.accepted_steps + 1) << to_string(m);  // + the initial point
    EXPECT_EQ(f.last_accepted, x) << to_string(m);
    ASSERT_EQ(std::int64_t(s.records.size()), s.outer_iterations + 1);
    std::int64_t cg = 0, accepted = 0;
    for (std::size_t k = 1; k < s.records.size(); ++k) {
      EXPECT_EQ(s.records[k].iteration, std::int64_t(k));
      cg += s.records[k].cg_iterations;
      accepted += s.records[k].step_accepted;
      EXPECT_LE(s.records[k].objective, s.records[k - 1].objective + 1e-12) << to_string(m);
    }
    EXPECT_EQ(cg, s.cg_iterations);
    EXPECT_EQ(accepted, s.accepted_steps);
    EXPECT_EQ(s.records.back().hvp_count, s.hvp_count);
    EXPECT_EQ(s.records.back().gradient_count, s.gradient_count);
    double fx;
    ASSERT_TRUE(base.evaluate(x.data(), &fx, nullptr));
    EXPECT_EQ(fx, s.final_objective);
    EXPECT_EQ(s.method, m);
    EXPECT_NE(s.brief_report().find(to_string(m)), std::string::npos);
    EXPECT_NE(s.full_report().find(to_string(s.termination)), std::string::npos);
  }
}

TEST(Minimize, FunctionToleranceAndMaxIterationsAndAStartAtTheMinimum) {
  LogCoshQuartic f(5, 8, 1.0, 21);
  {
    std::vector<double> x = random_point(5, 1, 22);
    NewtonOptions opt;
    opt.gradient_tolerance = 0;
    const NewtonSummary s = minimize(f, opt, x.data());
    EXPECT_EQ(s.termination, MinimizerTermination::kFunctionTolerance) << s.full_report();
    EXPECT_TRUE(s.converged());
  }
  {
    std::vector<double> x = random_point(5, 1, 22);
    const std::vector<double> x0 = x;
    NewtonOptions opt;
    opt.max_iterations = 0;
    const NewtonSummary s = minimize(f, opt, x.data());
    EXPECT_EQ(s.termination, MinimizerTermination::kMaxIterations);
    EXPECT_FALSE(s.converged());
    EXPECT_EQ(s.records.size(), 1u);
    EXPECT_EQ(s.evaluation_count, 1);
    EXPECT_EQ(x, x0);
    opt.max_iterations = 2;
    EXPECT_EQ(minimize(f, opt, x.data()).termination, MinimizerTermination::kMaxIterations);
    NewtonOptions tight;
    tight.gradient_tolerance = 1e-12;
    tight.function_tolerance = 0;
    ASSERT_TRUE(minimize(f, tight, x.data()).converged());
    // From the minimum: converged at iteration 0, x untouched.
    const std::vector<double> xmin = x;
    const NewtonSummary again = minimize(f, opt, x.data());
    EXPECT_EQ(again.termination, MinimizerTermination::kGradientTolerance);
    EXPECT_EQ(again.outer_iterations, 0);
    EXPECT_EQ(x, xmin);
  }
}

TEST(Minimize, NoProgressWhenEveryTrialPointFails) {
  for (MinimizerMethod m :
       {MinimizerMethod::kNewtonCG, MinimizerMethod::kLbfgs, MinimizerMethod::kGradientDescent}) {
    Quadratic base(Matrix::Identity(2, 2), Vector::Zero(2));
    Wrapped f(&base);
    std::vector<double> x = {1, 2};
    const std::vector<double> x0 = x;
    // Only the initial point can be evaluated.
    f.hook = [&](const double* p, double*, double*) { return p[0] == x0[0] && p[1] == x0[1]; };
    NewtonOptions opt;
    opt.method = m;
    opt.max_iterations = 1000;
    const NewtonSummary s = minimize(f, opt, x.data());
    EXPECT_EQ(s.termination, MinimizerTermination::kNoProgress) << s.full_report();
    EXPECT_EQ(x, x0);
    EXPECT_EQ(s.accepted_steps, 0);
  }
}

TEST(Minimize, CallbacksAbortOrStopSuccessfullyInOrder) {
  LogCoshQuartic f(4, 6, 1.0, 31);
  const std::vector<double> x0 = random_point(4, 2, 32);
  {
    std::vector<double> x = x0;
    NewtonOptions opt;
    opt.gradient_tolerance = 1e-14;
    opt.function_tolerance = 0;
    std::vector<std::int64_t> seen;
    bool third_called = false;
    opt.callbacks.push_back([&](const NewtonIterationRecord& r) {
      seen.push_back(r.iteration);
      return CallbackResult::kContinue;
    });
    opt.callbacks.push_back([](const NewtonIterationRecord& r) {
      return r.iteration == 2 ? CallbackResult::kAbort : CallbackResult::kContinue;
    });
    opt.callbacks.push_back([&](const NewtonIterationRecord& r) {
      third_called = third_called || r.iteration == 2;
      return CallbackResult::kContinue;
    });
    const NewtonSummary s = minimize(f, opt, x.data());
    EXPECT_EQ(s.termination, MinimizerTermination::kUserAbort);
    EXPECT_FALSE(s.converged());
    EXPECT_EQ(s.outer_iterations, 2);
    EXPECT_EQ(seen, (std::vector<std::int64_t>{0, 1, 2}));
    EXPECT_FALSE(third_called);
    ASSERT_EQ(s.records.size(), 3u);
    double fx;
    ASSERT_TRUE(f.evaluate(x.data(), &fx, nullptr));
    EXPECT_EQ(fx, s.records.back().objective);  // x is the iterate of the last record
  }
  {
    std::vector<double> x = x0;
    NewtonOptions opt;
    opt.record_iterations = false;
    opt.callbacks.push_back(
        [](const NewtonIterationRecord&) { return CallbackResult::kStopSuccessfully; });
    const NewtonSummary s = minimize(f, opt, x.data());
    EXPECT_EQ(s.termination, MinimizerTermination::kUserSuccess);
    EXPECT_EQ(s.outer_iterations, 0);
    EXPECT_TRUE(s.records.empty());
    EXPECT_EQ(x, x0);
  }
}

TEST(Minimize, FailuresAtTheInitialPointAreNumericalFailures) {
  Quadratic base(Matrix::Identity(2, 2), Vector::Zero(2));
  for (int kind = 0; kind < 3; ++kind) {
    Wrapped f(&base);
    f.hook = [kind](const double*, double* value, double* gradient) {
      if (kind == 0) return false;
      if (kind == 1) *value = std::numeric_limits<double>::infinity();
      if (kind == 2 && gradient) gradient[1] = std::nan("");
      return true;
    };
    std::vector<double> x = {1, 2};
    NewtonOptions opt;
    const NewtonSummary s = minimize(f, opt, x.data());
    EXPECT_EQ(s.termination, MinimizerTermination::kNumericalFailure) << kind;
    EXPECT_NE(s.message.find("initial point"), std::string::npos) << s.message;
    EXPECT_EQ(x, (std::vector<double>{1, 2}));
    EXPECT_TRUE(s.records.empty());
    EXPECT_EQ(f.accepted_calls, 0);
  }
}

TEST(Minimize, ANonFiniteGradientOrAFailedHessianProductLaterIsANumericalFailure) {
  for (MinimizerMethod m :
       {MinimizerMethod::kNewtonCG, MinimizerMethod::kLbfgs, MinimizerMethod::kGradientDescent}) {
    Quadratic base(Matrix::Identity(2, 2), Vector::Zero(2));
    Wrapped f(&base);
    // The gradient is NaN once x_0 < 0.5 (the value stays fine: the step is accepted first).
    f.hook = [](const double* p, double*, double* gradient) {
      if (gradient && p[0] < 0.5) gradient[0] = std::nan("");
      return true;
    };
    std::vector<double> x = {1, 1};
    NewtonOptions opt;
    opt.method = m;
    const NewtonSummary s = minimize(f, opt, x.data());
    EXPECT_EQ(s.termination, MinimizerTermination::kNumericalFailure) << to_string(m);
    EXPECT_NE(s.message.find("not finite"), std::string::npos) << s.message;
    EXPECT_GE(x[0], 0.5) << "x must be the last accepted iterate";
  }
  Quadratic base(Matrix::Identity(2, 2), Vector::Zero(2));
  Wrapped f(&base);
  f.hvp_fails = true;
  std::vector<double> x = {1, 1};
  const NewtonSummary s = minimize(f, NewtonOptions{}, x.data());
  EXPECT_EQ(s.termination, MinimizerTermination::kNumericalFailure);
  EXPECT_NE(s.message.find("hessian_vector"), std::string::npos) << s.message;
  EXPECT_EQ(x, (std::vector<double>{1, 1}));
}

TEST(SumObjective, IsTheWeightedSumOfItsTerms) {
  LogCoshQuartic a(4, 6, 1.0, 41);
  Quadratic b(2 * Matrix::Identity(4, 4), Vector::Ones(4));
  SumObjective sum;
  EXPECT_EQ(sum.num_parameters(), 0);
  sum.add(&a, 2.0);
  sum.add(&b, 0.5);
  EXPECT_EQ(sum.num_parameters(), 4);
  EXPECT_EQ(sum.num_terms(), 2u);
  const std::vector<double> x = random_point(4, 1, 42), v = random_point(4, 1, 43);
  std::vector<double> gs(4), ga(4), gb(4), hs(4), ha(4), hb(4);
  double fs, fa, fb;
  ASSERT_TRUE(sum.evaluate(x.data(), &fs, gs.data()));
  ASSERT_TRUE(sum.hessian_vector(v.data(), hs.data()));
  ASSERT_TRUE(a.evaluate(x.data(), &fa, ga.data()));
  ASSERT_TRUE(b.evaluate(x.data(), &fb, gb.data()));
  ASSERT_TRUE(a.hessian_vector(v.data(), ha.data()));
  ASSERT_TRUE(b.hessian_vector(v.data(), hb.data()));
  EXPECT_NEAR(fs, 2 * fa + 0.5 * fb, 1e-12);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(gs[i], 2 * ga[i] + 0.5 * gb[i], 1e-12);
    EXPECT_NEAR(hs[i], 2 * ha[i] + 0.5 * hb[i], 1e-12);
  }
  // Minimizing the sum: its gradient vanishes at the result.
  std::vector<double> xm(4, 0.0);
  NewtonOptions opt;
  opt.gradient_tolerance = 1e-11;
  opt.function_tolerance = 0;
  const NewtonSummary s = minimize(sum, opt, xm.data());
  ASSERT_TRUE(s.converged()) << s.full_report();
  ASSERT_TRUE(a.evaluate(xm.data(), &fa, ga.data()));
  ASSERT_TRUE(b.evaluate(xm.data(), &fb, gb.data()));
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(2 * ga[i] + 0.5 * gb[i], 0, 1e-10);
  // A failing term fails the sum; accepted() reaches every term.
  Wrapped wa(&a), wb(&b);
  SumObjective sum2;
  sum2.add(&wa);
  sum2.add(&wb, -1);
  wb.hook = [](const double*, double*, double*) { return false; };
  EXPECT_FALSE(sum2.evaluate(x.data(), &fs, gs.data()));
  sum2.accepted(x.data());
  EXPECT_EQ(wa.accepted_calls, 1);
  EXPECT_EQ(wb.accepted_calls, 1);
}

TEST(SumObjective, RejectsInvalidTerms) {
  LogCoshQuartic a(4, 6, 1.0, 41);
  Rosenbrock r(2);
  SumObjective sum;
  EXPECT_THROW(sum.add(nullptr), InvalidArgument);
  EXPECT_THROW(sum.add(&a, std::nan("")), InvalidArgument);
  sum.add(&a);
  try {
    sum.add(&r);
    ADD_FAILURE() << "a term of another size was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("2 parameters"), std::string::npos) << e.what();
  }
  SumObjective empty;
  std::vector<double> x(1, 0.0);
  EXPECT_THROW(minimize(empty, NewtonOptions{}, x.data()), InvalidArgument);
}

TEST(NewtonOptions, EveryInvalidFieldIsRejectedByName) {
  EXPECT_TRUE(NewtonOptions{}.is_valid(nullptr));
  const std::vector<std::pair<std::string, std::function<void(NewtonOptions&)>>> cases = {
      {"method", [](NewtonOptions& o) { o.method = static_cast<MinimizerMethod>(7); }},
      {"max_iterations", [](NewtonOptions& o) { o.max_iterations = -1; }},
      {"gradient_tolerance", [](NewtonOptions& o) { o.gradient_tolerance = -1e-6; }},
      {"gradient_tolerance", [](NewtonOptions& o) { o.gradient_tolerance = std::nan(""); }},
      {"function_tolerance", [](NewtonOptions& o) { o.function_tolerance = -1; }},
      {"function_tolerance",
       [](NewtonOptions& o) { o.function_tolerance = std::numeric_limits<double>::infinity(); }},
      {"initial_trust_radius", [](NewtonOptions& o) { o.initial_trust_radius = 0; }},
      {"max_trust_radius", [](NewtonOptions& o) { o.max_trust_radius = 0.5; }},
      {"eta", [](NewtonOptions& o) { o.eta = 0.25; }},
      {"eta", [](NewtonOptions& o) { o.eta = -0.1; }},
      {"cg_forcing_max", [](NewtonOptions& o) { o.cg_forcing_max = 1; }},
      {"cg_forcing_max", [](NewtonOptions& o) { o.cg_forcing_max = 0; }},
      {"cg_forcing_exponent", [](NewtonOptions& o) { o.cg_forcing_exponent = 0; }},
      {"cg_forcing_exponent", [](NewtonOptions& o) { o.cg_forcing_exponent = 1.5; }},
      {"max_cg_iterations", [](NewtonOptions& o) { o.max_cg_iterations = -2; }},
      {"lbfgs_memory", [](NewtonOptions& o) { o.lbfgs_memory = 0; }},
      {"sufficient_decrease", [](NewtonOptions& o) { o.sufficient_decrease = 0.5; }},
      {"callbacks", [](NewtonOptions& o) { o.callbacks.emplace_back(); }},
  };
  Rosenbrock f(2);
  for (const auto& [field, mutate] : cases) {
    NewtonOptions opt;
    mutate(opt);
    std::string why;
    EXPECT_FALSE(opt.is_valid(&why)) << field;
    EXPECT_NE(why.find(field), std::string::npos) << field << ": " << why;
    std::vector<double> x = {0, 0};
    try {
      minimize(f, opt, x.data());
      ADD_FAILURE() << field << ": no exception";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(minimize(f, NewtonOptions{}, nullptr), InvalidArgument);
}

TEST(NewtonOptions, MethodNamesRoundTrip) {
  for (MinimizerMethod m :
       {MinimizerMethod::kNewtonCG, MinimizerMethod::kLbfgs, MinimizerMethod::kGradientDescent})
    EXPECT_EQ(parse_minimizer_method(to_string(m)), m);
  try {
    parse_minimizer_method("bfgs", "--minimizer");
    ADD_FAILURE() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--minimizer"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bfgs"), std::string::npos) << e.what();
  }
  EXPECT_EQ(to_string(MinimizerTermination::kNoProgress), "no progress");
  EXPECT_EQ(NewtonSummary{}.message, "not run");
}

}  // namespace
}  // namespace kantor::testing
