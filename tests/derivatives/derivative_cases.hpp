// Shared pieces of the derivative tests: the test problems, library wrappers (solve, gradient,
// HVP on host vectors) and the named tolerances, derived from the stopping tolerance of the
// potentials, the unit roundoff of the precision and the conditioning 1 + max_cost / eps.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kantor/context.hpp"
#include "kantor/derivatives.hpp"
#include "kantor/error.hpp"
#include "kantor/sinkhorn.hpp"
#include "support/compare.hpp"
#include "support/dense_derivatives.hpp"
#include "support/random_problems.hpp"
#include "support/tolerance.hpp"

namespace kantor::testing {

template <class T>
constexpr Precision default_precision() {
  return std::is_same<T, double>::value ? Precision::kFp64 : Precision::kFp32;
}

/// Unit roundoff of the arithmetic of a precision (tf32 / bf16: the tensor-core inputs).
inline double unit_roundoff(Precision p) {
  switch (p) {
    case Precision::kFp64:
      return std::ldexp(1.0, -53);
    case Precision::kFp32:
      return std::ldexp(1.0, -24);
    case Precision::kTf32:
      return std::ldexp(1.0, -11);
    case Precision::kBf16:
      return std::ldexp(1.0, -8);
  }
  return 1;
}

/// Relative accuracy of one streaming pass against the float64 dense reference (as
/// tolerance.hpp's pass_rtol, and the CUDA tests' 3e-4 for tf32, whose coordinates keep 11
/// significant bits).
inline double pass_accuracy(Precision p) {
  switch (p) {
    case Precision::kFp64:
      return pass_rtol<double>();
    case Precision::kFp32:
      return pass_rtol<float>();
    case Precision::kTf32:
      return 3e-4;
    case Precision::kBf16:
      return std::ldexp(1.0, -8);
  }
  return 1;
}

/// Stopping tolerance (L1 marginal error) of the potentials the derivative tests use: fp64 far
/// below the default (the derivatives are compared to 1e-8 and finite differences divide value
/// errors by the step); fp32 and tf32 their defaults.
inline double solve_tolerance(Precision p) {
  // tf32: the certificate on the caller's coordinates has a rounding floor near 1e-4 at these
  // sizes (measured on the H200: 1.4e-4 at eps = 0.2, "rounding floor" termination), so the
  // default 1e-4 is not always reachable; the bounds below scale with the reached error.
  if (p == Precision::kTf32) return 1e-3;
  return p == Precision::kFp64 ? 1e-12 : default_tolerance(p);
}
/// Inner (Schur complement) CG tolerance the tests ask for.
inline double cg_tolerance(Precision p) { return p == Precision::kFp64 ? 1e-11 : 1e-5; }

/// Relative accuracy (norm-wise or against the largest entry) of a derivative computed from
/// potentials of marginal error `marginal` with inner solves of relative residual `cg`: the
/// plan is off by ~marginal (L1) plus the rounding of exp(s/eps) (u (1 + max_cost/eps)); the
/// eps-dependent part of the Hessian is (2c)^2/eps times second moments of P and may nearly
/// cancel its 2c diag(a) part, so relative errors are amplified by up to 1 + max_cost/eps. A
/// factor 10 of headroom, as in the solver tests.
inline double derivative_rtol(Precision p, double marginal, double cg, double max_cost,
                              double eps) {
  const double cond = 1 + max_cost / eps;
  return 10 * (marginal + cg + pass_accuracy(p)) * cond;
}

/// Absolute accuracy of the position gradients 2c sum_j P_ij (x_i - y_j), each term weighted by
/// 2c |x_i - y_j| <= 2c D: the plan is off by ~10 x the marginal error in L1 (which one row may
/// take whole) plus the relative rounding of its entries, pass_accuracy (1 + max_cost/eps) (as
/// the solver tests' plan_rtol), on a row of mass a_i <= max_i a_i.
inline double position_gradient_atol(Precision p, double marginal, const DenseProblem& dp,
                                     double eps) {
  const double max_w = std::max(*std::max_element(dp.a.begin(), dp.a.end()),
                                *std::max_element(dp.b.begin(), dp.b.end()));
  return 2 * dp.c * dense_diameter(dp) *
         (10 * marginal + max_w * pass_accuracy(p) * (1 + dp.max_cost() / eps));
}

/// Absolute accuracy of the weight gradients (f_i - <a,f>)/|A|: the potentials are off by eps
/// times the plan's relative error plus their own rounding (potential_atol).
inline double weight_gradient_atol(Precision p, double marginal, double raw_mass, double max_cost,
                                   double eps) {
  return 2 *
         (eps * 10 * (marginal + pass_accuracy(p) * (1 + max_cost / eps)) +
          pass_accuracy(p) * (1 + max_cost)) /
         raw_mass;
}

/// Finite differences of fp64 values solved to 1e-12 (fourth-order stencil, fd_step): the value
/// error ~1e-12 (1 + max_cost) divided by the step, plus the truncation (1/20)^4 of the stencil
/// times the size of the fifth derivative: ~1e-6 relative.
constexpr double kFdRtol = 2e-6;

struct DerivCase {
  std::string name;
  std::int64_t n, m, d;
  double eps, c;
  bool random_weights = true;
  bool zero_weight = false;  // a[2] = 0
  bool unit_cube = false;    // clouds uniform in [0, 1]^d (else Gaussian)
  double raw_mass = 2.5;     // total of the raw weights handed to the library
  std::uint64_t seed = 11;
};
inline std::ostream& operator<<(std::ostream& os, const DerivCase& c) { return os << c.name; }
inline std::string case_name(const ::testing::TestParamInfo<DerivCase>& i) { return i.param.name; }

/// The raw (float64) arrays of a case: weights summing to raw_mass on both sides.
struct RawData {
  std::int64_t d = 0;
  double c = 1, eps = 0.1;
  std::vector<double> x, y, a, b;
  std::int64_t n() const { return std::int64_t(x.size()) / d; }
  std::int64_t m() const { return std::int64_t(y.size()) / d; }
  template <class T>
  PointData<T> data() const {
    return make_point_data<T>(d, x, y, a, b, eps, c);
  }
  /// The dense reference problem of the numbers precision T sees.
  template <class T>
  DenseProblem dense() const {
    return data<T>().dense();
  }
};

inline RawData make_raw(const DerivCase& c) {
  Rng rng(c.seed + std::uint64_t(c.n * 131 + c.m * 17 + c.d));
  RawData r;
  r.d = c.d;
  r.c = c.c;
  r.eps = c.eps;
  if (c.unit_cube) {
    std::uniform_real_distribution<double> u(0.0, 1.0);
    r.x.resize(static_cast<std::size_t>(c.n * c.d));
    r.y.resize(static_cast<std::size_t>(c.m * c.d));
    for (double& e : r.x) e = u(rng);
    for (double& e : r.y) e = u(rng);
  } else {
    r.x = gaussian_cloud(rng, c.n, c.d, 0.0, 1.0);
    r.y = gaussian_cloud(rng, c.m, c.d, 0.5, 0.8);
  }
  if (c.random_weights) {
    r.a = random_weights(rng, c.n);
    r.b = random_weights(rng, c.m);
    if (c.zero_weight) r.a[2] = 0;
    double ta = 0, tb = 0;
    for (double e : r.a) ta += e;
    for (double e : r.b) tb += e;
    for (double& e : r.a) e *= c.raw_mass / ta;
    for (double& e : r.b) e *= c.raw_mass / tb;
  }
  return r;
}

inline double raw_total(const std::vector<double>& w, std::int64_t count) {
  if (w.empty()) return 1.0;  // uniform weights: |a| = 1 by the API's convention
  double s = 0;
  for (double e : w) s += e;
  (void)count;
  return s;
}

/// A positive definite Hessian of x -> OT(x, y): Gaussian clouds (8 and 7 points, c = 1/2,
/// random weights) at eps = 1 (dense eigenvalues in [0.0115, 0.195]; at eps <= 0.3 the same
/// clouds give an indefinite Hessian).
inline RawData pd_case() {
  Rng rng(21);
  RawData r;
  r.d = 2;
  r.c = 0.5;
  r.eps = 1.0;
  r.x = gaussian_cloud(rng, 8, 2, 0.0, 1.0);
  r.y = gaussian_cloud(rng, 7, 2, 0.5, 0.8);
  r.a = random_weights(rng, 8);
  r.b = same_mass(random_weights(rng, 7), r.a);
  return r;
}

/// An indefinite one: a tight cluster against a spread target at small eps (splitting the
/// cluster lowers the cost: negative curvature).
inline RawData indefinite_case() {
  Rng rng(5);
  RawData r;
  r.d = 2;
  r.c = 1.0;
  r.eps = 0.1;
  r.x = gaussian_cloud(rng, 6, 2, 0.0, 0.05);
  r.y = gaussian_cloud(rng, 7, 2, 0.0, 1.0);
  return r;
}

inline Context cpu_context(int threads = 2) {
  return Context(ContextOptions{Backend::kCpu, threads});
}

inline SinkhornOptions tight_options(Precision p) {
  SinkhornOptions o;
  o.tolerance = solve_tolerance(p);
  o.max_iterations = 200000;
  return o;
}

inline HvpOptions tight_hvp(Precision p) {
  HvpOptions o;
  o.tolerance = cg_tolerance(p);
  o.max_iterations = 100000;
  o.check_every = 1;
  return o;
}

template <class T>
std::vector<double> to_double(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

/// The four gradient blocks of one call, in double.
struct GradientBlocks {
  std::vector<double> x, y, a, b;
  GradientSummary summary;
};

/// Runs `call(out)` (a SinkhornSolver gradient entry point) into host buffers of the problem's
/// shapes and returns the blocks in double.
template <class T, class Call>
GradientBlocks gradient_blocks(std::int64_t n, std::int64_t m, std::int64_t d, Call&& call) {
  std::vector<T> gx(static_cast<std::size_t>(n * d)), gy(static_cast<std::size_t>(m * d));
  std::vector<T> ga(static_cast<std::size_t>(n)), gb(static_cast<std::size_t>(m));
  GradientOutput<T> out;
  out.x = host_matrix(gx.data(), n, d);
  out.y = host_matrix(gy.data(), m, d);
  out.a = host_vector(ga.data(), n);
  out.b = host_vector(gb.data(), m);
  GradientBlocks g;
  g.summary = call(out);
  g.x = to_double(gx);
  g.y = to_double(gy);
  g.a = to_double(ga);
  g.b = to_double(gb);
  return g;
}

/// Runs `call(direction, out)` (an HVP entry point) for a flattened n x d direction given in
/// double (rounded to T) and returns H A in double.
template <class T, class Call>
std::vector<double> hvp_of(std::int64_t n, std::int64_t d, const std::vector<double>& A,
                           Call&& call) {
  const std::vector<T> dir(A.begin(), A.end());
  std::vector<T> out(static_cast<std::size_t>(n * d), T(0));
  call(host_matrix<const T>(dir.data(), n, d), host_matrix(out.data(), n, d));
  return to_double(out);
}

/// Everything the library computes for one problem in one engine: kept together so that the
/// problem's arrays outlive the solver.
template <class T>
struct LibRun {
  PointData<T> data;
  Problem<T> problem;
  std::unique_ptr<SinkhornSolver<T>> solver;
  Potentials<T> pot;
  SinkhornSummary summary;

  LibRun(const Context& ctx, const RawData& raw, Precision precision,
         const SinkhornOptions& options)
      : data(raw.data<T>()) {
    problem = data.problem();
    solver = std::make_unique<SinkhornSolver<T>>(ctx, problem, precision);
    summary = solver->solve(options, &pot);
  }
  std::int64_t n() const { return data.n; }
  std::int64_t m() const { return data.m; }
  std::int64_t d() const { return data.d; }

  using Grad = GradientBlocks;
  Grad gradient() {
    return gradient_blocks<T>(
        n(), m(), d(), [&](const GradientOutput<T>& out) { return solver->gradient(pot, out); });
  }
  /// H A for a flattened n x d direction (given in double, rounded to T).
  std::vector<double> hvp(const std::vector<double>& A, const HvpOptions& o, HvpSummary* s) {
    return hvp_of<T>(n(), d(), A, [&](MatrixView<const T> dir, MatrixView<T> out) {
      *s = solver->hvp(pot, dir, out, o);
    });
  }
};

/// The same for the divergence (three problems).
template <class T>
struct LibDivRun {
  PointData<T> data;
  Problem<T> problem;
  std::unique_ptr<SinkhornSolver<T>> solver;
  DivergencePotentials<T> pot;
  DivergenceSummary summary;

  LibDivRun(const Context& ctx, const RawData& raw, Precision precision,
            const SinkhornOptions& options)
      : data(raw.data<T>()) {
    problem = data.problem();
    solver = std::make_unique<SinkhornSolver<T>>(ctx, problem, precision);
    summary = solver->solve_divergence(options, &pot);
  }
  std::int64_t n() const { return data.n; }
  std::int64_t m() const { return data.m; }
  std::int64_t d() const { return data.d; }
  GradientBlocks gradient() {
    return gradient_blocks<T>(n(), m(), d(), [&](const GradientOutput<T>& out) {
      return solver->divergence_gradient(pot, out);
    });
  }
  std::vector<double> hvp(const std::vector<double>& A, const HvpOptions& o, HvpSummary* s) {
    return hvp_of<T>(n(), d(), A, [&](MatrixView<const T> dir, MatrixView<T> out) {
      *s = solver->divergence_hvp(pot, dir, out, o);
    });
  }
};

/// A seeded random direction (n x d flattened), N(0, 1) entries.
inline std::vector<double> random_direction(std::int64_t count, std::uint64_t seed) {
  Rng rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> v(static_cast<std::size_t>(count));
  for (double& e : v) e = nd(rng);
  return v;
}

/// |u - v|_2 / |v|_2 (infinite when u has a non-finite entry or the sizes differ).
inline double rel_l2(const std::vector<double>& u, const std::vector<double>& v) {
  if (u.size() != v.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (std::size_t k = 0; k < v.size(); ++k) {
    if (!std::isfinite(u[k])) return std::numeric_limits<double>::infinity();
    num += (u[k] - v[k]) * (u[k] - v[k]);
    den += v[k] * v[k];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

inline double inf_norm(const std::vector<double>& v) {
  double m = 0;
  for (double e : v) m = std::max(m, std::abs(e));
  return m;
}
inline double max_abs_diff(const std::vector<double>& u, const std::vector<double>& v) {
  if (u.size() != v.size()) return std::numeric_limits<double>::infinity();
  double m = 0;
  for (std::size_t k = 0; k < v.size(); ++k) {
    if (!std::isfinite(u[k])) return std::numeric_limits<double>::infinity();
    m = std::max(m, std::abs(u[k] - v[k]));
  }
  return m;
}

inline double dot(const std::vector<double>& u, const std::vector<double>& v) {
  double s = 0;
  for (std::size_t k = 0; k < u.size(); ++k) s += u[k] * v[k];
  return s;
}

inline std::string lower(std::string s) {
  for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

/// Whether `word` occurs in `text` as a whole word (its neighbours are not letters, digits or
/// '_'), case-insensitively.
inline bool has_word(const std::string& text, const std::string& word) {
  const std::string t = lower(text), w = lower(word);
  auto is_word = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; };
  for (std::size_t pos = t.find(w); pos != std::string::npos; pos = t.find(w, pos + 1)) {
    const bool left = pos == 0 || !is_word(t[pos - 1]);
    const bool right = pos + w.size() == t.size() || !is_word(t[pos + w.size()]);
    if (left && right) return true;
  }
  return false;
}

/// Runs `f`, expecting InvalidArgument whose message names every one of `words`: each entry is
/// a list of alternatives separated by '|', matched as whole words, case-insensitively.
inline ::testing::AssertionResult throws_invalid(const std::function<void()>& f,
                                                 const std::vector<std::string>& words) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    for (const std::string& alternatives : words) {
      bool found = false;
      std::size_t start = 0;
      while (!found) {
        const std::size_t bar = alternatives.find('|', start);
        found = has_word(
            e.what(),
            alternatives.substr(start, bar == std::string::npos ? std::string::npos : bar - start));
        if (bar == std::string::npos) break;
        start = bar + 1;
      }
      if (!found)
        return ::testing::AssertionFailure()
               << "InvalidArgument without \"" << alternatives << "\": " << e.what();
    }
    return ::testing::AssertionSuccess() << e.what();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "another exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "no exception";
}

}  // namespace kantor::testing
