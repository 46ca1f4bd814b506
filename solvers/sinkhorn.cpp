// Sinkhorn iteration logic, written once over the Oracle interface for every engine.
// Schedules, annealing and stopping rules: docs/numerics.md section 3.
#include "kantor/sinkhorn.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>
#include <type_traits>

#include "kantor/buffer.hpp"
#include "kantor/error.hpp"
#include "kantor/oracle.hpp"

namespace kantor {

std::string to_string(Schedule s) {
  return s == Schedule::kAlternating ? "alternating" : "symmetric";
}

Schedule parse_schedule(const std::string& s, const std::string& what) {
  if (s == "alternating") return Schedule::kAlternating;
  if (s == "symmetric") return Schedule::kSymmetric;
  throw InvalidArgument(what + ": unknown value '" + s + "' (expected alternating or symmetric)");
}

std::string to_string(TerminationType t) {
  switch (t) {
    case TerminationType::kNotRun:
      return "not run";
    case TerminationType::kConverged:
      return "converged";
    case TerminationType::kMaxIterations:
      return "max iterations";
    case TerminationType::kUserAbort:
      return "user abort";
    case TerminationType::kUserSuccess:
      return "user success";
    case TerminationType::kNumericalFailure:
      return "numerical failure";
  }
  return "?";
}

double default_tolerance(Precision p) {
  switch (p) {
    case Precision::kFp64:
      return 1e-9;
    case Precision::kFp32:
      // Float potentials put a floor of about ulp(|f|)/eps under the measured error (1.35e-5 and
      // 1.5e-5 seen on 500 x 400 Gaussian clouds, d = 3 eps = 0.01 and d = 64 eps = 0.1), so
      // 1e-5 was sometimes unreachable.
      return 1e-4;
    case Precision::kTf32:
      return 1e-4;
    case Precision::kBf16:
      return 1e-2;
  }
  return 1e-6;
}

bool SinkhornOptions::is_valid(std::string* why) const {
  auto fail = [&](const std::string& m) {
    if (why) *why = m;
    return false;
  };
  if (schedule != Schedule::kAlternating && schedule != Schedule::kSymmetric)
    return fail("schedule must be kAlternating or kSymmetric, got " +
                std::to_string(static_cast<int>(schedule)));
  if (precision && *precision != Precision::kFp32 && *precision != Precision::kTf32 &&
      *precision != Precision::kBf16 && *precision != Precision::kFp64)
    return fail("precision is not a Precision value: " +
                std::to_string(static_cast<int>(*precision)));
  if (!(scaling > 0 && scaling < 1))
    return fail("scaling must be in (0, 1), got " + std::to_string(scaling));
  if (!(initial_epsilon >= 0) || !std::isfinite(initial_epsilon))
    return fail("initial_epsilon must be >= 0 (0 = automatic), got " +
                std::to_string(initial_epsilon));
  if (!(tolerance >= 0) || !std::isfinite(tolerance))
    return fail("tolerance must be >= 0 (0 = default of the precision), got " +
                std::to_string(tolerance));
  if (max_iterations < 1)
    return fail("max_iterations must be >= 1, got " + std::to_string(max_iterations));
  if (check_every < 1) return fail("check_every must be >= 1, got " + std::to_string(check_every));
  for (const auto& cb : callbacks)
    if (!cb) return fail("callbacks must not hold an empty std::function");
  return true;
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

template <class T>
constexpr Precision natural_precision() {
  return std::is_same<T, double>::value ? Precision::kFp64 : Precision::kFp32;
}

// The iteration loop on an existing oracle. `pot` receives the potentials (warm start when it
// holds vectors of sizes n and m).
template <class T>
SinkhornSummary run_sinkhorn(const Context& ctx, Oracle<T>& oracle, double cost_scale,
                             double epsilon, const SinkhornOptions& options, Potentials<T>* pot,
                             Clock::time_point t_start) {
  SinkhornSummary s;
  s.n = oracle.n();
  s.m = oracle.m();
  s.d = oracle.dim();
  s.schedule = options.schedule;
  s.backend = ctx.backend();
  s.backend_note = ctx.backend_note();
  s.precision = oracle.precision();
  s.engine = oracle.description();
  s.epsilon = epsilon;
  s.tolerance = options.tolerance > 0 ? options.tolerance : default_tolerance(s.precision);

  const bool warm = pot->f.size() == s.n && pot->g.size() == s.m;
  if (!warm) {
    pot->f = Buffer<T>(ctx, s.n);
    pot->g = Buffer<T>(ctx, s.m);
    detail::fill_bytes(ctx, pot->f.data(), pot->f.space(), 0, sizeof(T) * std::size_t(s.n));
    detail::fill_bytes(ctx, pot->g.data(), pot->g.space(), 0, sizeof(T) * std::size_t(s.m));
  } else if (pot->f.space() != ctx.memory_space() || pot->g.space() != ctx.memory_space()) {
    throw InvalidArgument("warm-start potentials are in " + to_string(pot->f.space()) +
                          " memory but the context works in " + to_string(ctx.memory_space()));
  }
  // Guard: a largest cost c*D^2 that overflows T makes every score inf/NaN and the annealing
  // schedule infinite; refuse it before iterating.
  {
    const double d = oracle.diameter();
    const double cmax = cost_scale * d * d;
    if (!std::isfinite(cmax) || cmax > double(std::numeric_limits<T>::max()) / 4) {
      std::ostringstream os;
      os << "problem: the largest cost c*D^2 = " << cmax << " (D = " << d
         << ", the diagonal of the clouds' bounding box) overflows " << to_string(s.precision)
         << " arithmetic; rescale the clouds or the cost scale";
      throw InvalidArgument(os.str());
    }
    // Guard: eps must survive the conversion to T, and the scores (up to c*D^2/eps) must stay
    // finite in T; otherwise every update divides by 0 or overflows.
    const double lowest = double(std::numeric_limits<T>::min());
    if (!(double(T(epsilon)) >= lowest) || !(cmax / epsilon < double(std::numeric_limits<T>::max()) / 4)) {
      std::ostringstream os;
      os << "problem.epsilon = " << epsilon << " is out of range for " << to_string(s.precision)
         << " arithmetic with a largest cost c*D^2 = " << cmax
         << " (need eps >= " << lowest << " and c*D^2/eps representable)";
      throw InvalidArgument(os.str());
    }
    // Guard: the scores are (g_j - C_ij)/eps + log w_j. When eps is so large that the cost part
    // falls below the rounding of log w_j (|log w| ~ log of the number of points), the updates
    // lose the cost altogether and the potentials are rounding noise times eps, while the
    // marginal error, computed from the same rounded scores, still reads ~0 (seen: fp32,
    // eps = 1e9 on costs ~5 reported "converged" with dual -141 instead of 5.689). Refuse eps
    // beyond the point where that rounding exceeds 1e-3 of the largest cost.
    const double u = double(std::numeric_limits<T>::epsilon());
    const double log_w = 1.0 + std::log(double(std::max(s.n, s.m)));
    const double eps_max = 1e-3 * cmax / (u * log_w);
    if (cmax > 0 && epsilon > eps_max) {
      std::ostringstream os;
      os << "problem.epsilon = " << epsilon << " is too large for " << to_string(s.precision)
         << " arithmetic: with a largest cost c*D^2 = " << cmax
         << " the cost would be lost in rounding (need eps <= " << eps_max
         << "; use fp64 or a smaller eps)";
      throw InvalidArgument(os.str());
    }
  }
  // Annealing starts at c*D^2 unless told otherwise; a warm start resumes at the target.
  double eps = epsilon;
  if (options.anneal && !warm) {
    const double d = oracle.diameter();
    const double eps0 = options.initial_epsilon > 0 ? options.initial_epsilon : cost_scale * d * d;
    eps = std::max(eps0, epsilon);
  }
  s.initial_epsilon = eps;

  Buffer<double> scalars(ctx, 4);
  T* f = pot->f.data();
  T* g = pot->g.data();
  const auto t_iter = Clock::now();
  s.seconds_setup = std::chrono::duration<double>(t_iter - t_start).count();

  std::int64_t at_target = 0;  // iterations done at the target eps
  double last_eps = eps;       // eps of the last iteration run: the potentials' eps
  bool first = true;
  s.termination = TerminationType::kMaxIterations;
  while (s.iterations < options.max_iterations) {
    const bool annealing = eps > epsilon;
    // Checks run every check_every iterations during annealing too (NaN detection, callbacks such
    // as a Ctrl-C abort), but only a check at the target eps can declare convergence.
    const bool check = annealing ? (s.iterations + 1) % options.check_every == 0
                                 : (at_target + 1) % options.check_every == 0;
    double* err = check ? scalars.data() : nullptr;
    const double eps_now = eps;
    last_eps = eps_now;
    const T e = T(eps);
    if (options.schedule == Schedule::kAlternating) {
      oracle.update_f(e, g, f, nullptr);
      oracle.update_g(e, f, g, err);  // err: column error of the plan after the f-update
    } else {
      // GeomLoss: a full (unaveraged) step first, then averaged steps.
      oracle.symmetric_step(e, first ? T(1) : T(0.5), f, g, err);
    }
    first = false;
    ++s.iterations;
    if (annealing) {
      ++s.annealing_iterations;
      eps = std::max(eps * options.scaling, epsilon);
    } else {
      ++at_target;
    }
    if (!check) continue;
    const double merr =
        to_host(ctx, VectorView<const double>{scalars.data(), 1, scalars.space()})[0];
    IterationRecord rec{s.iterations, eps_now, merr, seconds_since(t_start)};
    if (options.record_iterations) s.records.push_back(rec);
    if (!std::isfinite(merr)) {
      s.termination = TerminationType::kNumericalFailure;
      s.message = "marginal error is not finite at iteration " + std::to_string(s.iterations);
      break;
    }
    CallbackResult cb = CallbackResult::kContinue;
    for (const auto& c : options.callbacks) {
      cb = c(rec);
      if (cb != CallbackResult::kContinue) break;
    }
    if (cb == CallbackResult::kAbort) {
      s.termination = TerminationType::kUserAbort;
      s.message = "a callback aborted the solve at iteration " + std::to_string(s.iterations);
      break;
    }
    if (cb == CallbackResult::kStopSuccessfully) {
      s.termination = TerminationType::kUserSuccess;
      s.message = "a callback stopped the solve at iteration " + std::to_string(s.iterations);
      break;
    }
    if (!annealing && merr <= s.tolerance) {
      s.termination = TerminationType::kConverged;
      std::ostringstream os;
      os << "marginal error " << std::setprecision(3) << merr << " <= tolerance " << s.tolerance;
      s.message = os.str();
      break;
    }
  }
  if (s.termination == TerminationType::kMaxIterations) {
    std::ostringstream os;
    os << "iteration budget of " << options.max_iterations << " spent before the tolerance "
       << s.tolerance << " was met";
    s.message = os.str();
  }
  const auto t_costs = Clock::now();
  s.seconds_iterations = std::chrono::duration<double>(t_costs - t_iter).count();

  // Values of the returned plan, all in the memory space, then one copy to the host.
  // They are evaluated at the eps the potentials belong to: the target, unless the solve stopped
  // (callback, budget) while still annealing.
  const T e = T(last_eps);
  oracle.marginal_error(e, f, g, scalars.data());
  oracle.dual_value(f, g, scalars.data() + 1);
  const std::vector<double> head = to_host(ctx, scalars.cview());
  Buffer<double> stats(ctx, 3);
  oracle.plan_statistics(e, f, g, stats.data());
  const std::vector<double> st = to_host(ctx, stats.cview());
  s.marginal_error = head[0];
  s.dual_cost = head[1];
  s.plan_mass = st[0];
  s.primal_cost = st[1];
  // eps KL(P | a b) = sum P (f + g - C) - eps (sum P - 1), so the regularized cost is
  // <P,C> + eps KL = sum P (f + g) - eps (sum P - 1).
  s.regularized_cost = st[2] - last_eps * (st[0] - 1.0);
  s.dual_gap = s.regularized_cost - s.dual_cost;
  pot->epsilon = last_eps;
  if (last_eps != epsilon) {
    std::ostringstream os;
    os << "; stopped while annealing: potentials and values are at eps = " << last_eps;
    s.message += os.str();
  }
  // IterationRecord promises a record at the end too: add one when the last iteration was not
  // a check (budget spent between checks or while annealing). Its error is the returned plan's,
  // measured at the target eps.
  if (options.record_iterations &&
      (s.records.empty() || s.records.back().iteration != s.iterations))
    s.records.push_back(
        IterationRecord{s.iterations, epsilon, s.marginal_error, seconds_since(t_start)});
  if (s.termination != TerminationType::kNumericalFailure &&
      !(std::isfinite(s.marginal_error) && std::isfinite(s.dual_cost) &&
        std::isfinite(s.primal_cost))) {
    s.termination = TerminationType::kNumericalFailure;
    s.message = "non-finite potentials or costs at the end of the solve";
  }
  s.seconds_costs = seconds_since(t_costs);
  s.seconds_total = seconds_since(t_start);
  return s;
}

// True when y = x and b = a element by element (host data; device data compares pointers).
template <class T>
bool is_self_problem(const Problem<T>& p) {
  if (p.x.rows != p.y.rows || p.x.cols != p.y.cols) return false;
  if (p.x.space != MemorySpace::kHost || p.y.space != MemorySpace::kHost)
    return p.x.data == p.y.data && p.x.stride == p.y.stride && p.a.data == p.b.data;
  for (std::int64_t i = 0; i < p.x.rows; ++i)
    for (std::int64_t k = 0; k < p.x.cols; ++k)
      if (!(p.x(i, k) == p.y(i, k))) return false;
  if ((p.a.data == nullptr) != (p.b.data == nullptr)) return false;
  if (p.a.data == nullptr) return true;
  if (p.a.space != MemorySpace::kHost || p.b.space != MemorySpace::kHost)
    return p.a.data == p.b.data;
  for (std::int64_t i = 0; i < p.a.size; ++i)
    if (!(p.a[i] == p.b[i])) return false;
  return true;
}

void check_options(const SinkhornOptions& options) {
  std::string why;
  if (!options.is_valid(&why)) throw InvalidArgument("SinkhornOptions: " + why);
}

}  // namespace

template <class T>
SinkhornSummary solve_sinkhorn(const Context& ctx, const Problem<T>& problem,
                               const SinkhornOptions& options, Potentials<T>* potentials) {
  const auto t0 = Clock::now();
  check_options(options);
  auto oracle = make_oracle(ctx, problem, options.precision.value_or(natural_precision<T>()));
  Potentials<T> local;
  return run_sinkhorn(ctx, *oracle, problem.cost_scale, problem.epsilon, options,
                      potentials ? potentials : &local, t0);
}

template <class T>
DivergenceSummary sinkhorn_divergence(const Context& ctx, const Problem<T>& problem,
                                      const SinkhornOptions& options, Potentials<T>* potentials) {
  const auto t0 = Clock::now();
  check_options(options);
  const Precision precision = options.precision.value_or(natural_precision<T>());
  auto oracle_xy = make_oracle(ctx, problem, precision);
  // One eps schedule for the three problems: the one of (x, y).
  SinkhornOptions shared = options;
  if (shared.initial_epsilon == 0) {
    const double d = oracle_xy->diameter();
    shared.initial_epsilon = problem.cost_scale * d * d;
  }
  // The self-problems OT(a, a) and OT(b, b) run the symmetric schedule from f = g (GeomLoss's
  // h <- (h + T(h)) / 2, which keeps f = g bitwise). Alternating updates converge very slowly
  // on a self-problem: an isolated point is transported onto itself at zero cost, so only
  // f_i + g_i is pinned and the mode f_i - g_i decays at a rate set by its tiny coupling to the
  // other points (measured: marginal error still 1e-5 after 10^4 iterations, 25 Gaussian
  // points, eps = 0.1). When x = y and a = b the (x, y) problem is a self-problem too and is
  // solved by the same code path, so that S(a, a) = 0 exactly.
  SinkhornOptions self = shared;
  self.schedule = Schedule::kSymmetric;
  DivergenceSummary out;
  Potentials<T> local;
  out.xy =
      run_sinkhorn(ctx, *oracle_xy, problem.cost_scale, problem.epsilon,
                   is_self_problem(problem) ? self : shared, potentials ? potentials : &local, t0);
  oracle_xy.reset();
  Problem<T> pxx = problem;
  pxx.y = problem.x;
  pxx.b = problem.a;
  Problem<T> pyy = problem;
  pyy.x = problem.y;
  pyy.a = problem.b;
  {
    Potentials<T> p;
    auto o = make_oracle(ctx, pxx, precision);
    out.xx = run_sinkhorn(ctx, *o, problem.cost_scale, problem.epsilon, self, &p, Clock::now());
  }
  {
    Potentials<T> p;
    auto o = make_oracle(ctx, pyy, precision);
    out.yy = run_sinkhorn(ctx, *o, problem.cost_scale, problem.epsilon, self, &p, Clock::now());
  }
  out.divergence = out.xy.dual_cost - 0.5 * out.xx.dual_cost - 0.5 * out.yy.dual_cost;
  return out;
}

template <class T>
void barycentric_map(const Context& ctx, const Problem<T>& problem, const Potentials<T>& potentials,
                     Precision precision, MatrixView<T> out) {
  auto oracle = make_oracle(ctx, problem, precision);
  if (potentials.f.size() != oracle->n() || potentials.g.size() != oracle->m())
    throw InvalidArgument("barycentric_map: potentials have sizes " +
                          std::to_string(potentials.f.size()) + ", " +
                          std::to_string(potentials.g.size()) + " but the problem has n = " +
                          std::to_string(oracle->n()) + ", m = " + std::to_string(oracle->m()));
  if (out.rows != oracle->n() || out.cols != oracle->dim() || out.space != MemorySpace::kHost)
    throw InvalidArgument("barycentric_map: out must be a host n x d matrix");
  const std::int64_t n = oracle->n(), d = oracle->dim();
  Buffer<T> buf(ctx, n * d);
  oracle->barycentric_map(T(problem.epsilon), potentials.f.data(), potentials.g.data(),
                          MatrixView<T>{buf.data(), n, d, d, buf.space()});
  const std::vector<T> host = to_host(ctx, buf.cview());
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t k = 0; k < d; ++k) out(i, k) = host[std::size_t(i * d + k)];
}

template <class T>
void to_shifted(const Context& ctx, const Problem<T>& problem, const Potentials<T>& p,
                std::vector<T>* fh, std::vector<T>* gh) {
  validate(problem);
  *fh = to_host(ctx, p.f.cview());
  *gh = to_host(ctx, p.g.cview());
  if (std::int64_t(fh->size()) != problem.x.rows || std::int64_t(gh->size()) != problem.y.rows)
    throw InvalidArgument("to_shifted: potentials do not match the problem's sizes");
  auto shift = [&](const MatrixView<const T>& v, std::vector<T>* pot) {
    for (std::int64_t i = 0; i < v.rows; ++i) {
      double sq = 0;
      for (std::int64_t k = 0; k < v.cols; ++k) sq += double(v(i, k)) * double(v(i, k));
      (*pot)[std::size_t(i)] = T(double((*pot)[std::size_t(i)]) - problem.cost_scale * sq);
    }
  };
  shift(problem.x, fh);
  shift(problem.y, gh);
}

// ---- reports --------------------------------------------------------------------------------

std::string SinkhornSummary::brief_report() const {
  std::ostringstream os;
  os << std::setprecision(6);
  os << "Sinkhorn " << to_string(termination) << ": " << iterations << " iterations ("
     << annealing_iterations << " annealing), marginal error " << std::setprecision(3)
     << marginal_error << " (tol " << tolerance << "), " << std::setprecision(10) << "dual "
     << dual_cost << ", primal " << primal_cost << ", " << std::setprecision(3) << seconds_total
     << " s [" << to_string(backend) << ", " << to_string(precision) << "]";
  return os.str();
}

std::string SinkhornSummary::full_report() const {
  std::ostringstream os;
  os << std::setprecision(12);
  os << "kantor Sinkhorn summary\n"
     << "  problem            n = " << n << ", m = " << m << ", d = " << d << "\n"
     << "  backend            " << to_string(backend) << " (" << backend_note << ")\n"
     << "  engine             " << engine << "\n"
     << "  precision          " << to_string(precision) << "\n"
     << "  schedule           " << to_string(schedule) << "\n"
     << "  epsilon            " << epsilon << " (schedule started at " << initial_epsilon << ")\n"
     << "  termination        " << to_string(termination) << ": " << message << "\n"
     << "  iterations         " << iterations << " (" << annealing_iterations
     << " while annealing)\n"
     << "  marginal error     " << marginal_error << " (tolerance " << tolerance << ")\n"
     << "  dual cost          " << dual_cost << "   <a,f> + <b,g>\n"
     << "  primal cost        " << primal_cost << "   <P,C>\n"
     << "  regularized cost   " << regularized_cost << "   <P,C> + eps KL(P|ab)\n"
     << "  dual gap           " << dual_gap << "\n"
     << "  plan mass          " << plan_mass << "\n"
     << "  time (s)           setup " << seconds_setup << ", iterations " << seconds_iterations
     << ", costs " << seconds_costs << ", total " << seconds_total << "\n";
  return os.str();
}

std::string DivergenceSummary::brief_report() const {
  std::ostringstream os;
  os << std::setprecision(10) << "Sinkhorn divergence " << divergence << " ("
     << (converged() ? "all three problems converged" : "NOT all converged") << ")\n"
     << "  xy: " << xy.brief_report() << "\n  xx: " << xx.brief_report()
     << "\n  yy: " << yy.brief_report();
  return os.str();
}

std::string DivergenceSummary::full_report() const {
  std::ostringstream os;
  os << std::setprecision(12) << "debiased Sinkhorn divergence " << divergence << "\n"
     << "--- OT(a, b)\n"
     << xy.full_report() << "--- OT(a, a)\n"
     << xx.full_report() << "--- OT(b, b)\n"
     << yy.full_report();
  return os.str();
}

#define KANTOR_INSTANTIATE(T)                                                             \
  template SinkhornSummary solve_sinkhorn(const Context&, const Problem<T>&,              \
                                          const SinkhornOptions&, Potentials<T>*);        \
  template DivergenceSummary sinkhorn_divergence(const Context&, const Problem<T>&,       \
                                                 const SinkhornOptions&, Potentials<T>*); \
  template void barycentric_map(const Context&, const Problem<T>&, const Potentials<T>&,  \
                                Precision, MatrixView<T>);                                \
  template void to_shifted(const Context&, const Problem<T>&, const Potentials<T>&,       \
                           std::vector<T>*, std::vector<T>*);
KANTOR_INSTANTIATE(float)
KANTOR_INSTANTIATE(double)
#undef KANTOR_INSTANTIATE

}  // namespace kantor
