// Derivatives of entropic OT between point clouds at given potentials: gradients (envelope
// theorem), streaming Hessian-vector products (a Schur-complement CG, each iteration two
// streaming passes) and the inverse HVP, for OT_eps and for the debiased divergence S_eps.
// Formulas and their derivation: docs/numerics.md section 4. Everything is matrix-free: the
// passes of the problem's oracle (P v, P^T u, P V, P^T U), no n x m array.
//
//   kantor::SinkhornSolver<double> solver(ctx, problem);
//   kantor::Potentials<double> pot;
//   solver.solve(kantor::SinkhornOptions{}, &pot);
//   std::vector<double> gx(n * d);
//   kantor::GradientOutput<double> out;
//   out.x = kantor::host_matrix(gx.data(), n, d);
//   auto gs = solver.gradient(pot, out);                  // gs.value = OT_eps
//
// Squared-Euclidean costs only (the position derivatives of a label-augmented cost are those of
// its feature part, but its weights' table term makes the self-terms' symmetry argument fail;
// the derivative entry points refuse other costs with InvalidArgument naming the cost).
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "kantor/potentials.hpp"
#include "kantor/view.hpp"

namespace kantor {

/// Where the gradient blocks go: host memory; a view with data == nullptr is not computed.
template <class T>
struct GradientOutput {
  MatrixView<T> x;  ///< n x d: dOT/dx_i
  MatrixView<T> y;  ///< m x d: dOT/dy_j
  /// n: the gradient with respect to the caller's weights a (raw, before the normalization to
  /// mass 1 that the solver applies): (f_i - <a/|a|, f>) / |a| (|a| = sum of the raw weights; 1
  /// for uniform weights). Its inner product with any direction gives the directional
  /// derivative of OT(a/|a|, b/|b|).
  VectorView<T> a;
  VectorView<T> b;  ///< m: the same for b, from g
};

/// What a gradient call computed, and how trustworthy its inputs were.
struct GradientSummary {
  /// OT_eps (or S_eps) at the potentials: the dual value <a,f> + <b,g> (and its combination for
  /// the divergence).
  double value = std::numeric_limits<double>::quiet_NaN();
  double epsilon = 0;  ///< the eps of the potentials
  /// The certificate (an upper bound of the L1 marginal error of the plan on the caller's
  /// coordinates) of the potentials used: how far from converged the gradient's inputs were
  /// (the largest of the three problems' for the divergence). The envelope gradient is exact at
  /// a zero marginal error; its error is of the order of this bound times the cost scale.
  double marginal_error = std::numeric_limits<double>::quiet_NaN();
  double seconds = 0;
};

/// Options of the HVP's inner solve: the Schur complement S z = r of the linearized marginal
/// conditions (docs/numerics.md section 4), by preconditioned conjugate gradients with the
/// diagonal preconditioner diag(P^T 1) and the null direction 1 projected out.
struct HvpOptions {
  /// Stop when |r_k|_2 <= tolerance * |r_0|_2.
  double tolerance = 1e-6;
  std::int64_t max_iterations = 1000;
  /// Read the residual on the host every k iterations (the only synchronization of the loop).
  std::int64_t check_every = 5;
  /// Jacobi preconditioner: the exact diagonal of S, diag(P^T 1) - diag(P^T diag(1/ah) P) (one
  /// more streaming pass per HVP, at eps/2: P_ij^2 = a_i b_j P(eps/2)_ij); kMarginal: diag(P^T 1)
  /// alone (no extra pass; poor when the plan is nearly a permutation); kNone: plain CG.
  enum class Preconditioner { kNone, kMarginal, kDiagonal };
  Preconditioner preconditioner = Preconditioner::kDiagonal;
  /// SinkhornSolver's hvp / divergence_hvp certify the potentials (HvpSummary::marginal_error);
  /// false skips that (two float64 passes per problem), leaving NaN.
  bool certify = true;
  bool is_valid(std::string* why) const;
};

struct HvpSummary {
  bool converged = false;
  std::string message = "not run";
  std::int64_t cg_iterations = 0;
  /// |r|_2 / |r_0|_2 at the last check (0 when the right-hand side is 0).
  double relative_residual = std::numeric_limits<double>::quiet_NaN();
  /// The certificate of the potentials used (as GradientSummary::marginal_error).
  double marginal_error = std::numeric_limits<double>::quiet_NaN();
  double seconds = 0;
  std::string brief_report() const;
};

/// Options of the inverse HVP H^-1 g: conjugate gradients on H while its curvature stays
/// positive (the Hessian of OT_eps in x is indefinite in general).
struct InverseHvpOptions {
  double tolerance = 1e-6;            ///< |H s - g|_2 <= tolerance |g|_2
  std::int64_t max_iterations = 200;  ///< outer CG iterations (one HVP each)
  HvpOptions hvp;                     ///< the inner solves
  bool is_valid(std::string* why) const;
};

enum class InverseHvpTermination {
  kNotRun,
  kConverged,
  kMaxIterations,
  /// p^T H p <= 0 met: H is not positive definite along p; the output is the last iterate
  /// before that direction and `curvature` says how negative it was.
  kNegativeCurvature,
  kInnerFailure,  ///< an HVP's inner solve failed (message says why)
};
std::string to_string(InverseHvpTermination t);

struct InverseHvpSummary {
  InverseHvpTermination termination = InverseHvpTermination::kNotRun;
  std::string message = "not run";
  bool converged() const { return termination == InverseHvpTermination::kConverged; }
  std::int64_t iterations = 0;        ///< outer CG iterations = HVPs
  std::int64_t inner_iterations = 0;  ///< CG iterations of all inner solves
  double relative_residual = std::numeric_limits<double>::quiet_NaN();  ///< |H s - g| / |g|
  /// The smallest Rayleigh quotient p^T H p / p^T p seen (negative when curvature is negative).
  double curvature = std::numeric_limits<double>::quiet_NaN();
  double seconds = 0;
  std::string brief_report() const;
};

/// The potentials of the three problems of the debiased divergence: (x, y), (x, x), (y, y).
template <class T>
struct DivergencePotentials {
  Potentials<T> xy, xx, yy;
};

template <class T>
class Oracle;

// Oracle-level entry points: the algorithms behind SinkhornSolver's derivative methods, on
// buffers in the oracle's memory space (device memory on the CUDA engine: zero-copy for callers
// that hold device data, and what `kantor bench` times). They check shapes only (no finiteness
// scan, no certificate) and do not synchronize, except the HVP at its convergence checks.

/// out (rows x d of side s, the oracle's memory space) = the gradient of OT_eps with respect to
/// side s's points (s = 0: x, s = 1: y) at the potentials (f, g): 2c sum_j P_ij (x_i - y_j).
/// One value pass with d + 1 columns.
template <class T>
void oracle_gradient(const Context& ctx, Oracle<T>& oracle, T eps, const T* f, const T* g, int side,
                     MatrixView<T> out);

/// The joint HVP (out_x, out_y) = H (A, B) of (x, y) -> OT_eps at (f, g); an empty A or B
/// (data == nullptr) is a zero direction, an empty out_x or out_y is not computed. Views in the
/// oracle's memory space (n x d, m x d). SinkhornSolver::hvp is this with B = 0, out_y empty.
template <class T>
HvpSummary oracle_hvp(const Context& ctx, Oracle<T>& oracle, T eps, const T* f, const T* g,
                      MatrixView<const T> A, MatrixView<const T> B, MatrixView<T> out_x,
                      MatrixView<T> out_y, const HvpOptions& options = {});

}  // namespace kantor
