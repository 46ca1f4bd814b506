// Problem: two weighted point clouds and a ground cost (kantor/cost.hpp).
#pragma once

#include <limits>

#include "kantor/cost.hpp"
#include "kantor/view.hpp"

namespace kantor {

/// The entropic OT problem between weighted point clouds (docs/numerics.md, section 1).
/// Views may be host or device memory (the engine copies what it needs once, at setup).
///
///   kantor::Problem<double> p;
///   p.cost = kantor::SqEuclidean<double>{kantor::host_matrix(xs.data(), n, d),
///                                        kantor::host_matrix(ys.data(), m, d)};
///   p.epsilon = 0.05;                             // a, b left empty: uniform weights
template <class T>
struct Problem {
  Cost<T> cost;           ///< SqEuclidean (the default) or LabelAugmented
  VectorView<const T> a;  ///< source weights (n, >= 0); an empty view means uniform 1/n
  VectorView<const T> b;  ///< target weights (m, >= 0); an empty view means uniform 1/m
  double epsilon = 0.1;   ///< target entropic regularization, in cost units, > 0
  /// KL-relaxed marginals (unbalanced OT, docs/numerics.md section 9): the penalties rho_a
  /// KL(P 1 | a) and rho_b KL(P^T 1 | b) replace the constraints P 1 = a and P^T 1 = b, in cost
  /// units, > 0. Infinity (the default) keeps that side strict; one finite side is
  /// semi-unbalanced. With either finite the weights are used as given (not normalized to mass
  /// 1; empty views are still uniform 1/n and 1/m) and need not have equal totals.
  double rho_a = std::numeric_limits<double>::infinity();
  double rho_b = std::numeric_limits<double>::infinity();
  /// Optional: the float64 coordinates the features x and y were rounded from (same shapes, host
  /// or device memory). The certificate (SinkhornSummary::marginal_error) is then evaluated on
  /// these, the caller's own points, instead of on x and y. Empty views: the certificate uses x
  /// and y as given. (The CLI passes the file's coordinates here when it solves in float32.)
  MatrixView<const double> reference_x;
  MatrixView<const double> reference_y;

  /// The squared-Euclidean part of the cost: features().x, features().y, features().scale.
  const SqEuclidean<T>& features() const { return kantor::features<T>(cost); }
  SqEuclidean<T>& features() { return kantor::features<T>(cost); }
  /// True when a marginal is relaxed (rho_a or rho_b finite).
  bool unbalanced() const { return rho_a < std::numeric_limits<double>::infinity() ||
                                   rho_b < std::numeric_limits<double>::infinity(); }
  /// The label term, or null for a SqEuclidean cost.
  const LabelAugmented<T>* labels() const { return std::get_if<LabelAugmented<T>>(&cost); }
};

/// Throws InvalidArgument naming the first problem found: empty clouds, dimension mismatch,
/// stride < cols, non-finite coordinates or weights, negative weights, zero total mass, total
/// masses differing by more than 1e-6 relative (balanced problems only), rho_a or rho_b NaN or
/// <= 0, a cost scale <= 0 or non-finite, epsilon <= 0 or
/// non-finite, reference coordinates given for one side only or of another shape than x / y,
/// non-finite; for LabelAugmented: label vectors of the wrong length, labels outside [0, L), a
/// table that is not L x L, empty, non-finite or negative entries, table_scale < 0 or
/// non-finite. Host data is checked element by element; device data is checked for shapes only
/// here (the engines copy device-resident inputs to the host once at setup, after all device
/// work has finished, and check them element by element there).
template <class T>
void validate(const Problem<T>& problem);

namespace detail {
/// validate(problem) without the element-by-element scan of the coordinates (x, y and the
/// reference clouds; their shapes, the weights and the scalars are checked): for problems the
/// library builds from one it validated (the multiscale solver's Morton-sorted points, its coarse
/// cells and lifts), whose coordinates are the caller's, permuted, or weighted means of them.
template <class T>
void validate_clouds_checked(const Problem<T>& problem);
}  // namespace detail

}  // namespace kantor
