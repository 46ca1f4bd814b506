// Newton-CG (Steihaug-Toint), L-BFGS and gradient descent over the Objective interface.
// Algorithms, stopping rules and defaults: docs/newton.md.
#include "kantor/newton.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <iomanip>
#include <limits>
#include <sstream>

#include "kantor/error.hpp"

namespace kantor {

// ---- SumObjective ---------------------------------------------------------------------------

void SumObjective::add(Objective* term, double weight) {
  if (term == nullptr) throw InvalidArgument("SumObjective::add: term must not be null");
  if (!std::isfinite(weight))
    throw InvalidArgument("SumObjective::add: weight must be finite, got " + format_number(weight));
  const std::int64_t n = term->num_parameters();
  if (n < 1)
    throw InvalidArgument("SumObjective::add: term has " + std::to_string(n) +
                          " parameters (need >= 1)");
  if (!terms_.empty() && n != num_parameters())
    throw InvalidArgument("SumObjective::add: term has " + std::to_string(n) +
                          " parameters but the sum has " + std::to_string(num_parameters()));
  terms_.emplace_back(term, weight);
  scratch_.resize(std::size_t(n));
}

std::int64_t SumObjective::num_parameters() const {
  return terms_.empty() ? 0 : terms_.front().first->num_parameters();
}

bool SumObjective::evaluate(const double* x, double* value, double* gradient) {
  const std::size_t n = scratch_.size();
  double total = 0;
  if (gradient) std::fill(gradient, gradient + n, 0.0);
  for (const auto& [term, w] : terms_) {
    double v = 0;
    if (!term->evaluate(x, &v, gradient ? scratch_.data() : nullptr)) return false;
    total += w * v;
    if (gradient)
      for (std::size_t i = 0; i < n; ++i) gradient[i] += w * scratch_[i];
  }
  *value = total;
  return true;
}

bool SumObjective::hessian_vector(const double* v, double* out) {
  const std::size_t n = scratch_.size();
  std::fill(out, out + n, 0.0);
  for (const auto& [term, w] : terms_) {
    if (!term->hessian_vector(v, scratch_.data())) return false;
    for (std::size_t i = 0; i < n; ++i) out[i] += w * scratch_[i];
  }
  return true;
}

void SumObjective::accepted(const double* x) {
  for (const auto& t : terms_) t.first->accepted(x);
}

// ---- names and options ----------------------------------------------------------------------

std::string to_string(MinimizerMethod m) {
  switch (m) {
    case MinimizerMethod::kNewtonCG:
      return "newton-cg";
    case MinimizerMethod::kLbfgs:
      return "lbfgs";
    case MinimizerMethod::kGradientDescent:
      return "gradient-descent";
  }
  return "?";
}

MinimizerMethod parse_minimizer_method(const std::string& s, const std::string& what) {
  for (MinimizerMethod m :
       {MinimizerMethod::kNewtonCG, MinimizerMethod::kLbfgs, MinimizerMethod::kGradientDescent})
    if (s == to_string(m)) return m;
  throw InvalidArgument(what + ": unknown value '" + s +
                        "' (expected newton-cg, lbfgs or gradient-descent)");
}

std::string to_string(MinimizerTermination t) {
  switch (t) {
    case MinimizerTermination::kNotRun:
      return "not run";
    case MinimizerTermination::kGradientTolerance:
      return "gradient tolerance";
    case MinimizerTermination::kFunctionTolerance:
      return "function tolerance";
    case MinimizerTermination::kMaxIterations:
      return "max iterations";
    case MinimizerTermination::kUserAbort:
      return "user abort";
    case MinimizerTermination::kUserSuccess:
      return "user success";
    case MinimizerTermination::kNumericalFailure:
      return "numerical failure";
    case MinimizerTermination::kNoProgress:
      return "no progress";
  }
  return "?";
}

bool NewtonOptions::is_valid(std::string* why) const {
  auto fail = [&](const std::string& m) {
    if (why) *why = m;
    return false;
  };
  auto finite = [](double v) { return std::isfinite(v); };
  if (method != MinimizerMethod::kNewtonCG && method != MinimizerMethod::kLbfgs &&
      method != MinimizerMethod::kGradientDescent)
    return fail("method is not a MinimizerMethod value: " +
                std::to_string(static_cast<int>(method)));
  if (max_iterations < 0)
    return fail("max_iterations must be >= 0, got " + std::to_string(max_iterations));
  if (!(gradient_tolerance >= 0) || !finite(gradient_tolerance))
    return fail("gradient_tolerance must be finite and >= 0, got " +
                format_number(gradient_tolerance));
  if (!(function_tolerance >= 0) || !finite(function_tolerance))
    return fail("function_tolerance must be finite and >= 0, got " +
                format_number(function_tolerance));
  if (!(initial_trust_radius > 0) || !finite(initial_trust_radius))
    return fail("initial_trust_radius must be finite and > 0, got " +
                format_number(initial_trust_radius));
  if (!(max_trust_radius >= initial_trust_radius) || !finite(max_trust_radius))
    return fail("max_trust_radius must be finite and >= initial_trust_radius (" +
                format_number(initial_trust_radius) + "), got " + format_number(max_trust_radius));
  if (!(eta >= 0 && eta < 0.25)) return fail("eta must be in [0, 0.25), got " + format_number(eta));
  if (!(cg_forcing_max > 0 && cg_forcing_max < 1))
    return fail("cg_forcing_max must be in (0, 1), got " + format_number(cg_forcing_max));
  if (!(cg_forcing_exponent > 0 && cg_forcing_exponent <= 1))
    return fail("cg_forcing_exponent must be in (0, 1], got " + format_number(cg_forcing_exponent));
  if (max_cg_iterations < 0)
    return fail("max_cg_iterations must be >= 0 (0 = num_parameters), got " +
                std::to_string(max_cg_iterations));
  if (lbfgs_memory < 1)
    return fail("lbfgs_memory must be >= 1, got " + std::to_string(lbfgs_memory));
  if (!(sufficient_decrease > 0 && sufficient_decrease < 0.5))
    return fail("sufficient_decrease must be in (0, 0.5), got " +
                format_number(sufficient_decrease));
  for (const auto& cb : callbacks)
    if (!cb) return fail("callbacks must not hold an empty std::function");
  return true;
}

namespace {

using Clock = std::chrono::steady_clock;
using Vec = std::vector<double>;
constexpr double kEps = std::numeric_limits<double>::epsilon();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}
double norm2(const Vec& a) { return std::sqrt(dot(a, a)); }
double norm_inf(const Vec& a) {
  double m = 0;
  for (double v : a) m = std::max(m, std::abs(v));
  return m;
}
bool all_finite(const Vec& a) {
  for (double v : a)
    if (!std::isfinite(v)) return false;
  return true;
}
// y += a x
void axpy(double a, const Vec& x, Vec* y) {
  for (std::size_t i = 0; i < x.size(); ++i) (*y)[i] += a * x[i];
}

/// The smallest eigenvalue of the symmetric tridiagonal matrix with diagonal `a` and
/// off-diagonal `b` (b[i] couples i and i+1), by Sturm-sequence bisection.
double smallest_eigenvalue(const Vec& a, const Vec& b) {
  const std::size_t k = a.size();
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (std::size_t i = 0; i < k; ++i) {
    const double r = (i > 0 ? std::abs(b[i - 1]) : 0.0) + (i + 1 < k ? std::abs(b[i]) : 0.0);
    lo = std::min(lo, a[i] - r);
    hi = std::max(hi, a[i] + r);
  }
  // Number of eigenvalues < lambda: the negative pivots of the LDL^T factorization of T - lambda.
  auto count_below = [&](double lambda) {
    int count = 0;
    double q = 1;
    for (std::size_t i = 0; i < k; ++i) {
      const double off = i > 0 ? b[i - 1] * b[i - 1] / q : 0.0;
      q = a[i] - lambda - off;
      if (q == 0) q = -kEps * (std::abs(a[i]) + std::abs(lambda) + 1e-300);
      if (q < 0) ++count;
    }
    return count;
  };
  // Invariant: no eigenvalue below lo, at least one below or at hi.
  for (int it = 0; it < 200 && hi - lo > 2 * kEps * std::max(std::abs(lo), std::abs(hi)); ++it) {
    const double mid = 0.5 * (lo + hi);
    if (mid <= lo || mid >= hi) break;
    if (count_below(mid) >= 1)
      hi = mid;
    else
      lo = mid;
  }
  return 0.5 * (lo + hi);
}

/// Where |p + tau d| = radius for tau >= 0 (p inside the ball).
double to_boundary(const Vec& p, const Vec& d, double radius) {
  const double pd = dot(p, d), dd = dot(d, d), pp = dot(p, p);
  const double room = std::max(0.0, radius * radius - pp);
  const double disc = std::sqrt(pd * pd + dd * room);
  // The two algebraically equal forms, each free of cancellation for one sign of p.d.
  return pd > 0 ? room / (pd + disc) : (disc - pd) / dd;
}

class Minimizer {
 public:
  Minimizer(Objective& objective, const NewtonOptions& options)
      : f_obj_(objective),
        opt_(options),
        n_(std::size_t(objective.num_parameters())),
        t0_(Clock::now()) {}

  NewtonSummary run(double* x_io);

 private:
  // What one outer iteration did.
  struct Step {
    bool accepted = false;
    double step_norm = 0;
    double radius = kNaN;
    double rho = kNaN;
    std::int64_t cg_iterations = 0;
    bool negative_curvature = false;
    double min_curvature = kNaN;
    bool no_progress = false;
    std::string failure;  // non-empty: numerical failure, with this message
  };

  bool evaluate(const Vec& x, double* f, Vec* g) {
    ++s_.evaluation_count;
    if (g) ++s_.gradient_count;
    return f_obj_.evaluate(x.data(), f, g ? g->data() : nullptr);
  }
  // Value at a trial point: false when it failed or is not finite.
  bool trial_value(const Vec& x, double* f) { return evaluate(x, f, nullptr) && std::isfinite(*f); }
  // The slack under which a change of f is rounding: 10 ulp of max(1, |f|).
  double rounding(double f) const { return 10 * kEps * std::max(1.0, std::abs(f)); }
  // A step length below which x + step == x in floating point.
  double step_floor() const { return kEps * (norm2(x_) + kEps); }
  // Evaluates the gradient at the trial point xt (value ft) and makes it the iterate; false (x
  // unchanged, the message in *failure) when that fails or is not finite.
  bool move_to(Vec* xt, double ft, std::string* failure);

  Step newton_cg_step();
  Step line_search_step();
  NewtonIterationRecord record(std::int64_t iteration, const Step& st) const;

  Objective& f_obj_;
  const NewtonOptions& opt_;
  std::size_t n_;
  Clock::time_point t0_;
  NewtonSummary s_;
  Vec x_, g_;
  double f_ = 0;
  // Newton-CG
  double radius_ = 0;
  // line searches
  std::deque<std::pair<Vec, Vec>> pairs_;  // L-BFGS (s, y), oldest first
  double alpha_prev_ = 0;                  // gradient descent: the last accepted multiplier
};

bool Minimizer::move_to(Vec* xt, double ft, std::string* failure) {
  Vec gt(n_);
  double f_at = ft;
  if (!evaluate(*xt, &f_at, &gt)) {
    *failure = "the gradient evaluation failed at an accepted point (evaluate() returned false)";
    return false;
  }
  if (!std::isfinite(f_at) || !all_finite(gt)) {
    *failure = "the gradient is not finite at an accepted point";
    return false;
  }
  x_.swap(*xt);
  g_.swap(gt);
  f_ = f_at;
  f_obj_.accepted(x_.data());
  return true;
}

NewtonIterationRecord Minimizer::record(std::int64_t iteration, const Step& st) const {
  NewtonIterationRecord r;
  r.iteration = iteration;
  r.objective = f_;
  r.gradient_norm = norm_inf(g_);
  r.step_norm = st.step_norm;
  r.trust_radius = st.radius;
  r.cg_iterations = st.cg_iterations;
  r.hvp_count = s_.hvp_count;
  r.gradient_count = s_.gradient_count;
  r.evaluation_count = s_.evaluation_count;
  r.negative_curvature = st.negative_curvature;
  r.min_curvature = st.min_curvature;
  r.step_accepted = st.accepted;
  r.rho = st.rho;
  r.seconds = std::chrono::duration<double>(Clock::now() - t0_).count();
  return r;
}

// Steihaug-Toint: CG on the model m(p) = g.p + p.Hp/2 from p = 0 until the forcing tolerance,
// the trust region's boundary, negative curvature or the CG budget; then the ratio test.
Minimizer::Step Minimizer::newton_cg_step() {
  Step st;
  st.radius = radius_;
  const double gnorm = norm2(g_);
  const double forcing = std::min(opt_.cg_forcing_max, std::pow(gnorm, opt_.cg_forcing_exponent));
  const double tol = forcing * gnorm;
  const std::int64_t max_cg =
      opt_.max_cg_iterations > 0 ? opt_.max_cg_iterations : std::int64_t(n_);

  Vec p(n_, 0.0), hp(n_, 0.0), r = g_, d(n_), hd(n_);
  for (std::size_t i = 0; i < n_; ++i) d[i] = -r[i];
  double rr = dot(r, r);
  // The Lanczos tridiagonal from the CG coefficients: diagonal 1/alpha_j + beta_j-1/alpha_j-1,
  // off-diagonal sqrt(beta_j)/alpha_j (1/alpha_j = d.Hd / r.r, meaningful for d.Hd <= 0 too).
  Vec diag, off;
  double inv_alpha_prev = 0, beta_prev = 0;
  double min_rayleigh = std::numeric_limits<double>::infinity();
  for (std::int64_t j = 0; j < max_cg; ++j) {
    ++s_.hvp_count;
    ++st.cg_iterations;
    if (!f_obj_.hessian_vector(d.data(), hd.data())) {
      st.failure = "hessian_vector() failed (returned false)";
      return st;
    }
    if (!all_finite(hd)) {
      st.failure = "hessian_vector() returned a non-finite product";
      return st;
    }
    const double kappa = dot(d, hd), dd = dot(d, d);
    min_rayleigh = std::min(min_rayleigh, kappa / dd);
    const double inv_alpha = kappa / rr;
    if (j > 0) off.push_back(std::sqrt(beta_prev) * inv_alpha_prev);
    diag.push_back(inv_alpha + beta_prev * inv_alpha_prev);
    if (kappa <= 0) {  // negative curvature: follow d to the boundary
      st.negative_curvature = true;
      const double tau = to_boundary(p, d, radius_);
      axpy(tau, d, &p);
      axpy(tau, hd, &hp);
      break;
    }
    const double alpha = rr / kappa;
    const double next_norm2 = dot(p, p) + alpha * (2 * dot(p, d) + alpha * dd);
    if (next_norm2 >= radius_ * radius_) {  // the CG step leaves the region: stop on its boundary
      const double tau = to_boundary(p, d, radius_);
      axpy(tau, d, &p);
      axpy(tau, hd, &hp);
      break;
    }
    axpy(alpha, d, &p);
    axpy(alpha, hd, &hp);
    axpy(alpha, hd, &r);
    const double rr_next = dot(r, r);
    if (std::sqrt(rr_next) <= tol) break;
    const double beta = rr_next / rr;
    for (std::size_t i = 0; i < n_; ++i) d[i] = -r[i] + beta * d[i];
    rr = rr_next;
    inv_alpha_prev = inv_alpha;
    beta_prev = beta;
  }
  st.min_curvature = std::min(min_rayleigh, smallest_eigenvalue(diag, off));
  st.step_norm = norm2(p);

  // Ratio test. Both reductions carry a rounding slack (10 ulp of f): near the minimum, where the
  // model predicts less than f's rounding, rho -> 1 instead of the ratio of two rounding errors.
  const double predicted = -(dot(g_, p) + 0.5 * dot(p, hp));
  Vec xt = x_;
  axpy(1.0, p, &xt);
  double ft = kNaN;
  const bool ok = trial_value(xt, &ft);
  const double slack = rounding(f_);
  // predicted > 0 unless rounding (or a wrong Hessian-vector product) says otherwise; a ratio
  // over a non-positive denominator means nothing: reject.
  if (ok && predicted + slack > 0) st.rho = (f_ - ft + slack) / (predicted + slack);
  st.accepted = ok && st.rho > opt_.eta;
  if (!(st.rho >= 0.25)) {
    radius_ = 0.25 * std::min(radius_, st.step_norm);
  } else if (st.rho > 0.75 && st.step_norm >= (1 - 1e-6) * radius_) {
    radius_ = std::min(2 * radius_, opt_.max_trust_radius);
  }
  if (st.accepted) {
    st.accepted = move_to(&xt, ft, &st.failure);
  } else if (radius_ < step_floor()) {
    st.no_progress = true;
  }
  return st;
}

// L-BFGS or gradient descent: a direction, then backtracking from the first trial step until
// Armijo's sufficient decrease holds (with the same rounding slack as the ratio test).
Minimizer::Step Minimizer::line_search_step() {
  Step st;
  const bool lbfgs = opt_.method == MinimizerMethod::kLbfgs;
  Vec d(n_);
  for (std::size_t i = 0; i < n_; ++i) d[i] = -g_[i];
  double alpha = 1;
  if (lbfgs && !pairs_.empty()) {
    // Two-loop recursion: d = -H g, H0 = (s.y / y.y) I from the newest pair.
    std::vector<double> a(pairs_.size());
    for (std::size_t k = pairs_.size(); k-- > 0;) {
      const auto& [s, y] = pairs_[k];
      a[k] = dot(s, d) / dot(s, y);
      axpy(-a[k], y, &d);
    }
    const auto& [s_new, y_new] = pairs_.back();
    const double gamma = dot(s_new, y_new) / dot(y_new, y_new);
    for (double& v : d) v *= gamma;
    for (std::size_t k = 0; k < pairs_.size(); ++k) {
      const auto& [s, y] = pairs_[k];
      const double b = dot(y, d) / dot(s, y);
      axpy(a[k] - b, s, &d);
    }
    if (!(dot(g_, d) < 0) || !all_finite(d)) {  // not a descent direction: restart
      pairs_.clear();
      for (std::size_t i = 0; i < n_; ++i) d[i] = -g_[i];
    }
  }
  const double dnorm = norm2(d);
  if (lbfgs && pairs_.empty()) {
    alpha = std::min(1.0, opt_.initial_trust_radius / dnorm);
  } else if (!lbfgs) {
    alpha = alpha_prev_ > 0 ? 2 * alpha_prev_ : std::min(1.0, opt_.initial_trust_radius / dnorm);
  }
  const double slope = dot(g_, d);  // < 0
  const double slack = rounding(f_);
  const double floor = step_floor();
  Vec xt(n_);
  double ft = kNaN;
  for (;;) {
    for (std::size_t i = 0; i < n_; ++i) xt[i] = x_[i] + alpha * d[i];
    const bool ok = trial_value(xt, &ft);
    if (ok && ft <= f_ + opt_.sufficient_decrease * alpha * slope + slack) break;
    // Backtrack: the minimizer of the quadratic through f, slope and ft, kept in
    // [alpha/10, alpha/2]; halve when the trial point failed.
    double next = 0.5 * alpha;
    if (ok) {
      const double curv = ft - f_ - slope * alpha;
      if (curv > 0) next = std::clamp(-slope * alpha * alpha / (2 * curv), 0.1 * alpha, next);
    }
    alpha = next;
    if (alpha * dnorm < floor) {
      st.no_progress = true;
      st.step_norm = alpha * dnorm;
      return st;
    }
  }
  st.step_norm = alpha * dnorm;
  st.rho = (f_ - ft) / (-alpha * slope);
  Vec x_old = x_, g_old = g_;
  st.accepted = move_to(&xt, ft, &st.failure);
  if (!st.accepted) return st;
  if (lbfgs) {
    Vec s = x_, y = g_;
    axpy(-1.0, x_old, &s);
    axpy(-1.0, g_old, &y);
    const double sy = dot(s, y);
    if (sy > kEps * norm2(s) * norm2(y)) {  // curvature pair: keep it
      if (std::int64_t(pairs_.size()) == opt_.lbfgs_memory) pairs_.pop_front();
      pairs_.emplace_back(std::move(s), std::move(y));
    }
  } else {
    alpha_prev_ = alpha;
  }
  return st;
}

NewtonSummary Minimizer::run(double* x_io) {
  s_.method = opt_.method;
  s_.num_parameters = std::int64_t(n_);
  auto finish = [&](MinimizerTermination t, const std::string& message) {
    s_.termination = t;
    s_.message = message;
    s_.seconds = std::chrono::duration<double>(Clock::now() - t0_).count();
    return s_;
  };
  auto at = [](std::int64_t k) { return " at iteration " + std::to_string(k); };
  auto gradient_met = [&](std::int64_t k) {
    std::ostringstream os;
    os << std::setprecision(3) << "|g|_inf = " << s_.gradient_norm
       << " <= gradient_tolerance * max(1, |g0|_inf) = " << s_.gradient_threshold << at(k);
    return finish(MinimizerTermination::kGradientTolerance, os.str());
  };
  // Keeps the record, runs the callbacks in order; true when one ended the minimization.
  auto stopped_by_callback = [&](const NewtonIterationRecord& r) {
    if (opt_.record_iterations) s_.records.push_back(r);
    for (const auto& c : opt_.callbacks) {
      const CallbackResult res = c(r);
      if (res == CallbackResult::kAbort) {
        finish(MinimizerTermination::kUserAbort, "a callback aborted" + at(r.iteration));
        return true;
      }
      if (res == CallbackResult::kStopSuccessfully) {
        finish(MinimizerTermination::kUserSuccess, "a callback stopped" + at(r.iteration));
        return true;
      }
    }
    return false;
  };

  x_.assign(x_io, x_io + n_);
  g_.assign(n_, 0.0);
  if (!evaluate(x_, &f_, &g_))
    return finish(MinimizerTermination::kNumericalFailure,
                  "the objective could not be evaluated at the initial point (evaluate() "
                  "returned false)");
  s_.initial_objective = s_.final_objective = f_;
  s_.initial_gradient_norm = s_.gradient_norm = norm_inf(g_);
  if (!std::isfinite(f_))
    return finish(
        MinimizerTermination::kNumericalFailure,
        "the objective is not finite at the initial point (f = " + format_number(f_) + ")");
  if (!all_finite(g_))
    return finish(MinimizerTermination::kNumericalFailure,
                  "the gradient is not finite at the initial point");
  f_obj_.accepted(x_.data());
  s_.gradient_threshold = opt_.gradient_tolerance * std::max(1.0, s_.initial_gradient_norm);
  radius_ = opt_.initial_trust_radius;

  Step initial;
  initial.accepted = true;
  if (opt_.method == MinimizerMethod::kNewtonCG) initial.radius = radius_;
  if (stopped_by_callback(record(0, initial))) return s_;
  if (s_.gradient_norm <= s_.gradient_threshold) return gradient_met(0);

  for (std::int64_t k = 1; k <= opt_.max_iterations; ++k) {
    const double f_old = f_;
    const Step st =
        opt_.method == MinimizerMethod::kNewtonCG ? newton_cg_step() : line_search_step();
    s_.outer_iterations = k;
    s_.cg_iterations += st.cg_iterations;
    if (st.accepted) ++s_.accepted_steps;
    if (st.negative_curvature) ++s_.negative_curvature_steps;
    if (st.min_curvature <= 0 && !(s_.most_negative_curvature <= st.min_curvature))
      s_.most_negative_curvature = st.min_curvature;
    s_.final_objective = f_;
    s_.gradient_norm = norm_inf(g_);
    std::copy(x_.begin(), x_.end(), x_io);
    if (!st.failure.empty()) {
      if (opt_.record_iterations) s_.records.push_back(record(k, st));
      return finish(MinimizerTermination::kNumericalFailure, st.failure + at(k));
    }
    if (stopped_by_callback(record(k, st))) return s_;
    if (s_.gradient_norm <= s_.gradient_threshold) return gradient_met(k);
    if (st.accepted && std::abs(f_old - f_) <= opt_.function_tolerance * std::abs(f_old)) {
      std::ostringstream os;
      os << std::setprecision(3) << "|f_k - f_k+1| = " << std::abs(f_old - f_)
         << " <= function_tolerance * |f_k| = " << opt_.function_tolerance * std::abs(f_old)
         << at(k);
      return finish(MinimizerTermination::kFunctionTolerance, os.str());
    }
    if (st.no_progress) {
      std::ostringstream os;
      os << std::setprecision(3)
         << (opt_.method == MinimizerMethod::kNewtonCG ? "the trust radius"
                                                       : "the line-search step")
         << " fell below the rounding of x" << at(k) << " with |g|_inf = " << s_.gradient_norm
         << " > " << s_.gradient_threshold;
      return finish(MinimizerTermination::kNoProgress, os.str());
    }
  }
  std::ostringstream os;
  os << std::setprecision(3) << "max_iterations = " << opt_.max_iterations
     << " reached with |g|_inf = " << s_.gradient_norm << " > " << s_.gradient_threshold;
  return finish(MinimizerTermination::kMaxIterations, os.str());
}

}  // namespace

NewtonSummary minimize(Objective& objective, const NewtonOptions& options, double* x) {
  std::string why;
  if (!options.is_valid(&why)) throw InvalidArgument("NewtonOptions: " + why);
  if (x == nullptr) throw InvalidArgument("minimize: x must not be null");
  const std::int64_t n = objective.num_parameters();
  if (n < 1)
    throw InvalidArgument("minimize: the objective has " + std::to_string(n) +
                          " parameters (need >= 1)");
  return Minimizer(objective, options).run(x);
}

// ---- reports --------------------------------------------------------------------------------

std::string NewtonSummary::brief_report() const {
  std::ostringstream os;
  os << std::setprecision(6) << to_string(method) << " " << to_string(termination) << ": "
     << outer_iterations << " iterations (" << accepted_steps << " accepted";
  if (method == MinimizerMethod::kNewtonCG) os << ", " << cg_iterations << " CG";
  os << "), f " << std::setprecision(10) << initial_objective << " -> " << final_objective
     << std::setprecision(3) << ", |g|_inf " << initial_gradient_norm << " -> " << gradient_norm
     << ", " << gradient_count << " gradients";
  if (method == MinimizerMethod::kNewtonCG) os << ", " << hvp_count << " HVPs";
  os << ", " << seconds << " s";
  return os.str();
}

std::string NewtonSummary::full_report() const {
  std::ostringstream os;
  os << std::setprecision(12);
  os << "kantor minimizer summary\n"
     << "  method             " << to_string(method) << "\n"
     << "  parameters         " << num_parameters << "\n"
     << "  termination        " << to_string(termination) << ": " << message << "\n"
     << "  objective          " << initial_objective << " -> " << final_objective << "\n"
     << "  gradient |g|_inf   " << initial_gradient_norm << " -> " << gradient_norm
     << " (converged at <= " << gradient_threshold << ")\n"
     << "  iterations         " << outer_iterations << " (" << accepted_steps << " accepted)\n"
     << "  CG iterations      " << cg_iterations << "\n"
     << "  evaluations        " << evaluation_count << " (" << gradient_count
     << " with a gradient), " << hvp_count << " Hessian-vector products\n"
     << "  negative curvature " << negative_curvature_steps << " steps, most negative "
     << most_negative_curvature << "\n"
     << "  time (s)           " << seconds << "\n";
  return os.str();
}

}  // namespace kantor
