// Second-order minimization of a smooth function of host doubles: Newton-CG (Steihaug-Toint
// truncated conjugate gradients in a trust region), L-BFGS and gradient descent behind one
// Options / Summary / callbacks API (the Ceres Solver pattern, as in kantor/sinkhorn.hpp). The
// optimizer knows nothing of transport: an Objective supplies values, gradients and Hessian-
// vector products, whatever computes them (a CPU or GPU Sinkhorn solve, a user's regularizer).
// Algorithms, stopping rules and defaults: docs/newton.md.
//
//   MyObjective f;                                     // a kantor::Objective
//   kantor::NewtonOptions options;                     // Newton-CG by default
//   std::vector<double> x = initial_point();
//   kantor::NewtonSummary summary = kantor::minimize(f, options, x.data());
//   std::cout << summary.brief_report() << "\n";
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kantor/sinkhorn.hpp"  // CallbackResult

namespace kantor {

/// A twice-differentiable function of num_parameters() doubles in host memory. minimize() calls
/// it from the calling thread only, one call at a time.
class Objective {
 public:
  virtual ~Objective() = default;
  /// Number of parameters (the length of every x, gradient and vector passed in); >= 1.
  virtual std::int64_t num_parameters() const = 0;
  /// Writes the value at x to *value and, when gradient != nullptr, the gradient to gradient[].
  /// Returns false when x is outside the domain or the evaluation failed numerically: the
  /// optimizer then rejects the step (at the initial point: a numerical failure). A call
  /// without a gradient must not change the point hessian_vector() refers to.
  virtual bool evaluate(const double* x, double* value, double* gradient) = 0;
  /// Writes H v to out[], H the Hessian at the point of the most recent evaluate() call that
  /// asked for a gradient. Returns false on failure (the minimization then ends with a
  /// numerical failure). Called by Newton-CG only.
  virtual bool hessian_vector(const double* v, double* out) = 0;
  /// Called with the initial point once it has been evaluated, and with every accepted iterate
  /// after its gradient was evaluated (e.g. to keep a warm start). Default: nothing.
  virtual void accepted(const double* x) { (void)x; }
};

/// sum_k w_k F_k over terms of one size: an OT objective plus user terms (regularizers). Holds
/// non-owning pointers: every term must outlive the sum. Every term is evaluated at every call.
class SumObjective : public Objective {
 public:
  /// Adds w * term. Throws InvalidArgument for a null term, a non-finite weight, a term with
  /// fewer than 1 parameter or with a size other than the terms added before.
  void add(Objective* term, double weight = 1);
  /// Number of terms added.
  std::size_t num_terms() const { return terms_.size(); }

  /// The terms' size (0 while the sum is empty).
  std::int64_t num_parameters() const override;
  /// Weighted sum of the terms' values (and gradients); false as soon as one term fails.
  bool evaluate(const double* x, double* value, double* gradient) override;
  /// Weighted sum of the terms' Hessian-vector products; false as soon as one term fails.
  bool hessian_vector(const double* v, double* out) override;
  /// Forwards to every term.
  void accepted(const double* x) override;

 private:
  std::vector<std::pair<Objective*, double>> terms_;
  std::vector<double> scratch_;
};

enum class MinimizerMethod {
  kNewtonCG,         ///< Steihaug-Toint truncated CG in a trust region (uses hessian_vector)
  kLbfgs,            ///< limited-memory BFGS, backtracking Armijo line search
  kGradientDescent,  ///< steepest descent, backtracking Armijo line search with step growth
};
/// "newton-cg", "lbfgs" or "gradient-descent".
std::string to_string(MinimizerMethod m);
/// Parses the names to_string() writes; throws InvalidArgument naming `what` otherwise.
MinimizerMethod parse_minimizer_method(const std::string& s, const std::string& what = "method");

enum class MinimizerTermination {
  kNotRun,
  kGradientTolerance,  ///< |g|_inf <= gradient_tolerance * max(1, |g0|_inf) (converged)
  kFunctionTolerance,  ///< an accepted step changed f by <= function_tolerance * |f| (converged)
  kMaxIterations,      ///< max_iterations outer iterations done without meeting a tolerance
  kUserAbort,          ///< a callback returned kAbort
  kUserSuccess,        ///< a callback returned kStopSuccessfully
  /// The objective failed or gave NaN/Inf at the initial point, a gradient at an accepted point
  /// was not finite or failed, or a Hessian-vector product failed or was not finite.
  kNumericalFailure,
  /// The trust radius (or the line-search step) fell below the rounding of x: no step can
  /// change x any more and the tolerances are not met.
  kNoProgress,
};
/// "not run", "gradient tolerance", "function tolerance", "max iterations", ...
std::string to_string(MinimizerTermination t);

/// One record per outer iteration; iteration 0 is the initial point. Norms are max norms.
struct NewtonIterationRecord {
  std::int64_t iteration = 0;
  double objective = 0;      ///< f at the iterate after this iteration (unchanged if rejected)
  double gradient_norm = 0;  ///< |g|_inf at that iterate
  double step_norm = 0;      ///< |p|_2 of this iteration's trial step (0 at iteration 0)
  /// Newton-CG: the trust radius this iteration's step was computed within (the update by rho
  /// shows in the next record). NaN for the line-search methods.
  double trust_radius = std::numeric_limits<double>::quiet_NaN();
  std::int64_t cg_iterations = 0;     ///< CG iterations (= Hessian-vector products) of this step
  std::int64_t hvp_count = 0;         ///< Hessian-vector products so far
  std::int64_t gradient_count = 0;    ///< evaluations with a gradient so far
  std::int64_t evaluation_count = 0;  ///< evaluate() calls so far (with or without a gradient)
  bool negative_curvature = false;    ///< CG met a direction with p^T H p <= 0 in this step
  /// The smallest curvature estimate of this step: the minimum over CG of the Rayleigh quotients
  /// p^T H p / p^T p and of the smallest Ritz value of the Lanczos tridiagonal built from the CG
  /// coefficients. An upper bound of lambda_min(H) at the iterate. NaN without CG iterations.
  double min_curvature = std::numeric_limits<double>::quiet_NaN();
  bool step_accepted = false;  ///< true at iteration 0
  /// Actual over predicted reduction. Newton-CG: predicted by the quadratic model; the line-search
  /// methods: by the linear model -alpha g^T d of the accepted step (the Armijo ratio). NaN at
  /// iteration 0 and when the trial point could not be evaluated.
  double rho = std::numeric_limits<double>::quiet_NaN();
  double seconds = 0;  ///< wall time since minimize() started
};
using NewtonCallback = std::function<CallbackResult(const NewtonIterationRecord&)>;

struct NewtonOptions {
  MinimizerMethod method = MinimizerMethod::kNewtonCG;
  /// Outer iterations (trial steps, accepted or not) at most; 0 only evaluates the initial point.
  std::int64_t max_iterations = 100;
  /// Converged when |g|_inf <= gradient_tolerance * max(1, |g0|_inf) (g0 the initial gradient):
  /// absolute for gradients up to 1, relative to the initial one above. 0 disables it.
  double gradient_tolerance = 1e-6;
  /// Converged when an accepted step changes f by |f_k - f_k+1| <= function_tolerance * |f_k|.
  /// 0 disables it.
  double function_tolerance = 1e-10;

  // ---- Newton-CG (Steihaug-Toint trust region) ----
  /// First trust radius (2-norm of the step). L-BFGS and gradient descent bound the length of
  /// their first step by it as well.
  double initial_trust_radius = 1;
  /// The radius never grows beyond this.
  double max_trust_radius = 1e10;
  /// A step is accepted when rho = actual / predicted reduction > eta; in [0, 0.25).
  double eta = 0.1;
  /// CG stops at |r|_2 <= min(cg_forcing_max, |g|_2^cg_forcing_exponent) |g|_2. Exponent 0.5:
  /// superlinear local convergence (order 1.5); 1: quadratic. cg_forcing_max in (0, 1).
  double cg_forcing_max = 0.5;
  double cg_forcing_exponent = 0.5;  ///< in (0, 1]
  /// CG iterations per outer iteration at most; 0 = num_parameters().
  std::int64_t max_cg_iterations = 0;

  // ---- line searches (L-BFGS, gradient descent) ----
  /// Number of (s, y) pairs L-BFGS keeps; >= 1.
  std::int64_t lbfgs_memory = 10;
  /// Armijo constant c1: accept alpha when f(x + alpha d) <= f(x) + c1 alpha g^T d; in (0, 0.5).
  double sufficient_decrease = 1e-4;

  /// Called after every record (iteration 0 included), in order; the first non-kContinue
  /// result ends the minimization. x then holds the current iterate.
  std::vector<NewtonCallback> callbacks;
  /// Keep one NewtonIterationRecord per outer iteration in the Summary.
  bool record_iterations = true;

  /// True when every field is in range; otherwise false with the reason (naming the field and
  /// its value) in *why.
  bool is_valid(std::string* why) const;
};

struct NewtonSummary {
  MinimizerTermination termination = MinimizerTermination::kNotRun;
  std::string message = "not run";
  /// The gradient or the function tolerance was met (a callback's kStopSuccessfully is not).
  bool converged() const {
    return termination == MinimizerTermination::kGradientTolerance ||
           termination == MinimizerTermination::kFunctionTolerance;
  }

  MinimizerMethod method = MinimizerMethod::kNewtonCG;
  std::int64_t num_parameters = 0;
  double initial_objective = std::numeric_limits<double>::quiet_NaN();
  double final_objective = std::numeric_limits<double>::quiet_NaN();        ///< f at the returned x
  double initial_gradient_norm = std::numeric_limits<double>::quiet_NaN();  ///< |g0|_inf
  double gradient_norm = std::numeric_limits<double>::quiet_NaN();  ///< |g|_inf at the returned x
  /// The gradient_norm that counts as converged: gradient_tolerance * max(1, |g0|_inf).
  double gradient_threshold = std::numeric_limits<double>::quiet_NaN();
  std::int64_t outer_iterations = 0;  ///< trial steps, accepted or not
  std::int64_t accepted_steps = 0;
  std::int64_t cg_iterations = 0;             ///< over all outer iterations
  std::int64_t hvp_count = 0;                 ///< hessian_vector() calls
  std::int64_t gradient_count = 0;            ///< evaluate() calls with a gradient
  std::int64_t evaluation_count = 0;          ///< evaluate() calls, with or without a gradient
  std::int64_t negative_curvature_steps = 0;  ///< outer iterations whose CG met p^T H p <= 0
  /// The smallest min_curvature of the run when it is <= 0 (negative curvature met); else NaN.
  double most_negative_curvature = std::numeric_limits<double>::quiet_NaN();
  double seconds = 0;
  std::vector<NewtonIterationRecord> records;

  /// One line: method, termination, iterations, f and |g| from start to end, work, time.
  std::string brief_report() const;
  /// Several lines: every field above.
  std::string full_report() const;
};

/// Minimizes `objective` from x (in/out: num_parameters() doubles; on return the last accepted
/// iterate, which is x itself when no step was accepted). Throws InvalidArgument for invalid
/// options, a null x or an objective of fewer than 1 parameter; numerical outcomes are in the
/// Summary. docs/newton.md.
NewtonSummary minimize(Objective& objective, const NewtonOptions& options, double* x);

}  // namespace kantor
