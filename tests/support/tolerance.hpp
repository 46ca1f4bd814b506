// Named tolerances of the test suites, all derived from the unit roundoff of the precision.
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>

namespace kantor::testing {

/// k units of roundoff of T: tol<double>(4500) ~ 1e-12, tol<float>(84) ~ 1e-5.
template <class T>
constexpr double tol(double k) {
  return k * double(std::numeric_limits<T>::epsilon());
}

/// Relative accuracy expected of one streaming pass compared with the float64 dense reference,
/// before conditioning: ~1e-12 (fp64) and ~1e-5 (fp32).
template <class T>
constexpr double pass_rtol() {
  return std::is_same<T, double>::value ? tol<double>(4500) : tol<float>(84);
}

/// Relative accuracy of quantities that go through exp(s/eps) with |s| up to `max_cost`: any
/// floating evaluation of exp(C/eps) carries a relative error of (C/eps) * roundoff, so the bound
/// grows like 1 + max_cost / eps (the conditioning of the plan entries).
template <class T>
double plan_rtol(double max_cost, double eps) {
  return pass_rtol<T>() * (1.0 + max_cost / eps);
}

/// Absolute accuracy of potentials (cost units): eps * (relative error of the scores) = roundoff
/// times the cost scale, independent of eps.
template <class T>
double potential_atol(double max_cost) {
  return pass_rtol<T>() * (1.0 + max_cost);
}

}  // namespace kantor::testing
