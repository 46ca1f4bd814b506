// Problem: two weighted point clouds and the squared-Euclidean cost C_ij = c |x_i - y_j|^2.
#pragma once

#include "kantor/view.hpp"

namespace kantor {

/// The entropic OT problem between point clouds (docs/numerics.md, section 1).
/// Views may be host or device memory (the engine copies what it needs once, at setup).
///
///   kantor::Problem<double> p;
///   p.x = kantor::host_matrix(xs.data(), n, d);  p.y = kantor::host_matrix(ys.data(), m, d);
///   p.epsilon = 0.05;                             // a, b left empty: uniform weights
template <class T>
struct Problem {
  MatrixView<const T> x;  ///< source points, n x d
  MatrixView<const T> y;  ///< target points, m x d
  VectorView<const T> a;  ///< source weights (n, >= 0); an empty view means uniform 1/n
  VectorView<const T> b;  ///< target weights (m, >= 0); an empty view means uniform 1/m
  double cost_scale = 1.0;  ///< c > 0 in C = c |x - y|^2
  double epsilon = 0.1;     ///< target entropic regularization, in cost units, > 0
  /// Optional: the float64 coordinates x and y were rounded from (same shapes, host or device
  /// memory). The certificate (SinkhornSummary::marginal_error) is then evaluated on these, the
  /// caller's own points, instead of on x and y. Empty views: the certificate uses x and y as
  /// given. (The CLI passes the file's coordinates here when it solves in float32.)
  MatrixView<const double> reference_x;
  MatrixView<const double> reference_y;
};

/// Throws InvalidArgument naming the first problem found: empty clouds, dimension mismatch,
/// stride < cols, non-finite coordinates or weights, negative weights, zero total mass, total
/// masses differing by more than 1e-6 relative, cost_scale <= 0, epsilon <= 0 or non-finite,
/// reference coordinates given for one side only or of another shape than x / y, non-finite.
/// Host data is checked element by element; device data is checked for shapes only here (the
/// engines copy device-resident inputs to the host once at setup, after all device work has
/// finished, and check them element by element there).
template <class T>
void validate(const Problem<T>& problem);

}  // namespace kantor
