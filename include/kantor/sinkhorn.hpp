// Sinkhorn solver for entropic OT between point clouds: Options / Summary / callbacks (the Ceres
// Solver pattern), alternating and symmetric schedules, eps-annealing, tolerance stopping and
// the debiased Sinkhorn divergence. Conventions: docs/numerics.md.
//
//   kantor::Context ctx;                                  // cpu or cuda (auto)
//   kantor::Potentials<double> pot;
//   auto summary = kantor::solve_sinkhorn(ctx, problem, kantor::SinkhornOptions{}, &pot);
//   std::cout << summary.brief_report() << "\n";
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "kantor/context.hpp"
#include "kantor/derivatives.hpp"
#include "kantor/potentials.hpp"
#include "kantor/problem.hpp"

namespace kantor {

struct BlockList;  // kantor/oracle.hpp

enum class Schedule {
  kAlternating,  ///< Gauss-Seidel: f from g, then g from the new f
  kSymmetric,    ///< Jacobi averaging: f, g <- (old + update(old)) / 2, from the old values
};
std::string to_string(Schedule s);
Schedule parse_schedule(const std::string& s, const std::string& what = "schedule");

enum class TerminationType {
  kNotRun,
  kConverged,          ///< marginal error <= tolerance at the target eps
  kMaxIterations,      ///< iteration budget spent before the tolerance was met
  kUserAbort,          ///< a callback returned kAbort
  kUserSuccess,        ///< a callback returned kStopSuccessfully
  kNumericalFailure,   ///< NaN or Inf appeared in the potentials or the marginal error
  /// Not converged: the engine's own iteration converged (its residual met the tolerance) but the
  /// certificate on the caller's coordinates stayed above it and stopped improving (10 honest
  /// checks in a row): the rounding floor of the precision at this eps. The message names a
  /// precision that would resolve it. The multiscale solver's points also stop so where their
  /// engine residual stalls at the precision's rounding floor (resolvable eps / eps) above
  /// half the tolerance; that message names the floor instead (docs/multiscale.md, "Coarse
  /// tolerance").
  kRoundingFloor,
};
std::string to_string(TerminationType t);

enum class CallbackResult { kContinue, kAbort, kStopSuccessfully };

/// Which solver runs a solve (docs/multiscale.md).
enum class SolverKind {
  kDense,       ///< every pass over all n x m pairs (streamed, never stored)
  kMultiscale,  ///< coarse-to-fine on Morton cells, fine passes over a provably screened block list
  /// multiscale when it pays: a squared-Euclidean cost, d <= 6, n m >= 2^30, eps-annealing on,
  /// no coarse blocks and no warm start; dense otherwise. The Summary says which ran and why.
  kAuto,
};
std::string to_string(SolverKind s);
SolverKind parse_solver_kind(const std::string& s, const std::string& what = "solver");

/// Whether the multiscale screen evaluates its kept atom pairs on their points
/// (MultiscaleOptions::points_stage; docs/multiscale.md, step 4).
enum class PointsStage {
  kAuto,  ///< kEngine on the CUDA engine, kOn on the CPU engine
  kOn,    ///< on either engine, over the engine's atom_pair_maxima on the host's pair lists
  kOff,   ///< never: the box bound alone
  /// On, inside the engine's screen descent where it has one (the CUDA engine: a warp per kept
  /// atom pair on the device; elsewhere as kOn).
  kEngine,
};

/// Knobs of the multiscale solver (SinkhornOptions::solver).
struct MultiscaleOptions {
  /// Points per cell of a coarse level (each level coarsens by this factor), >= 2. 8: at 2^17
  /// points a side on the H200, 5 iterations on the points and 0.38 s against 74 and 0.77 s for
  /// 64 (docs/multiscale.md).
  std::int64_t cell_points = 8;
  /// Screening slack kappa: the mask is rebuilt when the potentials drift up by more than
  /// slack * eps, and a mask is accepted when its truncation at that drift stays within half the
  /// tolerance. theta_b = ln(4 max(1, m_a m_b) / tol) + slack, where acceptance is certain
  /// (docs/multiscale.md). > 0.
  double slack = 2.0;
  /// The first screen keeps pairs above -(theta_b - theta_trial) eps (at least 0.5 eps) and is
  /// accepted when its dropped mass allows it; otherwise the screen runs again at theta_b.
  /// 3: at 2^17 points 16.7% kept instead of 18.7%, accepted at every level. 0: theta_b at once.
  /// >= 0.
  double theta_trial = 3.0;
  /// The screen's points stage (PointsStage).
  PointsStage points_stage = PointsStage::kAuto;
  /// Fall back to dense fine passes when the screen keeps more than this fraction of the pairs
  /// (high dimension: boxes do not prune). In (0, 1]. A truncated pass costs about its kept
  /// fraction of a dense one plus ~15% per scanned tile (docs/multiscale.md, "Fallback"), so
  /// lists win up to ~0.85; 0.6 keeps a margin (2^14 points on the CPU: 45.6% kept, the
  /// truncated passes 2.1x faster end to end than the dense fallback).
  double max_density = 0.6;
  /// Coarse problems with at most this many pairs are solved dense; larger ones recursively.
  std::int64_t dense_pairs = std::int64_t(1) << 24;
  /// Over-relaxation of the truncated passes of every level (as SinkhornOptions::relaxation):
  /// 0 = automatic (plain steps until the residual's contraction rate is measured, then the SOR
  /// factor 2 / (1 + sqrt(1 - rate)); after a grace of max(5, (w - 1) / (2 - w) + 1)
  /// iterations its rate is measured again every 4 consecutive decreasing residuals and the
  /// factor raised by the SOR relation while it is below the optimum and many iterations
  /// remain; at most 1.9; reset to 1, with half its excess as the new ceiling, when the
  /// residual grows twice in a row, rises 4x, or stalls; docs/multiscale.md, step 5), 1 =
  /// plain, (1, 2) fixed. The dense coarsest level uses SinkhornOptions::relaxation = 0.
  double relaxation = 0;
  /// Lift a balanced problem's coarse potentials with each cell a Gaussian of its points'
  /// spread around the coarse plan's image of it (docs/multiscale.md, step 3): on smooth maps
  /// the lifted pair starts the finer level about twice as close to its marginals as the
  /// centroids' lift (the data at 2^20 points: certified after two passes instead of
  /// three). Taken where the finest level's cells are narrow against eps and a probe on the
  /// coarse cells finds it crediting the columns at most the tolerance's share of mass beyond
  /// the centroids' kernels; where mass moves between clusters the Gaussian's tails credit the
  /// cells' own neighbourhoods with mass they lack (8 clusters of unequal masses: a first
  /// residual of 1.8e25 without the probe), and the probe declines it (the solver note says so).
  bool gaussian_lift = true;
  /// Keep the finest level's f-side block list in SinkhornSummary::mask (for pictures).
  bool keep_mask = false;
  /// After the solve, one dense float64 certificate over all pairs (SinkhornSummary::
  /// verified_error); O(n m): for tests and audits.
  bool verify = false;
  /// Phase timings, for profiling (`kantor bench solve --phases`): when set, every level
  /// synchronizes the context at each boundary of its phases (docs/multiscale.md, "Phases")
  /// and calls this with the phase's name, the level's x-side points and the phase's wall
  /// seconds. A level's "coarse" phase holds the whole coarser solve, whose own phases are
  /// reported before it. Empty by default: no synchronization is added.
  std::function<void(const char* phase, std::int64_t n, double seconds)> phase_timer;
};

/// One record per convergence check (every `check_every` iterations and at the end).
struct IterationRecord {
  std::int64_t iteration = 0;  ///< iterations done so far (annealing steps included)
  double epsilon = 0;          ///< eps of the last iteration
  double marginal_error = 0;   ///< the engine's residual: L1 marginal error of its own passes
  /// The certificate (an upper bound of the true L1 marginal error on the caller's coordinates)
  /// when this check evaluated one, else NaN. Evaluated once the residual meets the tolerance
  /// at the target eps, and at every check after a certificate failed (the multiscale solver's
  /// finest level: from twice the tolerance where the certificate's row side also makes the next
  /// f update, docs/multiscale.md; a try stopped after its row side has none).
  double certified_error = std::numeric_limits<double>::quiet_NaN();
  double seconds = 0;          ///< wall time since the solve started
  /// The dual cost <a, f> + <b, g> of the potentials at this check (no extra pass). For an
  /// unbalanced problem only its potential part (Oracle::dual_value): the mass term
  /// -eps (sum P - m_a m_b) of SinkhornSummary::dual_cost needs a pass and is left out here.
  double dual_cost = std::numeric_limits<double>::quiet_NaN();
};
using IterationCallback = std::function<CallbackResult(const IterationRecord&)>;

struct SinkhornOptions {
  Schedule schedule = Schedule::kAlternating;
  /// eps-annealing: start at c*D^2 (D = diagonal of the joint bounding box), multiply by
  /// `scaling` per iteration down to the target eps, then iterate at the target. When false,
  /// every iteration runs at the target eps (fixed-eps mode).
  bool anneal = true;
  /// eps multiplier per annealing step, in (0, 1). GeomLoss's `scaling` s maps to s^2 here.
  double scaling = 0.5;
  /// First eps of the annealing schedule; 0 = c*D^2. (The debiased divergence sets it so that
  /// its three problems share one schedule.)
  double initial_epsilon = 0;
  /// Stop when the L1 marginal error <= tolerance at the target eps. 0 = the default of the
  /// precision: 1e-9 (fp64), 1e-4 (fp32), 1e-4 (tf32), 1e-2 (bf16).
  double tolerance = 0;
  /// Iteration budget, annealing steps included. An iteration is one f and one g update.
  std::int64_t max_iterations = 10000;
  /// Check the marginal error every k iterations (the only host synchronization in the loop).
  std::int64_t check_every = 10;
  /// Arithmetic; unset = fp64 for Problem<double>, fp32 for Problem<float>.
  std::optional<Precision> precision;
  /// Self-problems (y = x, b = a) run the symmetric schedule from f = g whatever `schedule` says
  /// (alternating updates converge very slowly on them; docs/numerics.md). False keeps `schedule`.
  bool symmetric_self_problems = true;
  /// Over-relaxation of the alternating schedule at the target eps (never while annealing):
  /// f <- (1 - w) f + w T_f(g), then g <- (1 - w) g + w T_g(f), w in [1, 2). The fixed point, the
  /// certificate and the stopping rule are those of plain Sinkhorn; only the path changes.
  ///   1 (the default): plain Sinkhorn.
  ///   0: automatic. Plain steps until two checks at the target eps measure the contraction rate
  ///      rho of the residual per iteration; then w = 2 / (1 + sqrt(1 - rho)), the optimal SOR
  ///      factor of the linearized iteration (Young; Thibault et al. 2017 for Sinkhorn).
  ///      Safeguard: two checks in a row whose residual grew reset w to 1 and measure again.
  ///   a value in (1, 2): that fixed w.
  /// The symmetric schedule ignores it.
  double relaxation = 1.0;
  /// Coarse correction (a two-level method): a partition of the source points into blocks
  /// (coarse_blocks_x[i] in [0, Bx)) and of the target points (coarse_blocks_y[j] in [0, By)),
  /// host vectors of sizes n and m, or both empty (off). At every check at the target eps the
  /// potentials are shifted by one constant per block, f_i += eps log u_I, g_j += eps log v_J,
  /// with (u, v) the exact maximizer of the dual over such shifts: a Bx x By Sinkhorn problem on
  /// the block masses of the plan (one value pass P V, V the target blocks' indicators). It is a
  /// dual ascent step, so the fixed point and the certificate are those of plain Sinkhorn. It
  /// settles the mass balance between blocks (for a label-augmented cost: the classes, whose
  /// label term makes transport between them expensive) in one step instead of many; it does not
  /// help with the slow modes inside a block. Measured: 310 -> 200 iterations on two distant
  /// clusters (tests/sinkhorn/test_relaxation.cpp); Fashion-MNIST OTDD, 400 samples a side, fp64:
  /// residual 0.055 -> 0.033 after 3,000 iterations. Each correction costs one value pass with
  /// By columns, at checks (not while annealing). The symmetric schedule's self-problems of a
  /// divergence do not use it.
  std::vector<std::int32_t> coarse_blocks_x, coarse_blocks_y;
  /// Dense, multiscale or automatic (the default: see SolverKind::kAuto). The debiased
  /// divergence and the derivative calls always run dense.
  SolverKind solver = SolverKind::kAuto;
  MultiscaleOptions multiscale;
  /// Keep one IterationRecord per check in the Summary.
  bool record_iterations = true;
  /// Called at every check, in order; the first non-kContinue result ends the solve.
  std::vector<IterationCallback> callbacks;

  /// True when every field is in range; otherwise false with the reason in *why.
  bool is_valid(std::string* why) const;
};

/// Default stopping tolerance of a precision (see SinkhornOptions::tolerance).
double default_tolerance(Precision p);

struct SinkhornSummary {
  TerminationType termination = TerminationType::kNotRun;
  std::string message = "not run";
  bool converged() const { return termination == TerminationType::kConverged; }

  std::int64_t n = 0, m = 0, d = 0;
  Schedule schedule = Schedule::kAlternating;
  Backend backend = Backend::kCpu;
  std::string backend_note;  ///< how the backend was chosen (auto fallbacks are said here)
  Precision precision = Precision::kFp64;
  std::string engine;        ///< Oracle::description()

  double epsilon = 0;          ///< target eps
  /// eps of the returned potentials and of every value below: the target, unless the solve
  /// stopped (budget, callback) while still annealing.
  double epsilon_reached = 0;
  double initial_epsilon = 0;  ///< first eps of the schedule (= epsilon without annealing)
  /// The smallest eps this precision resolves for this data (ulp of the largest score term; a
  /// smaller eps is refused with InvalidArgument). docs/numerics.md, "Resolvable range".
  double resolvable_epsilon = 0;
  double tolerance = 0;
  std::int64_t iterations = 0;
  std::int64_t annealing_iterations = 0;  ///< iterations spent above the target eps
  /// The certificate of the returned plan: an upper bound, rounding slack included, of the L1
  /// marginal error |P1 - a|_1 + |P^T 1 - b|_1 of the plan the returned potentials define on the
  /// caller's coordinates (float64, exact differences). converged() implies it is <= tolerance.
  double marginal_error = std::numeric_limits<double>::quiet_NaN();
  double marginal_error_slack = std::numeric_limits<double>::quiet_NaN();  ///< its rounding part
  /// The engine's own residual for the returned potentials (its passes, its rounded problem):
  /// what drives the intermediate checks; not a certificate.
  double residual = std::numeric_limits<double>::quiet_NaN();
  std::int64_t certificates = 0;  ///< certificate passes run (each two float64 passes)
  /// The over-relaxation factor of the last iterations (1 = plain; SinkhornOptions::relaxation)
  /// and how often the automatic one was reset by its safeguard.
  double relaxation = 1.0;
  std::int64_t relaxation_resets = 0;
  /// Coarse corrections applied (SinkhornOptions::coarse_blocks_x / _y).
  std::int64_t coarse_corrections = 0;

  /// The solver that ran ("dense" or "multiscale") and why (auto's rule, a fallback).
  std::string solver = "dense";
  std::string solver_note;
  /// Multiscale: coarse problems solved before the points (0 for dense), the fraction of the
  /// n m pairs the fine passes' block lists hold (1 for dense), half-steps on the points, mask
  /// rebuilds, and the bound of the plan mass outside the block lists, 2 exp(-(theta_b -
  /// drift / eps)), which marginal_error includes.
  std::int64_t multiscale_levels = 0;
  double kept_fraction = 1.0;
  std::int64_t fine_updates = 0;
  std::int64_t mask_rebuilds = 0;
  double truncation_bound = 0;
  /// MultiscaleOptions::verify: the dense float64 evaluation of the returned plan's L1 marginal
  /// error over all pairs (NaN when not asked).
  double verified_error = std::numeric_limits<double>::quiet_NaN();
  /// MultiscaleOptions::keep_mask: the f-side block list of the points' truncated passes (rows:
  /// the source points, keys: the target points, both in Morton order); null otherwise.
  std::shared_ptr<const BlockList> mask;

  /// Unbalanced OT (Problem::rho_a, rho_b; docs/numerics.md section 9): the marginal penalties
  /// (infinity = strict), the weights' totals as used (1 for a balanced problem: normalized), and
  /// KL(P 1 | a), KL(P^T 1 | b) of the returned plan (0 when balanced). For an unbalanced
  /// problem marginal_error certifies the residual of the first-order conditions
  /// |P 1 - a exp(-f / rho_a)|_1 + |P^T 1 - b exp(-g / rho_b)|_1 (a strict side's term is its
  /// marginal error), the dual and regularized costs below are the unbalanced ones, and
  /// plan_mass is the transported mass.
  double rho_a = std::numeric_limits<double>::infinity();
  double rho_b = std::numeric_limits<double>::infinity();
  double mass_a = 1, mass_b = 1;
  double marginal_kl_a = 0, marginal_kl_b = 0;
  bool unbalanced() const {
    return rho_a < std::numeric_limits<double>::infinity() ||
           rho_b < std::numeric_limits<double>::infinity();
  }

  /// <a,f> + <b,g>; unbalanced: <a, rho_a (1 - e^(-f/rho_a))> + <b, rho_b (1 - e^(-g/rho_b))>
  /// - eps (sum P - m_a m_b), a strict side's term being <a, f>.
  double dual_cost = std::numeric_limits<double>::quiet_NaN();
  double primal_cost = std::numeric_limits<double>::quiet_NaN();       ///< <P, C>
  /// <P,C> + eps KL(P|ab) (+ rho_a KL(P1|a) + rho_b KL(P^T1|b) for relaxed sides).
  double regularized_cost = std::numeric_limits<double>::quiet_NaN();
  /// regularized - dual: >= 0 for an exactly feasible plan, -> 0 at convergence; can be slightly
  /// negative (order of the marginal error) for the approximately feasible plan returned.
  double dual_gap = std::numeric_limits<double>::quiet_NaN();
  double plan_mass = std::numeric_limits<double>::quiet_NaN();  ///< sum_ij P_ij

  double seconds_setup = 0, seconds_iterations = 0, seconds_costs = 0, seconds_total = 0;
  std::vector<IterationRecord> records;

  /// One line: termination, iterations, marginal error, costs, time.
  std::string brief_report() const;
  /// Several lines: problem, engine, schedule, every field above.
  std::string full_report() const;
};

/// Solve entropic OT for `problem` with `options`. `potentials` (may be null) receives f, g in the
/// context's memory space; if it holds potentials of sizes n and m on entry they are a warm start.
/// Throws InvalidArgument for invalid options or problem; numerical outcomes are in the Summary.
/// Synchronizes at every check and at the end.
template <class T>
SinkhornSummary solve_sinkhorn(const Context& ctx, const Problem<T>& problem,
                               const SinkhornOptions& options, Potentials<T>* potentials);
/// Same, when the potentials are not needed.
template <class T>
SinkhornSummary solve_sinkhorn(const Context& ctx, const Problem<T>& problem,
                               const SinkhornOptions& options = {}) {
  return solve_sinkhorn(ctx, problem, options, static_cast<Potentials<T>*>(nullptr));
}

/// Debiased Sinkhorn divergence S = OT(a,b) - OT(a,a)/2 - OT(b,b)/2 (docs/numerics.md),
/// the three problems sharing one eps schedule (started at c*D^2 of the joint bounding box).
struct DivergenceSummary {
  /// S, clamped at 0 when the raw value is negative by no more than divergence_bound (S >= 0
  /// holds exactly; such a value is rounding). A raw value below -divergence_bound is reported
  /// as it is.
  double divergence = std::numeric_limits<double>::quiet_NaN();
  double divergence_raw = std::numeric_limits<double>::quiet_NaN();  ///< before the clamp
  /// Error bound of the raw value from the three certificates and the potentials' rounding.
  double divergence_bound = std::numeric_limits<double>::quiet_NaN();
  SinkhornSummary xy, xx, yy;
  bool converged() const { return xy.converged() && xx.converged() && yy.converged(); }
  std::string brief_report() const;
  std::string full_report() const;
};

template <class T>
DivergenceSummary sinkhorn_divergence(const Context& ctx, const Problem<T>& problem,
                                      const SinkhornOptions& options,
                                      Potentials<T>* potentials = nullptr);

/// Barycentric map T(x_i) = sum_j P_ij y_j / sum_j P_ij of the plan of `potentials` at the eps
/// they were computed at (potentials.epsilon; problem.epsilon when that is 0); `out` is an n x d
/// host matrix. Synchronizes. Prepares the problem anew: after a solve, SinkhornSolver's
/// barycentric_map reuses the solve's prepared data instead.
template <class T>
void barycentric_map(const Context& ctx, const Problem<T>& problem,
                     const Potentials<T>& potentials, Precision precision, MatrixView<T> out);

template <class T>
class Oracle;

/// A problem prepared once (validated, copied, centred, uploaded to the device) for several
/// calls: a solve, then values of its plan, without preparing the data again. The problem's
/// views must outlive the solver. The free functions above are one-call wrappers of it.
///
///   kantor::SinkhornSolver<float> solver(ctx, problem, kantor::Precision::kTf32);
///   kantor::Potentials<float> pot;
///   auto summary = solver.solve(kantor::SinkhornOptions{}, &pot);
///   solver.barycentric_map(pot, kantor::host_matrix(map.data(), n, d));
template <class T>
class SinkhornSolver {
 public:
  /// precision unset: fp64 for double, fp32 for float. Throws InvalidArgument (problem,
  /// precision) like solve_sinkhorn.
  SinkhornSolver(const Context& ctx, const Problem<T>& problem,
                 std::optional<Precision> precision = std::nullopt);
  ~SinkhornSolver();
  SinkhornSolver(SinkhornSolver&&) noexcept;
  SinkhornSolver& operator=(SinkhornSolver&&) noexcept;
  SinkhornSolver(const SinkhornSolver&) = delete;
  SinkhornSolver& operator=(const SinkhornSolver&) = delete;

  Precision precision() const { return precision_; }
  /// As solve_sinkhorn; options.precision must be unset or this solver's precision.
  SinkhornSummary solve(const SinkhornOptions& options, Potentials<T>* potentials);
  /// As sinkhorn_divergence (the (x, y) problem on this solver's prepared data).
  DivergenceSummary divergence(const SinkhornOptions& options, Potentials<T>* potentials = nullptr);
  /// As barycentric_map, on the prepared data.
  void barycentric_map(const Potentials<T>& potentials, MatrixView<T> out);

  // Derivatives (kantor/derivatives.hpp, docs/numerics.md section 4). Outputs are host memory;
  // directions are host memory of the problem's shapes. Each call validates its arguments
  // (InvalidArgument naming the field), synchronizes, and certifies the potentials it is given
  // (the Summary's marginal_error says how far from converged they were).

  /// As divergence, keeping the potentials of all three problems (their derivatives need them).
  DivergenceSummary solve_divergence(const SinkhornOptions& options,
                                     DivergencePotentials<T>* potentials);
  /// Gradient of OT_eps(x, y, a, b) at `potentials` (envelope theorem): the blocks of `out` that
  /// are not empty. x: 2c sum_j P_ij (x_i - y_j); y: 2c sum_i P_ij (y_j - x_i); a, b: see
  /// GradientOutput.
  ///
  /// `certify` = false skips the certificate of the potentials (two float64 passes per problem:
  /// at 50k points on the H200 ~17x the gradient's own pass); the Summary's marginal_error is
  /// then NaN. For callers that hold the solve's certificate already.
  GradientSummary gradient(const Potentials<T>& potentials, const GradientOutput<T>& out,
                           bool certify = true);
  /// Gradient of the debiased divergence S_eps = OT(x,y) - OT(x,x)/2 - OT(y,y)/2.
  GradientSummary divergence_gradient(const DivergencePotentials<T>& potentials,
                                      const GradientOutput<T>& out, bool certify = true);
  /// out (n x d) = H A, H the Hessian of x -> OT_eps(x, y) at `potentials` (y, a, b fixed),
  /// A an n x d direction. One Schur-complement CG solve (two streaming passes per iteration).
  HvpSummary hvp(const Potentials<T>& potentials, MatrixView<const T> direction,
                 MatrixView<T> out, const HvpOptions& options = {});
  /// out = H A for H the Hessian of x -> S_eps(x, y): the (x, y) problem's HVP minus half the
  /// HVP of x -> OT(x, x), which moves both arguments (the joint HVP in direction (A, A)).
  HvpSummary divergence_hvp(const DivergencePotentials<T>& potentials,
                            MatrixView<const T> direction, MatrixView<T> out,
                            const HvpOptions& options = {});
  /// out (n x d) = H^-1 g for the Hessian of x -> OT_eps(x, y), by CG over hvp() while the
  /// curvature stays positive (the Summary says when it did not). The gradient of OT is
  /// invariant to a common translation of x and y, so H has no null space in general, but it
  /// is indefinite in general.
  InverseHvpSummary inverse_hvp(const Potentials<T>& potentials, MatrixView<const T> g,
                                MatrixView<T> out, const InverseHvpOptions& options = {});

 private:
  template <class U>
  friend SinkhornSummary solve_sinkhorn(const Context&, const Problem<U>&, const SinkhornOptions&,
                                        Potentials<U>*);
  template <class U>
  friend DivergenceSummary sinkhorn_divergence(const Context&, const Problem<U>&,
                                               const SinkhornOptions&, Potentials<U>*);
  SinkhornSummary solve_from(const SinkhornOptions& options, Potentials<T>* potentials,
                             std::chrono::steady_clock::time_point t0);
  DivergenceSummary divergence_from(const SinkhornOptions& options, Potentials<T>* potentials,
                                    std::chrono::steady_clock::time_point t0,
                                    Potentials<T>* xx = nullptr, Potentials<T>* yy = nullptr);
  /// The oracle of the self-problem (x, x) (side 0) or (y, y) (side 1), made on first use.
  Oracle<T>& self_oracle(int side);
  const Context* ctx_;
  Problem<T> problem_;
  Precision precision_;
  std::unique_ptr<Oracle<T>> oracle_;
  std::unique_ptr<Oracle<T>> self_oracles_[2];
};

}  // namespace kantor
