// Full solves of the Sinkhorn solver on the CPU engine: against the float64 dense reference,
// closed forms, invariances, schedules, warm starts, callbacks, option validation and
// determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kantor/context.hpp"
#include "kantor/error.hpp"
#include "kantor/sinkhorn.hpp"
#include "support/compare.hpp"
#include "support/dense_reference.hpp"
#include "support/random_problems.hpp"
#include "support/tolerance.hpp"

namespace kantor::testing {
namespace {

template <class T>
constexpr Precision precision_of() {
  return std::is_same<T, double>::value ? Precision::kFp64 : Precision::kFp32;
}

// Accuracy of a converged value (cost units): the stopping tolerance times the cost scale (the
// potentials move the value by at most |f|_inf * marginal error) plus roundoff of the passes.
template <class T>
double value_tol(double stop_tol, double max_cost, double eps) {
  return 10 * stop_tol * (1 + max_cost) + plan_rtol<T>(max_cost, eps) * (1 + max_cost);
}

Context cpu_context(int threads = 2) { return Context(ContextOptions{Backend::kCpu, threads}); }

struct SolveCase {
  std::string name;
  std::int64_t n, m, d;
  bool random_weights;
  bool zero_weights;
  double eps;
};
std::ostream& operator<<(std::ostream& os, const SolveCase& c) { return os << c.name; }

template <class T>
PointData<T> make_case(const SolveCase& c) {
  Rng rng(77 + std::uint64_t(c.n * 31 + c.m * 17 + c.d));
  std::vector<double> x = gaussian_cloud(rng, c.n, c.d, 0.0, 1.0);
  std::vector<double> y = gaussian_cloud(rng, c.m, c.d, 0.7, 0.8);
  std::vector<double> a, b;
  if (c.random_weights) {
    a = random_weights(rng, c.n);
    b = random_weights(rng, c.m);
    if (c.zero_weights) {
      a = with_zeros(a, 2, 5);
      b = with_zeros(b, 0, 3);
    }
    b = same_mass(b, a);
  }
  return make_point_data<T>(c.d, x, y, a, b, c.eps);
}

class SolveVsReference : public ::testing::TestWithParam<SolveCase> {};

template <class T>
void check_solve(const SolveCase& c) {
  PointData<T> data = make_case<T>(c);
  const DenseProblem dense = data.dense();
  const DenseSolution ref = dense_solve(dense, c.eps);
  ASSERT_LT(ref.marginal_error, 1e-12) << "the dense reference did not converge";
  const std::vector<double> P = dense_plan(dense, c.eps, ref.f, ref.g);
  const double max_cost = dense.max_cost();

  Context ctx = cpu_context();
  Potentials<T> pot;
  SinkhornOptions opt;
  const SinkhornSummary s = solve_sinkhorn(ctx, data.problem(), opt, &pot);
  ASSERT_TRUE(s.converged()) << s.full_report();
  EXPECT_LE(s.marginal_error, s.tolerance);
  EXPECT_EQ(s.tolerance, default_tolerance(precision_of<T>()));
  // The summary's marginal error is that of the returned potentials, measured by the reference.
  const std::vector<double> f(pot.f.data(), pot.f.data() + c.n);
  const std::vector<double> g(pot.g.data(), pot.g.data() + c.m);
  const double err = dense_marginal_error(dense, c.eps, f, g);
  EXPECT_TRUE(near(s.marginal_error, err, plan_rtol<T>(max_cost, c.eps) * (1 + err)));

  const double vtol = value_tol<T>(s.tolerance, max_cost, c.eps);
  EXPECT_TRUE(near(s.dual_cost, dense_dual_value(dense, ref.f, ref.g), vtol)) << "dual";
  EXPECT_TRUE(near(s.primal_cost, dense_transport_cost(dense, P), vtol)) << "<P,C>";
  EXPECT_TRUE(near(s.regularized_cost, dense_regularized_cost(dense, c.eps, P), vtol))
      << "regularized";
  EXPECT_TRUE(near(s.dual_gap, 0.0, vtol)) << "dual gap";
  EXPECT_TRUE(near(s.plan_mass, 1.0, 10 * s.tolerance + plan_rtol<T>(max_cost, c.eps)));

  // The plan itself (potentials are unique up to f + k, g - k: compare the plan entries).
  const std::vector<double> Ps = dense_plan(dense, c.eps, f, g);
  EXPECT_TRUE(all_close(Ps, P, 10 * s.tolerance + plan_rtol<T>(max_cost, c.eps))) << "plan";

  // Barycentric map of the converged potentials.
  std::vector<T> map(std::size_t(c.n * c.d));
  barycentric_map(ctx, data.problem(), pot, precision_of<T>(),
                  host_matrix<T>(map.data(), c.n, c.d));
  double ymax = 0;
  for (double e : dense.y) ymax = std::max(ymax, std::abs(e));
  EXPECT_TRUE(all_close(
      map, dense_barycentric_map(dense, c.eps, ref.g),
      (1 + ymax) * (10 * s.tolerance * (1 + max_cost / c.eps) + plan_rtol<T>(max_cost, c.eps))))
      << "barycentric map";
}

TEST_P(SolveVsReference, Fp64) { check_solve<double>(GetParam()); }
TEST_P(SolveVsReference, Fp32) { check_solve<float>(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Cases, SolveVsReference,
    ::testing::Values(SolveCase{"n1_m1_d1", 1, 1, 1, false, false, 0.1},
                      SolveCase{"n1_m9_d2", 1, 9, 2, true, false, 0.1},
                      SolveCase{"n17_m23_d3", 17, 23, 3, false, false, 0.1},
                      SolveCase{"n29_m19_d7_random", 29, 19, 7, true, false, 0.5},
                      SolveCase{"n21_m25_d2_zeros", 21, 25, 2, true, true, 0.2},
                      SolveCase{"n13_m11_d64", 13, 11, 64, true, false, 5.0},
                      SolveCase{"n12_m14_d3_large_eps", 12, 14, 3, true, false, 100.0}),
    [](const ::testing::TestParamInfo<SolveCase>& info) { return info.param.name; });

// Tiny eps with annealing: fp64 against the reference (in fp32 the default tolerance is not
// reachable at eps = 1e-3 for unit-scale clouds, see the conditioning bound).
TEST(Solver, TinyEpsilonAnnealedMatchesReference) {
  Rng rng(5);
  PointData<double> data = make_point_data<double>(2, integer_cloud(rng, 12, 2, 0, 4),
                                                   integer_cloud(rng, 10, 2, 0, 4), {}, {}, 1e-3);
  for (double& v : data.x) v *= 0.25;
  for (double& v : data.y) v *= 0.25;
  const DenseProblem dense = data.dense();
  const DenseSolution ref = dense_solve(dense, data.epsilon);
  ASSERT_LT(ref.marginal_error, 1e-12);
  Context ctx = cpu_context();
  SinkhornOptions opt;
  opt.max_iterations = 100000;
  const SinkhornSummary s = solve_sinkhorn(ctx, data.problem(), opt);
  ASSERT_TRUE(s.converged()) << s.full_report();
  EXPECT_GT(s.annealing_iterations, 5);
  const double vtol = value_tol<double>(s.tolerance, dense.max_cost(), data.epsilon);
  EXPECT_TRUE(near(s.dual_cost, dense_dual_value(dense, ref.f, ref.g), vtol));
  EXPECT_TRUE(near(s.primal_cost,
                   dense_transport_cost(dense, dense_plan(dense, data.epsilon, ref.f, ref.g)),
                   vtol));
}

// a = b = (1/2, 1/2), C = [[0, 1], [1, 0]] (x = y = {0, 1}, d = 1), eps = 1: the plan is
// [[p, q], [q, p]] with q / p = e^{-1}, so <P,C> = 2q = 1 / (1 + e).
TEST(Solver, TwoPointClosedForm) {
  const double e1 = std::exp(1.0);
  const double closed = 1.0 / (1.0 + e1);
  const double p = 0.5 / (1 + 1 / e1), q = 0.5 - p;
  // Regularized value: <P,C> + KL(P | ab) with ab = 1/4.
  const double reg = 2 * q + 2 * p * std::log(p / 0.25) + 2 * q * std::log(q / 0.25);
  for (Precision prec : {Precision::kFp64, Precision::kFp32}) {
    SCOPED_TRACE(to_string(prec));
    Context ctx = cpu_context();
    SinkhornOptions opt;
    SinkhornSummary s;
    if (prec == Precision::kFp64) {
      PointData<double> d = make_point_data<double>(1, {0, 1}, {0, 1}, {}, {}, 1.0);
      s = solve_sinkhorn(ctx, d.problem(), opt);
    } else {
      PointData<float> d = make_point_data<float>(1, {0, 1}, {0, 1}, {}, {}, 1.0);
      s = solve_sinkhorn(ctx, d.problem(), opt);
    }
    ASSERT_TRUE(s.converged()) << s.full_report();
    const double t = prec == Precision::kFp64 ? 1e-12 : 1e-6;
    EXPECT_TRUE(near(s.primal_cost, closed, t));
    EXPECT_TRUE(near(s.dual_cost, reg, t));
    EXPECT_TRUE(near(s.regularized_cost, reg, t));
  }
}

// Schedules: alternating, symmetric, annealed and fixed-eps runs converge to the same values.
TEST(Solver, SchedulesAgreeAtConvergence) {
  Rng rng(11);
  PointData<double> data = make_point_data<double>(
      3, mixture_cloud(rng, 40, 3), mixture_cloud(rng, 33, 3), random_weights(rng, 40), {}, 0.05);
  data.b = same_mass(random_weights(rng, 33), std::vector<double>(data.a.begin(), data.a.end()));
  Context ctx = cpu_context();
  std::vector<SinkhornSummary> runs;
  for (Schedule sch : {Schedule::kAlternating, Schedule::kSymmetric})
    for (bool anneal : {true, false}) {
      SinkhornOptions opt;
      opt.schedule = sch;
      opt.anneal = anneal;
      opt.max_iterations = 200000;
      runs.push_back(solve_sinkhorn(ctx, data.problem(), opt));
      ASSERT_TRUE(runs.back().converged()) << runs.back().full_report();
      EXPECT_EQ(runs.back().schedule, sch);
      EXPECT_EQ(runs.back().annealing_iterations > 0, anneal);
    }
  const double max_cost = data.dense().max_cost();
  for (const auto& r : runs) {
    const double vtol = value_tol<double>(r.tolerance, max_cost, data.epsilon);
    EXPECT_TRUE(near(r.dual_cost, runs[0].dual_cost, vtol));
    EXPECT_TRUE(near(r.primal_cost, runs[0].primal_cost, vtol));
  }
}

// The dual gap certifies convergence: it shrinks with the marginal error.
TEST(Solver, DualGapVanishesWithTheMarginalError) {
  Rng rng(3);
  PointData<double> data = make_point_data<double>(2, gaussian_cloud(rng, 30, 2),
                                                   gaussian_cloud(rng, 30, 2, 1.0), {}, {}, 0.5);
  Context ctx = cpu_context();
  double prev_gap = std::numeric_limits<double>::infinity();
  for (double tol : {1e-2, 1e-5, 1e-8, 1e-11}) {
    SinkhornOptions opt;
    opt.tolerance = tol;
    opt.check_every = 1;
    const SinkhornSummary s = solve_sinkhorn(ctx, data.problem(), opt);
    ASSERT_TRUE(s.converged()) << s.full_report();
    EXPECT_LE(std::abs(s.dual_gap), prev_gap + 1e-14) << "tol " << tol;
    EXPECT_LE(std::abs(s.dual_gap), 50 * tol * (1 + data.dense().max_cost())) << "tol " << tol;
    prev_gap = std::abs(s.dual_gap);
  }
  EXPECT_LT(prev_gap, 1e-9);
}

// Debiased divergence: S(x, x) = 0 exactly, S >= 0, and the three parts match separate solves.
TEST(Solver, DivergenceOfACloudWithItselfIsExactlyZero) {
  Rng rng(8);
  for (Precision prec : {Precision::kFp64, Precision::kFp32}) {
    SCOPED_TRACE(to_string(prec));
    std::vector<double> x = gaussian_cloud(rng, 37, 3), a = random_weights(rng, 37);
    Context ctx = cpu_context();
    SinkhornOptions opt;
    DivergenceSummary s;
    if (prec == Precision::kFp64) {
      PointData<double> d = make_point_data<double>(3, x, x, a, a, 0.05);
      s = sinkhorn_divergence(ctx, d.problem(), opt);
    } else {
      PointData<float> d = make_point_data<float>(3, x, x, a, a, 0.05);
      s = sinkhorn_divergence(ctx, d.problem(), opt);
    }
    EXPECT_TRUE(s.converged());
    EXPECT_EQ(s.divergence, 0.0);
  }
}

TEST(Solver, DivergenceMatchesThreeSolves) {
  Rng rng(9);
  PointData<double> d = make_point_data<double>(2, gaussian_cloud(rng, 25, 2),
                                                gaussian_cloud(rng, 20, 2, 1.5), {}, {}, 0.1);
  Context ctx = cpu_context();
  SinkhornOptions opt;
  const DivergenceSummary s = sinkhorn_divergence(ctx, d.problem(), opt);
  ASSERT_TRUE(s.converged()) << s.full_report();
  auto ot = [&](const std::vector<double>& x, const std::vector<double>& y) {
    const DenseProblem p =
        make_dense_problem(x, y, 2, std::vector<double>{}, std::vector<double>{}, 1.0);
    const DenseSolution sol = &x == &y ? dense_solve_self(p, 0.1) : dense_solve(p, 0.1);
    EXPECT_LT(sol.marginal_error, 1e-12);
    return dense_dual_value(p, sol.f, sol.g);
  };
  const double ref = ot(d.x, d.y) - 0.5 * ot(d.x, d.x) - 0.5 * ot(d.y, d.y);
  EXPECT_TRUE(near(s.divergence, ref, 1e-7));
  EXPECT_GT(s.divergence, 0.0);
  // One eps schedule for the three problems: that of (x, y).
  EXPECT_EQ(s.xx.initial_epsilon, s.xy.initial_epsilon);
  EXPECT_EQ(s.yy.initial_epsilon, s.xy.initial_epsilon);
}

// Translation of both clouds leaves every value unchanged (the engine centres the clouds).
TEST(Solver, TranslationInvariance) {
  Rng rng(21);
  const std::vector<double> x = gaussian_cloud(rng, 31, 3), y = gaussian_cloud(rng, 27, 3, 0.5);
  const double shift[3] = {1000.0, -250.0, 3.5};
  std::vector<double> xs = x, ys = y;
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] += shift[i % 3];
  for (std::size_t i = 0; i < ys.size(); ++i) ys[i] += shift[i % 3];
  Context ctx = cpu_context();
  SinkhornOptions opt;
  PointData<double> d0 = make_point_data<double>(3, x, y, {}, {}, 0.1);
  PointData<double> d1 = make_point_data<double>(3, xs, ys, {}, {}, 0.1);
  const SinkhornSummary s0 = solve_sinkhorn(ctx, d0.problem(), opt);
  const SinkhornSummary s1 = solve_sinkhorn(ctx, d1.problem(), opt);
  ASSERT_TRUE(s0.converged() && s1.converged());
  // The shifted coordinates themselves are rounded at 1000 * 2^-53 ~ 1e-13: the cost moves by
  // about |x - y| * 1e-13.
  const double vtol = value_tol<double>(s0.tolerance, d0.dense().max_cost(), 0.1);
  EXPECT_TRUE(near(s1.dual_cost, s0.dual_cost, vtol));
  EXPECT_TRUE(near(s1.primal_cost, s0.primal_cost, vtol));
}

// C = c |x - y|^2 with eps: scaling c and eps by 1/2 halves every value (the plan is unchanged).
TEST(Solver, CostScaleConsistency) {
  Rng rng(22);
  const std::vector<double> x = gaussian_cloud(rng, 24, 2), y = gaussian_cloud(rng, 26, 2, 0.3);
  Context ctx = cpu_context();
  SinkhornOptions opt;
  PointData<double> d1 = make_point_data<double>(2, x, y, {}, {}, 0.1, 1.0);
  PointData<double> dh = make_point_data<double>(2, x, y, {}, {}, 0.05, 0.5);
  const SinkhornSummary s1 = solve_sinkhorn(ctx, d1.problem(), opt);
  const SinkhornSummary sh = solve_sinkhorn(ctx, dh.problem(), opt);
  ASSERT_TRUE(s1.converged() && sh.converged());
  const double vtol = value_tol<double>(s1.tolerance, d1.dense().max_cost(), 0.1);
  EXPECT_TRUE(near(sh.dual_cost, 0.5 * s1.dual_cost, vtol));
  EXPECT_TRUE(near(sh.primal_cost, 0.5 * s1.primal_cost, vtol));
  // And the c = 1/2 solve against the dense reference with c = 1/2.
  const DenseProblem p = dh.dense();
  const DenseSolution ref = dense_solve(p, 0.05);
  EXPECT_TRUE(near(sh.dual_cost, dense_dual_value(p, ref.f, ref.g), vtol));
}

// Warm start from converged potentials: one check suffices and the answer is the same.
TEST(Solver, WarmStartNeedsFewerIterations) {
  Rng rng(31);
  PointData<double> d = make_point_data<double>(3, gaussian_cloud(rng, 50, 3),
                                                gaussian_cloud(rng, 45, 3, 0.5), {}, {}, 0.05);
  Context ctx = cpu_context();
  SinkhornOptions opt;
  Potentials<double> pot;
  const SinkhornSummary cold = solve_sinkhorn(ctx, d.problem(), opt, &pot);
  ASSERT_TRUE(cold.converged());
  EXPECT_EQ(pot.epsilon, 0.05);
  const std::vector<double> f0(pot.f.data(), pot.f.data() + 50);
  const SinkhornSummary warm = solve_sinkhorn(ctx, d.problem(), opt, &pot);
  ASSERT_TRUE(warm.converged());
  EXPECT_EQ(warm.annealing_iterations, 0);
  EXPECT_EQ(warm.iterations, opt.check_every);
  EXPECT_LT(warm.iterations, cold.iterations);
  EXPECT_TRUE(near(warm.dual_cost, cold.dual_cost, 1e-9));
  const std::vector<double> f1(pot.f.data(), pot.f.data() + 50);
  EXPECT_TRUE(all_close(f1, f0, 1e-8));
  // Potentials of other sizes are not a warm start: they are replaced.
  Potentials<double> wrong;
  wrong.f = Buffer<double>(ctx, 3);
  wrong.g = Buffer<double>(ctx, 3);
  const SinkhornSummary s = solve_sinkhorn(ctx, d.problem(), opt, &wrong);
  EXPECT_GT(s.annealing_iterations, 0);
  EXPECT_EQ(wrong.f.size(), 50);
  EXPECT_EQ(wrong.g.size(), 45);
}

TEST(Solver, CallbacksAbortStopAndRecord) {
  Rng rng(41);
  PointData<double> d = make_point_data<double>(2, gaussian_cloud(rng, 20, 2),
                                                gaussian_cloud(rng, 20, 2, 1.0), {}, {}, 0.01);
  Context ctx = cpu_context();
  {
    SinkhornOptions opt;
    opt.anneal = false;  // annealing checks are covered by CallbacksRunWhileAnnealing
    opt.check_every = 7;
    std::vector<IterationRecord> seen;
    int second_calls = 0;
    opt.callbacks.push_back([&](const IterationRecord& r) {
      seen.push_back(r);
      return seen.size() == 3 ? CallbackResult::kAbort : CallbackResult::kContinue;
    });
    opt.callbacks.push_back([&](const IterationRecord&) {
      ++second_calls;
      return CallbackResult::kContinue;
    });
    const SinkhornSummary s = solve_sinkhorn(ctx, d.problem(), opt);
    EXPECT_EQ(s.termination, TerminationType::kUserAbort);
    EXPECT_FALSE(s.converged());
    ASSERT_EQ(seen.size(), 3u);
    EXPECT_EQ(second_calls, 2);  // the first non-kContinue result ends the solve
    ASSERT_EQ(s.records.size(), 3u);
    for (std::size_t k = 0; k < seen.size(); ++k) {
      EXPECT_EQ(seen[k].iteration, s.annealing_iterations + 7 * std::int64_t(k + 1));
      EXPECT_EQ(seen[k].epsilon, 0.01);
      EXPECT_EQ(s.records[k].iteration, seen[k].iteration);
      EXPECT_EQ(s.records[k].marginal_error, seen[k].marginal_error);
      EXPECT_GT(seen[k].marginal_error, 0.0);
      if (k > 0) EXPECT_GE(seen[k].seconds, seen[k - 1].seconds);
    }
    EXPECT_EQ(s.iterations, seen.back().iteration);
  }
  {
    SinkhornOptions opt;
    opt.anneal = false;
    opt.record_iterations = false;
    opt.callbacks.push_back(
        [](const IterationRecord&) { return CallbackResult::kStopSuccessfully; });
    const SinkhornSummary s = solve_sinkhorn(ctx, d.problem(), opt);
    EXPECT_EQ(s.termination, TerminationType::kUserSuccess);
    EXPECT_TRUE(s.records.empty());
    EXPECT_EQ(s.iterations, s.annealing_iterations + opt.check_every);
  }
}

// Shifted potentials fh = f - c|x|^2 in the caller's (uncentred) coordinates; argument checks of
// the public barycentric_map.
TEST(Solver, ShiftedPotentialsAndMapArguments) {
  Rng rng(61);
  PointData<double> d = make_point_data<double>(2, gaussian_cloud(rng, 7, 2, 3.0),
                                                gaussian_cloud(rng, 5, 2, -1.0), {}, {}, 0.2, 0.5);
  Context ctx = cpu_context();
  Potentials<double> pot;
  ASSERT_TRUE(solve_sinkhorn(ctx, d.problem(), SinkhornOptions{}, &pot).converged());
  std::vector<double> fh, gh;
  to_shifted(ctx, d.problem(), pot, &fh, &gh);
  ASSERT_EQ(fh.size(), 7u);
  ASSERT_EQ(gh.size(), 5u);
  for (int i = 0; i < 7; ++i) {
    const double sq = d.x[2 * i] * d.x[2 * i] + d.x[2 * i + 1] * d.x[2 * i + 1];
    // The library may contract the squares into FMAs (C++ allows it): a few roundings apart.
    EXPECT_NEAR(fh[i], pot.f.data()[i] - 0.5 * sq, tol<double>(8) * (1 + sq + std::abs(fh[i])));
  }
  for (int j = 0; j < 5; ++j) {
    const double sq = d.y[2 * j] * d.y[2 * j] + d.y[2 * j + 1] * d.y[2 * j + 1];
    EXPECT_NEAR(gh[j], pot.g.data()[j] - 0.5 * sq, tol<double>(8) * (1 + sq + std::abs(gh[j])));
  }
  std::vector<double> map(7 * 2);
  EXPECT_THROW(barycentric_map(ctx, d.problem(), pot, Precision::kFp64,
                               host_matrix<double>(map.data(), 7, 1)),
               InvalidArgument);
  Potentials<double> wrong;
  wrong.f = Buffer<double>(ctx, 6);
  wrong.g = Buffer<double>(ctx, 5);
  EXPECT_THROW(barycentric_map(ctx, d.problem(), wrong, Precision::kFp64,
                               host_matrix<double>(map.data(), 7, 2)),
               InvalidArgument);
  EXPECT_THROW(to_shifted(ctx, d.problem(), wrong, &fh, &gh), InvalidArgument);
}

// An eps so large that the cost drowns in the rounding of log w is refused, not "converged" on
// noise (fp32 at eps = 1e9 on costs ~5 used to report dual -141 for a true 5.689); fp64 runs it.
TEST(Solver, EpsilonTooLargeForThePrecisionIsRefused) {
  Rng rng(44);
  PointData<float> df = make_point_data<float>(2, gaussian_cloud(rng, 20, 2),
                                               gaussian_cloud(rng, 20, 2, 1.0), {}, {}, 1e9);
  Context ctx = cpu_context();
  try {
    solve_sinkhorn(ctx, df.problem(), SinkhornOptions{});
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("too large for fp32"), std::string::npos) << e.what();
  }
  PointData<double> dd = make_point_data<double>(2, gaussian_cloud(rng, 20, 2),
                                                 gaussian_cloud(rng, 20, 2, 1.0), {}, {}, 1e9);
  const SinkhornSummary s = solve_sinkhorn(ctx, dd.problem(), SinkhornOptions{});
  EXPECT_TRUE(s.converged()) << s.full_report();
  // At eps -> infinity the plan is a (x) b: <P,C> = sum_ij a_i b_j C_ij; the dual matches it.
  EXPECT_NEAR(s.dual_cost, s.primal_cost, 1e-6 * std::abs(s.primal_cost));
}

TEST(Solver, CallbacksRunWhileAnnealing) {
  Rng rng(43);
  PointData<double> d = make_point_data<double>(2, gaussian_cloud(rng, 20, 2),
                                                gaussian_cloud(rng, 20, 2, 1.0), {}, {}, 1e-3);
  Context ctx = cpu_context();
  SinkhornOptions opt;
  opt.check_every = 2;
  opt.scaling = 0.9;  // a long schedule: many checks above the target eps
  std::vector<IterationRecord> seen;
  opt.callbacks.push_back([&](const IterationRecord& r) {
    seen.push_back(r);
    return CallbackResult::kContinue;
  });
  const SinkhornSummary s = solve_sinkhorn(ctx, d.problem(), opt);
  ASSERT_GT(s.annealing_iterations, 4);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front().iteration, 2);
  EXPECT_GT(seen.front().epsilon, 1e-3);  // called while annealing
  // A small marginal error above the target eps never ends the solve: convergence is declared
  // only at the target.
  if (s.converged()) EXPECT_EQ(seen.back().epsilon, 1e-3);
  {
    SinkhornOptions abort_opt = opt;
    abort_opt.callbacks = {[](const IterationRecord&) { return CallbackResult::kAbort; }};
    const SinkhornSummary a = solve_sinkhorn(ctx, d.problem(), abort_opt);
    EXPECT_EQ(a.termination, TerminationType::kUserAbort);
    EXPECT_EQ(a.iterations, 2);  // aborted at the first check, still annealing
  }
}

TEST(Solver, IterationBudget) {
  Rng rng(42);
  PointData<double> d = make_point_data<double>(2, gaussian_cloud(rng, 20, 2),
                                                gaussian_cloud(rng, 20, 2, 1.0), {}, {}, 0.01);
  Context ctx = cpu_context();
  SinkhornOptions opt;
  opt.max_iterations = 13;
  const SinkhornSummary s = solve_sinkhorn(ctx, d.problem(), opt);
  EXPECT_EQ(s.termination, TerminationType::kMaxIterations);
  EXPECT_EQ(s.iterations, 13);
  EXPECT_GT(s.marginal_error, s.tolerance);
  EXPECT_TRUE(std::isfinite(s.dual_cost));
  // One record per check (every check_every iterations, annealing included), plus one at the end
  // (13 is not a multiple of check_every).
  const std::int64_t checks = 13 / opt.check_every;
  ASSERT_EQ(std::int64_t(s.records.size()), checks + 1);
  EXPECT_EQ(s.records.back().iteration, 13);
  EXPECT_EQ(s.records.back().certified_error, s.marginal_error);
  EXPECT_EQ(s.records.back().marginal_error, s.residual);
  EXPECT_EQ(s.records.back().epsilon, s.epsilon_reached);
  // fp32: records carry the eps in double, not rounded to float.
  PointData<float> df = make_point_data<float>(2, gaussian_cloud(rng, 20, 2),
                                               gaussian_cloud(rng, 20, 2, 1.0), {}, {}, 0.01);
  opt.max_iterations = 10000;
  opt.tolerance = 1e-3;
  const SinkhornSummary sf = solve_sinkhorn(ctx, df.problem(), opt);
  ASSERT_FALSE(sf.records.empty());
  for (const auto& r : sf.records)
    if (r.iteration > sf.annealing_iterations) EXPECT_EQ(r.epsilon, 0.01);
}

// NaN potentials are a numerical outcome, reported in the Summary, not an exception.
TEST(Solver, NaNWarmStartIsANumericalFailure) {
  PointData<double> d = make_point_data<double>(1, {0, 1, 2}, {0, 1}, {}, {}, 0.5);
  Context ctx = cpu_context();
  Potentials<double> pot;
  pot.f = Buffer<double>(ctx, 3);
  pot.g = Buffer<double>(ctx, 2);
  for (int i = 0; i < 3; ++i) pot.f.data()[i] = 0;
  pot.g.data()[0] = 0;
  pot.g.data()[1] = std::nan("");
  SinkhornOptions opt;
  opt.check_every = 1;
  SinkhornSummary s;
  ASSERT_NO_THROW(s = solve_sinkhorn(ctx, d.problem(), opt, &pot));
  EXPECT_EQ(s.termination, TerminationType::kNumericalFailure) << s.full_report();
  EXPECT_EQ(s.iterations, 1);
  EXPECT_FALSE(s.converged());
}

TEST(Solver, OptionsValidation) {
  struct Bad {
    const char* field;
    void (*set)(SinkhornOptions*);
  };
  const Bad bad[] = {
      {"scaling", [](SinkhornOptions* o) { o->scaling = 1.0; }},
      {"scaling", [](SinkhornOptions* o) { o->scaling = 0.0; }},
      {"scaling", [](SinkhornOptions* o) { o->scaling = std::nan(""); }},
      {"initial_epsilon", [](SinkhornOptions* o) { o->initial_epsilon = -1; }},
      {"initial_epsilon", [](SinkhornOptions* o) { o->initial_epsilon = INFINITY; }},
      {"tolerance", [](SinkhornOptions* o) { o->tolerance = -1e-3; }},
      {"tolerance", [](SinkhornOptions* o) { o->tolerance = std::nan(""); }},
      {"max_iterations", [](SinkhornOptions* o) { o->max_iterations = 0; }},
      {"check_every", [](SinkhornOptions* o) { o->check_every = 0; }},
      {"callbacks", [](SinkhornOptions* o) { o->callbacks.push_back(IterationCallback{}); }},
      {"schedule", [](SinkhornOptions* o) { o->schedule = static_cast<Schedule>(7); }},
      {"precision", [](SinkhornOptions* o) { o->precision = static_cast<Precision>(9); }},
  };
  std::string why;
  EXPECT_TRUE(SinkhornOptions{}.is_valid(&why));
  PointData<double> d = make_point_data<double>(1, {0, 1}, {0, 1});
  Context ctx = cpu_context();
  for (const Bad& b : bad) {
    SinkhornOptions o;
    b.set(&o);
    why.clear();
    EXPECT_FALSE(o.is_valid(&why)) << b.field;
    EXPECT_NE(why.find(b.field), std::string::npos) << why;
    EXPECT_FALSE(o.is_valid(nullptr));
    EXPECT_THROW(solve_sinkhorn(ctx, d.problem(), o), InvalidArgument) << b.field;
    EXPECT_THROW(sinkhorn_divergence(ctx, d.problem(), o), InvalidArgument) << b.field;
  }
  // Precisions the CPU engine or the data type cannot run.
  SinkhornOptions o;
  o.precision = Precision::kFp32;
  EXPECT_THROW(solve_sinkhorn(ctx, d.problem(), o), InvalidArgument);
  PointData<float> df = make_point_data<float>(1, {0, 1}, {0, 1});
  for (Precision p : {Precision::kFp64, Precision::kTf32, Precision::kBf16}) {
    o.precision = p;
    EXPECT_THROW(solve_sinkhorn(ctx, df.problem(), o), InvalidArgument) << to_string(p);
  }
}

// Same results bitwise for 1 and 2 threads and from run to run.
TEST(Solver, DeterministicAcrossThreadCountsAndRuns) {
  Rng rng(51);
  // More rows than one 64-row block so the two threads share the work.
  PointData<float> d = make_point_data<float>(3, gaussian_cloud(rng, 333, 3),
                                              gaussian_cloud(rng, 301, 3, 0.5), {}, {}, 0.05);
  auto run = [&](int threads) {
    Context ctx = cpu_context(threads);
    Potentials<float> pot;
    SinkhornOptions opt;
    opt.max_iterations = 60;
    const SinkhornSummary s = solve_sinkhorn(ctx, d.problem(), opt, &pot);
    std::vector<float> out(pot.f.data(), pot.f.data() + pot.f.size());
    out.insert(out.end(), pot.g.data(), pot.g.data() + pot.g.size());
    out.push_back(float(s.dual_cost));
    out.push_back(float(s.marginal_error));
    return out;
  };
  const std::vector<float> one = run(1), two = run(2), two_again = run(2), three = run(3);
  EXPECT_EQ(one, two);
  EXPECT_EQ(two, two_again);
  EXPECT_EQ(one, three);
}

}  // namespace
}  // namespace kantor::testing
