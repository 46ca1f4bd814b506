// Entropic OT as an Objective of the source positions (kantor/newton.hpp): x -> S_eps(x, y) (the
// debiased divergence, default) or x -> OT_eps(x, y), with its gradient and Hessian-vector
// products (kantor/derivatives.hpp), for shape matching / gradient flows with minimize().
//
//   kantor::DivergenceObjective<double> objective(ctx, problem);  // problem.x = initial shape
//   std::vector<double> x(initial positions, n * d);
//   auto summary = kantor::minimize(objective, kantor::NewtonOptions{}, x.data());
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kantor/context.hpp"
#include "kantor/derivatives.hpp"
#include "kantor/newton.hpp"
#include "kantor/problem.hpp"
#include "kantor/sinkhorn.hpp"

namespace kantor {

/// x -> S_eps(x, y) (or OT_eps(x, y) when `debiased` is false) over the n x d source positions,
/// row-major, as doubles. The target y, the weights, eps and the cost scale come from `problem`
/// (its views must outlive the objective; its x only gives n and d). Every evaluation is a
/// Sinkhorn solve at the new positions (a new prepared problem), warm-started from the last
/// accepted point's potentials without annealing once one exists; a gradient evaluation keeps
/// its solve for the Hessian-vector products that follow. Squared-Euclidean costs only.
template <class T>
class DivergenceObjective : public Objective {
 public:
  DivergenceObjective(const Context& ctx, const Problem<T>& problem,
                      const SinkhornOptions& sinkhorn = {}, const HvpOptions& hvp = {},
                      bool debiased = true);
  ~DivergenceObjective() override;

  std::int64_t num_parameters() const override;
  /// A solve at x; false when it ends in a numerical failure or without converging (a value
  /// that is not certified is not one to compare steps on).
  bool evaluate(const double* x, double* value, double* gradient) override;
  /// H v at the last gradient point; false when the inner CG did not converge.
  bool hessian_vector(const double* v, double* out) override;
  /// Keeps x's potentials as the warm start of later solves.
  void accepted(const double* x) override;

  std::int64_t sinkhorn_iterations() const { return sinkhorn_iterations_; }  ///< all solves
  std::int64_t solves() const { return solves_; }
  std::int64_t hvp_cg_iterations() const { return hvp_cg_iterations_; }
  /// The Summary of the last solve (the xy problem's for the divergence).
  const SinkhornSummary& last_solve() const { return last_; }

 private:
  struct Point;
  std::unique_ptr<Point> solve_at(const double* x, double* value);

  const Context* ctx_;
  Problem<T> problem_;
  SinkhornOptions sinkhorn_;
  HvpOptions hvp_;
  bool debiased_;
  std::int64_t n_ = 0, d_ = 0;
  std::unique_ptr<Point> grad_point_;   // the last point evaluated with a gradient
  std::unique_ptr<Point> value_point_;  // the last point evaluated without one (a trial)
  double value_point_value_ = 0;
  std::unique_ptr<DivergencePotentials<T>> warm_;  // the last accepted point's potentials
  std::int64_t sinkhorn_iterations_ = 0, solves_ = 0, hvp_cg_iterations_ = 0;
  SinkhornSummary last_;
};

}  // namespace kantor
