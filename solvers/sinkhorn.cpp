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
#include "epsilon_range.hpp"
#include "multiscale.hpp"
#include "relaxation.hpp"
#include "unbalanced.hpp"

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
    case TerminationType::kRoundingFloor:
      return "rounding floor";
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
    return fail("scaling must be in (0, 1), got " + format_number(scaling));
  if (!(initial_epsilon >= 0) || !std::isfinite(initial_epsilon))
    return fail("initial_epsilon must be >= 0 (0 = automatic), got " +
                format_number(initial_epsilon));
  if (!(tolerance >= 0) || !std::isfinite(tolerance))
    return fail("tolerance must be >= 0 (0 = default of the precision), got " +
                format_number(tolerance));
  if (max_iterations < 1)
    return fail("max_iterations must be >= 1, got " + std::to_string(max_iterations));
  if (check_every < 1) return fail("check_every must be >= 1, got " + std::to_string(check_every));
  if (coarse_blocks_x.empty() != coarse_blocks_y.empty())
    return fail("coarse_blocks_x and coarse_blocks_y must both be given or both be empty");
  for (const auto* v : {&coarse_blocks_x, &coarse_blocks_y})
    for (std::size_t i = 0; i < v->size(); ++i)
      if ((*v)[i] < 0)
        return fail(std::string(v == &coarse_blocks_x ? "coarse_blocks_x" : "coarse_blocks_y") +
                    "[" + std::to_string(i) + "] = " + std::to_string((*v)[i]) + " is negative");
  if (!(relaxation == 0 || (relaxation >= 1 && relaxation < 2)))
    return fail("relaxation must be 0 (automatic) or in [1, 2), got " + format_number(relaxation));
  for (const auto& cb : callbacks)
    if (!cb) return fail("callbacks must not hold an empty std::function");
  if (multiscale.cell_points < 2)
    return fail("multiscale.cell_points must be >= 2, got " +
                std::to_string(multiscale.cell_points));
  if (!(multiscale.slack > 0) || !std::isfinite(multiscale.slack))
    return fail("multiscale.slack must be > 0, got " + format_number(multiscale.slack));
  if (!(multiscale.theta_trial >= 0) || !std::isfinite(multiscale.theta_trial))
    return fail("multiscale.theta_trial must be >= 0, got " +
                format_number(multiscale.theta_trial));
  if (!(multiscale.max_density > 0 && multiscale.max_density <= 1))
    return fail("multiscale.max_density must be in (0, 1], got " +
                format_number(multiscale.max_density));
  if (!(multiscale.relaxation == 0 || (multiscale.relaxation >= 1 && multiscale.relaxation < 2)))
    return fail("multiscale.relaxation must be 0 (automatic) or in [1, 2), got " +
                format_number(multiscale.relaxation));
  if (multiscale.dense_pairs < 1)
    return fail("multiscale.dense_pairs must be >= 1, got " +
                std::to_string(multiscale.dense_pairs));
  return true;
}

std::string to_string(SolverKind s) {
  switch (s) {
    case SolverKind::kDense: return "dense";
    case SolverKind::kMultiscale: return "multiscale";
    case SolverKind::kAuto: return "auto";
  }
  return "?";
}

SolverKind parse_solver_kind(const std::string& s, const std::string& what) {
  if (s == "dense") return SolverKind::kDense;
  if (s == "multiscale") return SolverKind::kMultiscale;
  if (s == "auto") return SolverKind::kAuto;
  throw InvalidArgument(what + ": unknown solver '" + s + "' (expected dense, multiscale or auto)");
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

// Mantissa bits of the arithmetic that rounds the score terms: fp32 potentials and products;
// tf32 / bf16 round the coordinates entering the tensor-core dot products.
int mantissa_bits(Precision p) {
  switch (p) {
    case Precision::kFp64:
      return 52;
    case Precision::kFp32:
      return 23;
    case Precision::kTf32:
      return 10;
    case Precision::kBf16:
      return 7;
  }
  return 52;
}
/// ulp of v in a binary format with `bits` mantissa bits (v > 0).
double ulp_of(double v, int bits) {
  if (!(v > 0)) return 0;
  return std::ldexp(1.0, std::ilogb(v) - bits);
}
// Mantissa bits of the potentials' storage.
int potential_bits(Precision p) { return p == Precision::kFp64 ? 52 : 23; }

/// The smallest eps precision `p` resolves for data whose largest score term is `term` and whose
/// largest cost is `cmax`: below it the ulp of a cost term (in the precision the scores round to)
/// or of a potential (~cmax, in the storage precision) divided by eps is 1 or more, so no digit
/// of the plan can be right. docs/numerics.md, "Resolvable range".
double resolvable_epsilon(Precision p, double term, double cmax) {
  return std::max(ulp_of(term, mantissa_bits(p)), ulp_of(cmax, potential_bits(p)));
}

/// The least precise engine precision whose rounding floor (resolvable eps / eps) is ten times
/// below the tolerance, or "" when even fp64 cannot reach it at this eps.
std::string precision_that_resolves(double term, double cmax, double eps, double tol) {
  for (Precision p : {Precision::kBf16, Precision::kTf32, Precision::kFp32, Precision::kFp64})
    if (resolvable_epsilon(p, term, cmax) / eps <= 0.1 * tol) return to_string(p);
  return "";
}

// The largest automatic over-relaxation factor: past it the factor estimated from noisy residual
// ratios overshoots the optimum, where the relaxed iteration oscillates.
constexpr double kMaxRelaxation = 1.95;

/// The coarse correction of SinkhornOptions::coarse_blocks_x / _y (see there) on an oracle: the
/// block masses K_IJ of the plan of (f, g), the Bx x By Sinkhorn scaling (u, v) that gives them
/// the block marginals of a and b, and f += eps log u, g += eps log v per block.
template <class T>
class CoarseCorrection {
 public:
  CoarseCorrection(const Context& ctx, Oracle<T>& oracle, const std::vector<std::int32_t>& bx,
                   const std::vector<std::int32_t>& by)
      : ctx_(ctx), oracle_(oracle), bx_(bx), by_(by) {
    const std::int64_t n = oracle.n(), m = oracle.m();
    if (std::int64_t(bx.size()) != n || std::int64_t(by.size()) != m)
      throw InvalidArgument("SinkhornOptions: coarse_blocks_x has " + std::to_string(bx.size()) +
                            " entries and coarse_blocks_y " + std::to_string(by.size()) +
                            ", but the problem has n = " + std::to_string(n) +
                            ", m = " + std::to_string(m));
    nx_ = 1 + *std::max_element(bx.begin(), bx.end());
    ny_ = 1 + *std::max_element(by.begin(), by.end());
    const std::vector<T> a = to_host(ctx, VectorView<const T>{oracle.a(), n, ctx.memory_space()});
    const std::vector<T> b = to_host(ctx, VectorView<const T>{oracle.b(), m, ctx.memory_space()});
    ma_.assign(std::size_t(nx_), 0.0);
    mb_.assign(std::size_t(ny_), 0.0);
    for (std::int64_t i = 0; i < n; ++i) ma_[std::size_t(bx[std::size_t(i)])] += double(a[std::size_t(i)]);
    for (std::int64_t j = 0; j < m; ++j) mb_[std::size_t(by[std::size_t(j)])] += double(b[std::size_t(j)]);
    std::vector<T> onehot(std::size_t(m * ny_), T(0));
    for (std::int64_t j = 0; j < m; ++j) onehot[std::size_t(j * ny_ + by[std::size_t(j)])] = T(1);
    V_ = Buffer<T>(ctx, m * ny_);
    copy(ctx, VectorView<const T>{onehot.data(), m * ny_, MemorySpace::kHost}, V_.view());
    out_ = Buffer<T>(ctx, n * ny_);
    df_ = Buffer<T>(ctx, n);
    dg_ = Buffer<T>(ctx, m);
  }

  /// Applies one correction; false when the block masses were not usable (left unchanged).
  bool apply(double eps, T* f, T* g) {
    const std::int64_t n = oracle_.n(), m = oracle_.m();
    const MemorySpace sp = ctx_.memory_space();
    oracle_.apply_mat(T(eps), f, g, MatrixView<const T>{V_.data(), m, ny_, ny_, sp},
                      MatrixView<T>{out_.data(), n, ny_, ny_, sp});
    const std::vector<T> pv = to_host(ctx_, out_.cview());
    std::vector<double> K(std::size_t(nx_ * ny_), 0.0);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t J = 0; J < ny_; ++J)
        K[std::size_t(bx_[std::size_t(i)] * ny_ + J)] += double(pv[std::size_t(i * ny_ + J)]);
    for (double k : K)
      if (!std::isfinite(k)) return false;
    // Sinkhorn on the block masses (double, small): u = ma / (K v), v = mb / (K^T u).
    std::vector<double> u(std::size_t(nx_), 1.0), v(std::size_t(ny_), 1.0);
    for (int it = 0; it < 5000; ++it) {
      double err = 0;
      for (std::int64_t I = 0; I < nx_; ++I) {
        double s = 0;
        for (std::int64_t J = 0; J < ny_; ++J) s += K[std::size_t(I * ny_ + J)] * v[std::size_t(J)];
        u[std::size_t(I)] = s > 0 ? ma_[std::size_t(I)] / s : 1.0;
      }
      for (std::int64_t J = 0; J < ny_; ++J) {
        double s = 0;
        for (std::int64_t I = 0; I < nx_; ++I) s += K[std::size_t(I * ny_ + J)] * u[std::size_t(I)];
        const double vj = s > 0 ? mb_[std::size_t(J)] / s : 1.0;
        err += std::abs(vj - v[std::size_t(J)]) / std::max(vj, 1e-300) * mb_[std::size_t(J)];
        v[std::size_t(J)] = vj;
      }
      if (err < 1e-14) break;
    }
    // One common constant is free (u t, v / t): balance it so that the shifts stay small.
    double lu = 0, lv = 0;
    for (double x : u) lu += std::log(x);
    for (double x : v) lv += std::log(x);
    const double t = std::exp(0.5 * (lv / double(ny_) - lu / double(nx_)));
    std::vector<T> df(static_cast<std::size_t>(n)), dg(static_cast<std::size_t>(m));
    for (std::int64_t i = 0; i < n; ++i) {
      const double x = u[std::size_t(bx_[std::size_t(i)])] * t;
      if (!(x > 0) || !std::isfinite(x)) return false;
      df[std::size_t(i)] = T(eps * std::log(x));
    }
    for (std::int64_t j = 0; j < m; ++j) {
      const double x = v[std::size_t(by_[std::size_t(j)])] / t;
      if (!(x > 0) || !std::isfinite(x)) return false;
      dg[std::size_t(j)] = T(eps * std::log(x));
    }
    copy(ctx_, VectorView<const T>{df.data(), n, MemorySpace::kHost}, df_.view());
    copy(ctx_, VectorView<const T>{dg.data(), m, MemorySpace::kHost}, dg_.view());
    oracle_.ops().axpby(1.0, MatrixView<const T>{df_.data(), n, 1, 1, sp}, 1.0,
                        MatrixView<T>{f, n, 1, 1, sp});
    oracle_.ops().axpby(1.0, MatrixView<const T>{dg_.data(), m, 1, 1, sp}, 1.0,
                        MatrixView<T>{g, m, 1, 1, sp});
    return true;
  }

 private:
  const Context& ctx_;
  Oracle<T>& oracle_;
  const std::vector<std::int32_t>& bx_;
  const std::vector<std::int32_t>& by_;
  std::int64_t nx_ = 0, ny_ = 0;
  std::vector<double> ma_, mb_;
  Buffer<T> V_, out_, df_, dg_;
};

// The iteration loop on an existing oracle. `pot` receives the potentials (warm start when it
// holds vectors of sizes n and m). `self_problem`: the oracle's problem is a self-problem (y = x,
// b = a, same labels, symmetric table): from f = g (a cold start) the symmetric schedule's two
// sides are one computation, so only the f side runs and g copies it.
// residual_only: stop on the engine's residual alone, with no certificate and no plan values
// (multiscale::solve_coarsest: potentials that only warm-start a finer level).
template <class T>
SinkhornSummary run_sinkhorn(const Context& ctx, Oracle<T>& oracle, double epsilon,
                             const SinkhornOptions& options, Potentials<T>* pot,
                             Clock::time_point t_start, bool self_problem = false,
                             bool residual_only = false) {
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
  set_unbalanced_facts(oracle, &s);
  if (s.unbalanced() && !options.coarse_blocks_x.empty())
    throw InvalidArgument(
        "SinkhornOptions.coarse_blocks_x / _y: the coarse correction is a balanced-OT step (it "
        "maximizes the balanced dual over block shifts); leave it off for unbalanced problems");
  s.tolerance = options.tolerance > 0 ? options.tolerance : default_tolerance(s.precision);

  const bool warm = pot->f.size() == s.n && pot->g.size() == s.m;
  // One side per symmetric step (a self-problem from f = g = 0): half the passes, the same
  // iterates; the step's residual (rows + columns of the pair before it) is twice the rows'.
  // (Not with a coarse correction: it shifts f and g apart.)
  const bool one_side = self_problem && !warm && options.schedule == Schedule::kSymmetric &&
                        options.coarse_blocks_x.empty() && options.coarse_blocks_y.empty();
  if (!warm) {
    pot->f = Buffer<T>(ctx, s.n);
    pot->g = Buffer<T>(ctx, s.m);
    detail::fill_bytes(ctx, pot->f.data(), pot->f.space(), 0, sizeof(T) * std::size_t(s.n));
    detail::fill_bytes(ctx, pot->g.data(), pot->g.space(), 0, sizeof(T) * std::size_t(s.m));
  } else if (pot->f.space() != ctx.memory_space() || pot->g.space() != ctx.memory_space()) {
    throw InvalidArgument("warm-start potentials are in " + to_string(pot->f.space()) +
                          " memory but the context works in " + to_string(ctx.memory_space()));
  }
  s.resolvable_epsilon = detail::check_epsilon_range(oracle, epsilon);
  // Annealing starts at c*D^2 unless told otherwise; a warm start resumes at the target.
  double eps = epsilon;
  if (options.anneal && !warm) {
    const double eps0 = options.initial_epsilon > 0 ? options.initial_epsilon : oracle.max_cost();
    eps = std::max(eps0, epsilon);
  }
  s.initial_epsilon = eps;

  Buffer<double> scalars(ctx, 4);
  {
    // Zeroed: a check reads three slots, and slot 1 is written only by relaxed steps.
    const double zeros[4] = {0, 0, 0, 0};
    copy(ctx, VectorView<const double>{zeros, 4, MemorySpace::kHost}, scalars.view());
  }
  // Over-relaxation (SinkhornOptions::relaxation): the old potentials of a relaxed step.
  const bool auto_relax = options.relaxation == 0 && options.schedule == Schedule::kAlternating;
  double omega = options.schedule == Schedule::kAlternating && options.relaxation > 1
                     ? options.relaxation
                     : 1.0;
  s.relaxation = omega;
  const bool relaxing = auto_relax || omega != 1.0;
  Buffer<T> best_f, best_g;  // the potentials of the best check
  if (relaxing) {
    best_f = Buffer<T>(ctx, s.n);
    best_g = Buffer<T>(ctx, s.m);
  }
  std::unique_ptr<CoarseCorrection<T>> coarse;
  if (!options.coarse_blocks_x.empty())
    coarse = std::make_unique<CoarseCorrection<T>>(ctx, oracle, options.coarse_blocks_x,
                                                   options.coarse_blocks_y);
  bool relaxed_step = false, have_best = false;
  double prev_residual = 0, prev_ratio = 0, relax_cap = kMaxRelaxation;
  double best_residual = std::numeric_limits<double>::infinity();
  T* f = pot->f.data();
  T* g = pot->g.data();
  const auto t_iter = Clock::now();
  s.seconds_setup = std::chrono::duration<double>(t_iter - t_start).count();

  std::int64_t at_target = 0;  // iterations done at the target eps
  double last_eps = eps;       // eps of the last iteration run: the potentials' eps
  bool first = true;
  // Certificates: once the engine's residual meets the tolerance at the target eps, the plan is
  // certified on the caller's coordinates (oracle.certify); if that fails, every later check is
  // certified too ("honest") until one passes, the budget is spent, or the certificate stops
  // improving while the residual stays met (the rounding floor).
  bool honest = false;
  Certificate cert;                  // of the potentials at the last certified check
  std::int64_t cert_iteration = -1;  // iteration count of `cert`
  double best_cert = std::numeric_limits<double>::infinity();
  int stalled_checks = 0;
  double last_residual = 0;  // the engine's residual at the last check
  constexpr int kStallChecks = 10;
  const double cmax = oracle.max_cost();
  s.termination = TerminationType::kMaxIterations;
  while (s.iterations < options.max_iterations) {
    // Cancellation (ContextOptions::cancel, e.g. Ctrl-C): polled every iteration on the host (and
    // between row blocks inside the CPU passes); the potentials of a cancelled pass are partial.
    if (ctx.cancel_requested()) {
      s.termination = TerminationType::kUserAbort;
      s.message = "cancelled at iteration " + std::to_string(s.iterations);
      s.epsilon_reached = last_eps;
      s.seconds_iterations = seconds_since(t_iter);
      s.seconds_total = seconds_since(t_start);
      return s;
    }
    const bool annealing = eps > epsilon;
    // Checks run every check_every iterations during annealing too (NaN detection, callbacks such
    // as a Ctrl-C abort), but only a check at the target eps can declare convergence.
    const bool check = annealing ? (s.iterations + 1) % options.check_every == 0
                                 : (at_target + 1) % options.check_every == 0;
    double* err = check ? scalars.data() : nullptr;
    const double eps_now = eps;
    last_eps = eps_now;
    const T e = T(eps);
    // One alternating iteration; `checked`: its residuals go to scalars.
    auto alternating = [&](bool checked) {
      if (!annealing && relaxing) {
        // Over-relaxed half steps: h <- (1 - w) h_old + w T(h'). The residual of a check is the
        // row error of the pair before the f step plus the column error after it (both vanish
        // at the fixed point; plain steps elsewhere measure the second only, their rows being
        // exact), for w = 1 steps too, so that the controller compares like with like.
        // (Oracle::relaxed_update: the blend inside the update's own pass.)
        oracle.relaxed_update(0, e, T(omega), g, f, checked ? scalars.data() + 1 : nullptr);
        oracle.relaxed_update(1, e, T(omega), f, g, checked ? scalars.data() : nullptr);
        relaxed_step = true;
      } else {
        oracle.update_f(e, g, f, nullptr);
        // The column error of the plan after the f-update.
        oracle.update_g(e, f, g, checked ? scalars.data() : nullptr);
        relaxed_step = false;
      }
    };
    // The unchecked iterations at the target eps before the next check are the same work with
    // the same arguments: the engine replays one (Oracle::repeat: on the CUDA engine one graph
    // launch instead of the iteration's 4 to 8; measured 1.7% at 2,048 points, where the chain
    // of dependent kernels on the GPU, not the launches, sets an iteration's time).
    // At most kRecordedRun at a time, cancellation polled between (a cancelled CPU pass returns
    // early: the rest of a run is quick). The step itself reads no host state (a recorded step
    // would keep what it read when recorded).
    if (options.schedule == Schedule::kAlternating && !annealing && !check) {
      constexpr std::int64_t kRecordedRun = 32;
      const std::int64_t ahead =
          std::min({options.check_every - 1 - at_target % options.check_every,
                    options.max_iterations - s.iterations, kRecordedRun});
      // The key: everything the recorded iteration's arguments depend on (a solver object keeps
      // its oracle from solve to solve, the potentials' buffers may move).
      const std::uint64_t key =
          detail::step_key({double(e), omega, relaxing ? 1.0 : 0.0}, {f, g});
      oracle.repeat(ahead, key, [&] { alternating(false); });
      relaxed_step = relaxing;
      first = false;
      s.iterations += ahead;
      at_target += ahead;
      continue;
    }
    if (options.schedule == Schedule::kAlternating) {
      alternating(check);
    } else if (one_side) {
      // The symmetric step on a self-problem with f = g: f <- T(g) (its row error is the
      // residual's half), averaged with the old f (= g) after the first step, then g <- f.
      VectorOps<T>& ops = oracle.ops();
      const MatrixView<T> fv{f, s.n, 1, 1, ctx.memory_space()};
      const MatrixView<T> gv{g, s.m, 1, 1, ctx.memory_space()};
      oracle.update_f(e, g, f, err);
      if (!first) ops.axpby(0.5, gv, 0.5, fv);
      ops.axpby(1.0, fv, 0.0, gv);
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
    // scalars: [0] the residual (columns), [1] its row part on relaxed steps, [2] the dual cost.
    oracle.dual_value(f, g, scalars.data() + 2);
    const std::vector<double> head3 =
        to_host(ctx, VectorView<const double>{scalars.data(), 3, scalars.space()});
    const double merr = relaxed_step ? head3[0] + head3[1] : (one_side ? 2 * head3[0] : head3[0]);
    last_residual = merr;
    // Over-relaxation control (SinkhornOptions::relaxation) at the target eps. The relaxed
    // iteration is only locally convergent: far from the fixed point it can oscillate and blow
    // up (seen: Fashion-MNIST OTDD, residual 0.16 -> inf in 60 iterations at w = 1.86). So the
    // potentials of the best check so far are kept, and a check that is not finite or more than
    // ten times the best restores them, halves the factor's excess over 1 for the rest of the solve
    // and measures the plain rate again.
    if (relaxing && !annealing) {
      const MatrixView<T> fv{f, s.n, 1, 1, ctx.memory_space()};
      const MatrixView<T> gv{g, s.m, 1, 1, ctx.memory_space()};
      const MatrixView<T> fb{best_f.data(), s.n, 1, 1, ctx.memory_space()};
      const MatrixView<T> gb{best_g.data(), s.m, 1, 1, ctx.memory_space()};
      if (omega > 1.0 && have_best && (!std::isfinite(merr) || merr > 10 * best_residual)) {
        oracle.ops().axpby(1.0, fb, 0.0, fv);
        oracle.ops().axpby(1.0, gb, 0.0, gv);
        relax_cap = 1.0 + 0.5 * (omega - 1.0);
        omega = 1.0;
        ++s.relaxation_resets;
        prev_residual = prev_ratio = 0;
        s.relaxation = omega;
        continue;  // the restored pair is checked again after the next plain steps
      }
      if (std::isfinite(merr) && merr < best_residual) {
        best_residual = merr;
        have_best = true;
        oracle.ops().axpby(1.0, fv, 0.0, fb);
        oracle.ops().axpby(1.0, gv, 0.0, gb);
      }
      const double ratio =
          prev_residual > 0 && std::isfinite(merr) ? merr / prev_residual : 0.0;
      if (auto_relax && std::isfinite(merr) && ratio > 0 && ratio < 1) {
        const double lam = std::pow(ratio, 1.0 / double(options.check_every));
        if (omega == 1.0) {
          // Engage once the plain iteration converges linearly: two consecutive check ratios
          // within 10% of each other.
          if (prev_ratio > 0 && std::abs(ratio - prev_ratio) <= 0.1 * prev_ratio) {
            const double w = detail::sor_optimal_factor(lam, 1.0);
            if (w >= 1.05) omega = std::min(relax_cap, w);
          }
        } else if (prev_ratio > 0 && prev_ratio < 1 && lam > 1.05 * (omega - 1.0)) {
          // Two decreasing checks in a row, slower than w - 1: w is below the optimum (the plain
          // rate from the SOR relation, solvers/relaxation.hpp).
          omega = std::max(omega, std::min(relax_cap, detail::sor_optimal_factor(lam, omega)));
        }
      }
      prev_ratio = ratio;
      prev_residual = std::isfinite(merr) ? merr : 0.0;
      s.relaxation = omega;
    }
    IterationRecord rec{s.iterations, eps_now, merr, std::numeric_limits<double>::quiet_NaN(),
                        seconds_since(t_start), head3[2]};
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
    // Coarse correction (SinkhornOptions::coarse_blocks_x / _y) while above the tolerance; the
    // residual of the corrected pair is measured at the next check.
    if (coarse && !annealing && std::isfinite(merr) && merr > s.tolerance) {
      if (coarse->apply(eps_now, f, g)) ++s.coarse_corrections;
      continue;
    }
    if (residual_only && !annealing && merr <= s.tolerance) {
      s.termination = TerminationType::kConverged;
      std::ostringstream os;
      os << "engine residual " << std::setprecision(3) << merr << " <= tolerance " << s.tolerance
         << " (not certified: a warm start)";
      s.message = os.str();
      break;
    }
    if (!residual_only && !annealing && (merr <= s.tolerance || honest)) {
      cert = oracle.certify(eps_now, f, g);
      cert_iteration = s.iterations;
      ++s.certificates;
      if (options.record_iterations) s.records.back().certified_error = cert.bound;
      if (!std::isfinite(cert.bound)) {
        s.termination = TerminationType::kNumericalFailure;
        s.message = "the certificate is not finite at iteration " + std::to_string(s.iterations) +
                    " (the plan of the potentials overflows float64)";
        break;
      }
      if (cert.bound <= s.tolerance) {
        s.termination = TerminationType::kConverged;
        std::ostringstream os;
        os << "certified marginal error " << std::setprecision(3) << cert.bound
           << " <= tolerance " << s.tolerance << " (residual " << merr << ")";
        s.message = os.str();
        break;
      }
      honest = true;
      if (merr <= s.tolerance && cert.bound >= best_cert) {
        if (++stalled_checks >= kStallChecks) {
          s.termination = TerminationType::kRoundingFloor;
          break;
        }
      } else {
        stalled_checks = 0;
      }
      best_cert = std::min(best_cert, cert.bound);
    }
  }
  const std::string resolves =
      precision_that_resolves(oracle.max_score_term(), cmax, epsilon, s.tolerance);
  auto floor_note = [&](double residual) {
    std::ostringstream os;
    os << std::setprecision(3) << "the engine's " << to_string(s.precision)
       << " iteration met the tolerance (residual " << residual
       << ") but the certified marginal error on the caller's coordinates is " << cert.bound
       << " > " << s.tolerance << ": the rounding floor of " << to_string(s.precision)
       << " at eps = " << epsilon << "; "
       << (resolves.empty() || resolves == to_string(s.precision)
               ? std::string("no precision resolves this tolerance at this eps (raise eps or "
                             "the tolerance)")
               : resolves + " would resolve it");
    return os.str();
  };
  if (s.termination == TerminationType::kRoundingFloor) {
    s.message = "not converged: " + floor_note(last_residual);
  } else if (s.termination == TerminationType::kMaxIterations) {
    std::ostringstream os;
    os << "iteration budget of " << options.max_iterations << " spent before the tolerance "
       << s.tolerance << " was met";
    if (honest) os << "; " << floor_note(last_residual);
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
  // No plan values and no certificate when residual_only (cert stays NaN).
  std::vector<double> st(3, std::numeric_limits<double>::quiet_NaN());
  if (!residual_only) {
    Buffer<double> stats(ctx, 3);
    oracle.plan_statistics(e, f, g, stats.data());
    st = to_host(ctx, stats.cview());
  }
  // The certificate of the returned potentials (already evaluated when the last check did it).
  if (!residual_only && cert_iteration != s.iterations) {
    cert = oracle.certify(last_eps, f, g);
    ++s.certificates;
  }
  s.marginal_error = cert.bound;
  s.marginal_error_slack = cert.slack;
  // A budget spent far from the tolerance where the precision's rounding floor (resolvable eps /
  // eps) is not well below it: say so, and name a precision that would do.
  if (s.termination == TerminationType::kMaxIterations && !honest && last_eps == epsilon &&
      cert.bound > s.tolerance && s.resolvable_epsilon / epsilon > 0.1 * s.tolerance) {
    std::ostringstream os;
    os << std::setprecision(3) << "; the certified marginal error is " << cert.bound
       << " and the rounding floor of " << to_string(s.precision) << " at eps = " << epsilon
       << " is about " << s.resolvable_epsilon / epsilon << "; "
       << (resolves.empty() || resolves == to_string(s.precision)
               ? std::string("no precision resolves this tolerance at this eps")
               : resolves + " would resolve it");
    s.message += os.str();
  }
  s.residual = head[0];
  s.epsilon_reached = last_eps;
  s.dual_cost = head[1];
  s.plan_mass = st[0];
  s.primal_cost = st[1];
  // eps KL(P | a b) = sum P (f + g - C) - eps (sum P - 1), so the regularized cost is
  // <P,C> + eps KL = sum P (f + g) - eps (sum P - 1).
  s.regularized_cost = st[2] - last_eps * (st[0] - 1.0);
  s.dual_gap = s.regularized_cost - s.dual_cost;
  // docs/numerics.md section 9: with masses m_a, m_b the generalized KL(P | a b) adds
  // eps (m_a m_b - sum P); the dual adds the same mass term to its potential part (dual_value:
  // <a, rho (1 - exp(-f / rho))> per relaxed side); the primal adds rho KL(P 1 | a) and
  // rho KL(P^T 1 | b) of the returned plan for each relaxed side.
  if (s.unbalanced() && !residual_only)
    set_unbalanced_values(ctx, oracle, last_eps, f, g, head[1], st[0], st[2], &s);
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
        IterationRecord{s.iterations, last_eps, s.residual, cert.bound, seconds_since(t_start)});
  if (residual_only) {
    if (s.termination != TerminationType::kNumericalFailure &&
        !(std::isfinite(s.residual) && std::isfinite(s.dual_cost))) {
      s.termination = TerminationType::kNumericalFailure;
      s.message = "non-finite residual or dual cost at the end of the solve";
    }
  } else if (s.termination != TerminationType::kNumericalFailure &&
             !(std::isfinite(s.marginal_error) && std::isfinite(s.dual_cost) &&
               std::isfinite(s.primal_cost))) {
    s.termination = TerminationType::kNumericalFailure;
    s.message = std::string("could not compute ") +
                (!std::isfinite(s.marginal_error) ? "the certificate (marginal error)"
                 : !std::isfinite(s.dual_cost)    ? "the dual cost"
                                                  : "the primal cost") +
                " of the returned potentials: non-finite values at the end of the solve";
  }
  // Guard: a converged solve whose final certificate (at another eps only if annealing was cut
  // short, which cannot converge) exceeds the tolerance would be a lie; never report it.
  if (!residual_only && s.termination == TerminationType::kConverged &&
      !(s.marginal_error <= s.tolerance)) {
    s.termination = TerminationType::kMaxIterations;
    s.message += "; but the final certificate exceeds the tolerance";
  }
  s.seconds_costs = seconds_since(t_costs);
  s.seconds_total = seconds_since(t_start);
  return s;
}

// True unless the cost's label table is not symmetric (host data; a device table is taken as not
// symmetric). With W != W^T the problem OT(A, A) has C_ij != C_ji: not a self-problem, and the
// symmetric schedule from f = g converges very slowly on it (measured: 50,000 iterations not
// enough for 1e-10 on 29 points).
template <class T>
bool symmetric_cost(const Problem<T>& problem) {
  const LabelAugmented<T>* l = problem.labels();
  if (!l) return true;
  if (l->table.space != MemorySpace::kHost) return false;
  for (std::int64_t r = 0; r < l->table.rows; ++r)
    for (std::int64_t k = 0; k < r; ++k)
      if (!(l->table(r, k) == l->table(k, r))) return false;
  return true;
}

// True when y = x, b = a and (label-augmented) the labels agree and the table is symmetric,
// element by element (host data; device data compares pointers).
template <class T>
bool is_self_problem(const Problem<T>& problem) {
  const SqEuclidean<T>& p = problem.features();
  if (!symmetric_cost(problem)) return false;
  if (!(problem.rho_a == problem.rho_b)) return false;
  if (const LabelAugmented<T>* l = problem.labels()) {
    const VectorView<const std::int32_t>&lx = l->labels_x, &ly = l->labels_y;
    if (lx.size != ly.size) return false;
    if (lx.space != MemorySpace::kHost || ly.space != MemorySpace::kHost) {
      if (lx.data != ly.data) return false;
    } else {
      for (std::int64_t i = 0; i < lx.size; ++i)
        if (lx[i] != ly[i]) return false;
    }
  }
  if (p.x.rows != p.y.rows || p.x.cols != p.y.cols) return false;
  if (p.x.space != MemorySpace::kHost || p.y.space != MemorySpace::kHost)
    return same_view(p.x, p.y) && problem.a.data == problem.b.data;
  for (std::int64_t i = 0; i < p.x.rows; ++i)
    for (std::int64_t k = 0; k < p.x.cols; ++k)
      if (!(p.x(i, k) == p.y(i, k))) return false;
  const VectorView<const T>&a = problem.a, &b = problem.b;
  if ((a.data == nullptr) != (b.data == nullptr)) return false;
  if (a.data == nullptr) return true;
  if (a.space != MemorySpace::kHost || b.space != MemorySpace::kHost) return a.data == b.data;
  for (std::int64_t i = 0; i < a.size; ++i)
    if (!(a[i] == b[i])) return false;
  return true;
}

// The dense solve of `problem` on its oracle: a self-problem (y = x, b = a) runs the symmetric
// schedule from f = g, as the divergence's self-terms do (under alternating updates f_i - g_i
// decays very slowly, docs/numerics.md).
template <class T>
SinkhornSummary run_dense(const Context& ctx, Oracle<T>& oracle, const Problem<T>& problem,
                          const SinkhornOptions& options, Potentials<T>* pot,
                          Clock::time_point t0, bool residual_only = false) {
  SinkhornOptions run = options;
  const bool self_problem = options.symmetric_self_problems && is_self_problem(problem);
  if (self_problem) run.schedule = Schedule::kSymmetric;
  return run_sinkhorn(ctx, oracle, problem.epsilon, run, pot, t0, self_problem, residual_only);
}

// Whether `options` send this solve to the multiscale solver; *why says so for the Summary.
template <class T>
bool use_multiscale(const Problem<T>& problem, const SinkhornOptions& options,
                    const Potentials<T>* pot, std::string* why) {
  const bool warm = pot && pot->f.size() == problem.features().x.rows &&
                    pot->g.size() == problem.features().y.rows;
  if (options.solver == SolverKind::kDense) return false;
  if (options.solver == SolverKind::kMultiscale) return true;
  if (is_self_problem(problem)) {
    *why = "auto: dense (a self-problem: the symmetric schedule)";
    return false;
  }
  return multiscale::auto_picks_multiscale(problem, options, warm, why);
}

void check_options(const SinkhornOptions& options) {
  std::string why;
  if (!options.is_valid(&why)) throw InvalidArgument("SinkhornOptions: " + why);
}

}  // namespace

template <class T>
SinkhornSolver<T>::SinkhornSolver(const Context& ctx, const Problem<T>& problem,
                                  std::optional<Precision> precision)
    : ctx_(&ctx),
      problem_(problem),
      precision_(precision.value_or(natural_precision<T>())),
      oracle_(make_oracle(ctx, problem, precision_)) {}
template <class T>
SinkhornSolver<T>::~SinkhornSolver() = default;
template <class T>
SinkhornSolver<T>::SinkhornSolver(SinkhornSolver&&) noexcept = default;
template <class T>
SinkhornSolver<T>& SinkhornSolver<T>::operator=(SinkhornSolver&&) noexcept = default;

namespace {
void check_precision(const SinkhornOptions& options, Precision solver) {
  if (options.precision && *options.precision != solver)
    throw InvalidArgument("SinkhornOptions: precision " + to_string(*options.precision) +
                          " differs from the solver's " + to_string(solver) +
                          " (its data is prepared for one precision)");
}
}  // namespace

template <class T>
SinkhornSummary SinkhornSolver<T>::solve(const SinkhornOptions& options, Potentials<T>* pot) {
  return solve_from(options, pot, Clock::now());
}

template <class T>
SinkhornSummary SinkhornSolver<T>::solve_from(const SinkhornOptions& options, Potentials<T>* pot,
                                              Clock::time_point t0) {
  check_options(options);
  check_precision(options, precision_);
  Potentials<T> local;
  std::string why;
  if (use_multiscale(problem_, options, pot, &why)) {
    SinkhornSummary s = multiscale::solve(*ctx_, problem_, options, precision_, pot ? pot : &local, t0);
    if (!why.empty()) s.solver_note = why + "; " + s.solver_note;
    return s;
  }
  SinkhornSummary s = run_dense(*ctx_, *oracle_, problem_, options, pot ? pot : &local, t0);
  s.solver_note = why;
  return s;
}

template <class T>
DivergenceSummary SinkhornSolver<T>::divergence(const SinkhornOptions& options,
                                                Potentials<T>* potentials) {
  return divergence_from(options, potentials, Clock::now());
}

template <class T>
DivergenceSummary SinkhornSolver<T>::solve_divergence(const SinkhornOptions& options,
                                                      DivergencePotentials<T>* potentials) {
  if (!potentials) return divergence_from(options, nullptr, Clock::now());
  return divergence_from(options, &potentials->xy, Clock::now(), &potentials->xx,
                         &potentials->yy);
}

template <class T>
Oracle<T>& SinkhornSolver<T>::self_oracle(int side) {
  std::unique_ptr<Oracle<T>>& o = self_oracles_[side];
  if (!o) {
    // The self-terms: the same cost with one side's features (and labels, over the same table),
    // certified on that side's own reference points.
    Problem<T> p = problem_;
    if (side == 0) {
      p.features().y = problem_.features().x;
      p.b = problem_.a;
      p.reference_y = problem_.reference_x;
    } else {
      p.features().x = problem_.features().y;
      p.a = problem_.b;
      p.reference_x = problem_.reference_y;
    }
    if (const LabelAugmented<T>* l = problem_.labels()) {
      if (side == 0)
        std::get<LabelAugmented<T>>(p.cost).labels_y = l->labels_x;
      else
        std::get<LabelAugmented<T>>(p.cost).labels_x = l->labels_y;
    }
    o = make_oracle(*ctx_, p, precision_);
  }
  return *o;
}

template <class T>
DivergenceSummary SinkhornSolver<T>::divergence_from(const SinkhornOptions& options,
                                                     Potentials<T>* potentials,
                                                     Clock::time_point t0, Potentials<T>* pxx_out,
                                                     Potentials<T>* pyy_out) {
  check_options(options);
  check_precision(options, precision_);

  const Context& ctx = *ctx_;
  const Problem<T>& problem = problem_;
  Oracle<T>* oracle_xy = oracle_.get();
  if (!(problem.rho_a == problem.rho_b))
    throw InvalidArgument(
        "divergence: the debiased divergence of an unbalanced problem needs one marginal "
        "penalty for both sides (problem.rho_a = " + format_number(problem.rho_a) +
        ", rho_b = " + format_number(problem.rho_b) +
        "): its self-terms OT(a, a) and OT(b, b) are symmetric problems");
  // One eps schedule for the three problems: the one of (x, y).
  SinkhornOptions shared = options;
  if (shared.initial_epsilon == 0) shared.initial_epsilon = oracle_xy->max_cost();
  // The self-problems OT(a, a) and OT(b, b) run the symmetric schedule from f = g (GeomLoss's
  // h <- (h + T(h)) / 2, which keeps f = g bitwise). Alternating updates converge very slowly
  // on a self-problem: an isolated point is transported onto itself at zero cost, so only
  // f_i + g_i is pinned and the mode f_i - g_i decays at a rate set by its tiny coupling to the
  // other points (measured: marginal error still 1e-5 after 10^4 iterations, 25 Gaussian
  // points, eps = 0.1). When x = y and a = b the (x, y) problem is a self-problem too and is
  // solved by the same code path, so that S(a, a) = 0 exactly.
  SinkhornOptions self = shared;
  // The coarse blocks partition x and y of the (x, y) problem; the self-problems keep f = g
  // (a correction would shift the two sides apart) and converge fast without one.
  self.coarse_blocks_x.clear();
  self.coarse_blocks_y.clear();
  const bool symmetric_selves = options.symmetric_self_problems && symmetric_cost(problem);
  if (symmetric_selves) self.schedule = Schedule::kSymmetric;
  DivergenceSummary out;
  Potentials<T> local;
  const bool xy_self = is_self_problem(problem);
  out.xy = run_sinkhorn(ctx, *oracle_xy, problem.epsilon, xy_self ? self : shared,
                        potentials ? potentials : &local, t0,
                        xy_self && options.symmetric_self_problems);
  const double cmax = oracle_xy->max_cost();
  if (ctx.cancel_requested()) {
    out.xx.termination = out.yy.termination = TerminationType::kUserAbort;
    out.xx.message = out.yy.message = "cancelled before this problem started";
    return out;
  }
  {
    Potentials<T> p;
    out.xx = run_sinkhorn(ctx, self_oracle(0), problem.epsilon, self, pxx_out ? pxx_out : &p,
                          Clock::now(), symmetric_selves);
  }
  {
    Potentials<T> p;
    out.yy = run_sinkhorn(ctx, self_oracle(1), problem.epsilon, self, pyy_out ? pyy_out : &p,
                          Clock::now(), symmetric_selves);
  }
  out.divergence_raw = out.xy.dual_cost - 0.5 * out.xx.dual_cost - 0.5 * out.yy.dual_cost;
  // Unbalanced (Sejourne et al. 2019, docs/numerics.md section 9): + eps/2 (m_a - m_b)^2, the
  // mass term that makes S(a, a) = 0 and S >= 0 (0 for a balanced problem: m_a = m_b = 1).
  if (out.xy.unbalanced()) {
    const double dm = out.xy.mass_a - out.xy.mass_b;
    out.divergence_raw += 0.5 * problem.epsilon * dm * dm;
  }
  // Error bound of the raw value: each dual cost is off from its OT_eps by at most about its
  // certified marginal error times the cost range (the dual's gradient in the potentials is the
  // marginal violation, and the potentials oscillate by at most c*D^2), plus the rounding of the
  // potentials' storage (two ulp of c*D^2). S >= 0 exactly, so a raw value in [-bound, 0) is
  // rounding and is clamped to 0 (fp32 on x against a permutation of x gave -5.8e-7).
  const double ulp2 = 2 * ulp_of(cmax, potential_bits(out.xy.precision));
  auto term = [&](const SinkhornSummary& t) { return t.marginal_error * cmax + ulp2; };
  out.divergence_bound = term(out.xy) + 0.5 * term(out.xx) + 0.5 * term(out.yy);
  out.divergence = out.divergence_raw;
  if (out.divergence_raw < 0 && out.divergence_raw >= -out.divergence_bound) out.divergence = 0;
  return out;
}

template <class T>
void SinkhornSolver<T>::barycentric_map(const Potentials<T>& potentials, MatrixView<T> out) {
  Oracle<T>& oracle = *oracle_;
  if (potentials.f.size() != oracle.n() || potentials.g.size() != oracle.m())
    throw InvalidArgument("barycentric_map: potentials have sizes " +
                          std::to_string(potentials.f.size()) + ", " +
                          std::to_string(potentials.g.size()) + " but the problem has n = " +
                          std::to_string(oracle.n()) + ", m = " + std::to_string(oracle.m()));
  if (out.rows != oracle.n() || out.cols != oracle.dim() || out.space != MemorySpace::kHost)
    throw InvalidArgument("barycentric_map: out must be a host n x d matrix");
  // The plan is that of the potentials' own eps (after a solve cut short while annealing it is
  // not problem.epsilon).
  const double eps = potentials.epsilon > 0 ? potentials.epsilon : problem_.epsilon;
  const std::int64_t n = oracle.n(), d = oracle.dim();
  Buffer<T> buf(*ctx_, n * d);
  oracle.barycentric_map(T(eps), potentials.f.data(), potentials.g.data(),
                         MatrixView<T>{buf.data(), n, d, d, buf.space()});
  const std::vector<T> host = to_host(*ctx_, buf.cview());
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t k = 0; k < d; ++k) out(i, k) = host[std::size_t(i * d + k)];
}

template <class T>
SinkhornSummary solve_sinkhorn(const Context& ctx, const Problem<T>& problem,
                               const SinkhornOptions& options, Potentials<T>* potentials) {
  const auto t0 = Clock::now();
  check_options(options);
  std::string why;
  if (use_multiscale(problem, options, potentials, &why)) {
    // The multiscale solver prepares its own (sorted) problems: no dense oracle here.
    Potentials<T> local;
    SinkhornSummary s = multiscale::solve(ctx, problem, options,
                                          options.precision.value_or(natural_precision<T>()),
                                          potentials ? potentials : &local, t0);
    if (!why.empty()) s.solver_note = why + "; " + s.solver_note;
    return s;
  }
  SinkhornSolver<T> solver(ctx, problem, options.precision);
  return solver.solve_from(options, potentials, t0);
}

namespace detail {

template <class T>
double check_epsilon_range(const Oracle<T>& oracle, double epsilon) {
  const Precision precision = oracle.precision();
  // Guard: a largest cost (c*D^2 [+ c_w max W]) that overflows T makes every score inf/NaN and
  // the annealing schedule infinite; refuse it before iterating.
  const double cmax = oracle.max_cost();
  if (!std::isfinite(cmax) || cmax > double(std::numeric_limits<T>::max()) / 4) {
    std::ostringstream os;
    os << "problem: the largest cost c*D^2 = " << cmax
       << " (D the diagonal of the clouds' bounding box, plus the largest label term) "
       << "overflows " << to_string(precision)
       << " arithmetic; rescale the clouds or the cost scale";
    throw InvalidArgument(os.str());
  }
  // Guard: eps must survive the conversion to T, and the scores (up to c*D^2/eps) must stay
  // finite in T; otherwise every update divides by 0 or overflows.
  const double lowest = double(std::numeric_limits<T>::min());
  if (!(double(T(epsilon)) >= lowest) ||
      !(cmax / epsilon < double(std::numeric_limits<T>::max()) / 4)) {
    std::ostringstream os;
    os << "problem.epsilon = " << epsilon << " is out of range for " << to_string(precision)
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
  const double log_w = 1.0 + std::log(double(std::max(oracle.n(), oracle.m())));
  const double eps_max = 1e-3 * cmax / (u * log_w);
  if (cmax > 0 && epsilon > eps_max) {
    std::ostringstream os;
    os << "problem.epsilon = " << epsilon << " is too large for " << to_string(precision)
       << " arithmetic: with a largest cost c*D^2 = " << cmax
       << " the cost would be lost in rounding (need eps <= " << eps_max
       << "; use fp64 or a smaller eps)";
    throw InvalidArgument(os.str());
  }
  // Guard: below the resolvable eps the rounding of a score term or of a potential, divided
  // by eps, is 1 or more: no digit of the plan can be right (seen: fp64 at eps = 1e-17 on unit
  // costs "converged" with plan mass 2). Refuse it, naming the bound and what would resolve it.
  const double resolvable = resolvable_epsilon(precision, oracle.max_score_term(), cmax);
  if (epsilon < resolvable) {
    std::ostringstream os;
    os << "problem.epsilon = " << epsilon << " is below the smallest eps "
       << to_string(precision) << " can resolve for this data, " << resolvable
       << " (the ulp of the largest score term c|x|^2 = " << oracle.max_score_term()
       << " or of a potential ~ c*D^2 = " << cmax << "): no digit of the plan could be right";
    // The least precise precision, finer than this one, that resolves this eps.
    const Precision order[] = {Precision::kBf16, Precision::kTf32, Precision::kFp32,
                               Precision::kFp64};
    bool finer = false, named = false;
    for (Precision q : order) {
      if (q == precision) {
        finer = true;
        continue;
      }
      const double rq = resolvable_epsilon(q, oracle.max_score_term(), cmax);
      if (finer && epsilon >= rq) {
        os << "; use " << to_string(q) << " (resolves eps >= " << rq << ")";
        named = true;
        break;
      }
    }
    if (!named) os << "; use a larger eps or rescale the problem";
    throw InvalidArgument(os.str());
  }
  return resolvable;
}

template double check_epsilon_range(const Oracle<float>&, double);
template double check_epsilon_range(const Oracle<double>&, double);

}  // namespace detail

namespace multiscale {

template <class T>
SinkhornSummary solve_coarsest(const Context& ctx, const Problem<T>& problem,
                               const SinkhornOptions& options, Potentials<T>* pot) {
  const auto t0 = Clock::now();
  check_options(options);
  const std::unique_ptr<Oracle<T>> oracle =
      make_oracle(ctx, problem, options.precision.value_or(natural_precision<T>()));
  return run_dense(ctx, *oracle, problem, options, pot, t0, !problem.unbalanced());
}

template SinkhornSummary solve_coarsest(const Context&, const Problem<float>&,
                                        const SinkhornOptions&, Potentials<float>*);
template SinkhornSummary solve_coarsest(const Context&, const Problem<double>&,
                                        const SinkhornOptions&, Potentials<double>*);

}  // namespace multiscale

template <class T>
DivergenceSummary sinkhorn_divergence(const Context& ctx, const Problem<T>& problem,
                                      const SinkhornOptions& options, Potentials<T>* potentials) {
  const auto t0 = Clock::now();
  check_options(options);
  SinkhornSolver<T> solver(ctx, problem, options.precision);
  return solver.divergence_from(options, potentials, t0);
}

template <class T>
void barycentric_map(const Context& ctx, const Problem<T>& problem, const Potentials<T>& potentials,
                     Precision precision, MatrixView<T> out) {
  SinkhornSolver<T>(ctx, problem, precision).barycentric_map(potentials, out);
}

template <class T>
void to_shifted(const Context& ctx, const Problem<T>& problem, const Potentials<T>& p,
                std::vector<T>* fh, std::vector<T>* gh) {
  validate(problem);
  if (problem.labels())
    throw InvalidArgument("to_shifted: shifted potentials f - c|x|^2 are defined for a "
                          "squared-Euclidean cost only (this problem's cost is label-augmented)");
  const SqEuclidean<T>& fe = problem.features();
  *fh = to_host(ctx, p.f.cview());
  *gh = to_host(ctx, p.g.cview());
  if (std::int64_t(fh->size()) != fe.x.rows || std::int64_t(gh->size()) != fe.y.rows)
    throw InvalidArgument("to_shifted: potentials do not match the problem's sizes");
  auto shift = [&](const MatrixView<const T>& v, std::vector<T>* pot) {
    for (std::int64_t i = 0; i < v.rows; ++i) {
      double sq = 0;
      for (std::int64_t k = 0; k < v.cols; ++k) sq += double(v(i, k)) * double(v(i, k));
      (*pot)[std::size_t(i)] = T(double((*pot)[std::size_t(i)]) - fe.scale * sq);
    }
  };
  shift(fe.x, fh);
  shift(fe.y, gh);
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
     << "  solver             " << solver << (solver_note.empty() ? "" : " (" + solver_note + ")")
     << "\n"
     << (solver == "multiscale"
             ? "  multiscale         " + std::to_string(multiscale_levels) + " coarse levels, " +
                   format_number(100 * kept_fraction) + "% of the pairs kept, " +
                   std::to_string(fine_updates) + " fine half-steps, " +
                   std::to_string(mask_rebuilds) + " mask rebuilds, truncation bound " +
                   format_number(truncation_bound) +
                   (std::isnan(verified_error) ? std::string()
                                               : ", dense check " + format_number(verified_error)) +
                   "\n"
             : std::string())
     << "  epsilon            " << epsilon_reached << " reached, target " << epsilon
     << " (schedule started at " << initial_epsilon << "; resolvable >= " << resolvable_epsilon
     << ")\n"
     << "  termination        " << to_string(termination) << ": " << message << "\n"
     << "  iterations         " << iterations << " (" << annealing_iterations
     << " while annealing)"
     << (relaxation != 1.0 || relaxation_resets > 0
             ? "; over-relaxation " + format_number(relaxation) + " (" +
                   std::to_string(relaxation_resets) + " safeguard resets)"
             : std::string())
     << "\n"
     << "  marginal error     " << marginal_error << " (tolerance " << tolerance
     << "; certified on the caller's coordinates, rounding slack " << marginal_error_slack
     << " included; " << certificates << " certificate passes)\n"
     << "  engine residual    " << residual << "   (its own passes: not a certificate)\n"
     << (unbalanced()
             ? "  unbalanced         rho_a " + format_number(rho_a) + ", rho_b " +
                   format_number(rho_b) + "; masses a " + format_number(mass_a) + ", b " +
                   format_number(mass_b) + ", transported " + format_number(plan_mass) +
                   "; KL(P1|a) " + format_number(marginal_kl_a) + ", KL(P^T1|b) " +
                   format_number(marginal_kl_b) +
                   " (marginal error above: residual of P1 = a exp(-f/rho_a), P^T1 = b "
                   "exp(-g/rho_b))\n"
             : std::string())
     << "  dual cost          " << dual_cost
     << (unbalanced() ? "   <a,rho(1-e^-f/rho)> + <b,rho(1-e^-g/rho)> - eps (sum P - m_a m_b)\n"
                      : "   <a,f> + <b,g>\n")
     << "  primal cost        " << primal_cost << "   <P,C>\n"
     << "  regularized cost   " << regularized_cost
     << (unbalanced() ? "   <P,C> + eps KL(P|ab) + rho_a KL(P1|a) + rho_b KL(P^T1|b)\n"
                      : "   <P,C> + eps KL(P|ab)\n")
     << "  dual gap           " << dual_gap << "\n"
     << "  plan mass          " << plan_mass << "\n"
     << "  time (s)           setup " << seconds_setup << ", iterations " << seconds_iterations
     << ", costs " << seconds_costs << ", total " << seconds_total << "\n";
  return os.str();
}

std::string DivergenceSummary::brief_report() const {
  std::ostringstream os;
  os << std::setprecision(10) << "Sinkhorn divergence " << divergence << " (raw "
     << divergence_raw << ", error bound " << std::setprecision(3) << divergence_bound << ", "
     << std::setprecision(10)
     << (converged() ? "all three problems converged" : "NOT all converged") << ")\n"
     << "  xy: " << xy.brief_report() << "\n  xx: " << xx.brief_report()
     << "\n  yy: " << yy.brief_report();
  return os.str();
}

std::string DivergenceSummary::full_report() const {
  std::ostringstream os;
  os << std::setprecision(12) << "debiased Sinkhorn divergence " << divergence << " (raw "
     << divergence_raw << ", error bound " << divergence_bound << ")\n"
     << "--- OT(a, b)\n"
     << xy.full_report() << "--- OT(a, a)\n"
     << xx.full_report() << "--- OT(b, b)\n"
     << yy.full_report();
  return os.str();
}

#define KANTOR_INSTANTIATE(T)                                                             \
  template class SinkhornSolver<T>;                                                       \
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
