// The over-relaxation factor of alternating Sinkhorn steps from an observed convergence rate,
// shared by the dense solver (solvers/sinkhorn.cpp) and the multiscale solver's levels
// (solvers/multiscale.cpp).
#pragma once

#include <algorithm>
#include <cmath>

namespace kantor::detail {

/// The optimal factor w* = 2 / (1 + sqrt(1 - rho)) for the plain iteration's rate rho per
/// iteration, where rho follows from the rate `lam` observed at factor `w` by the SOR relation
/// (lam + w - 1)^2 = w^2 rho lam (w = 1: rho = lam). Only meaningful for 0 < lam < 1 and a
/// factor below the optimum (lam > w - 1: above it the rate is w - 1 whatever rho).
inline double sor_optimal_factor(double lam, double w) {
  const double rho = w == 1.0 ? lam : std::min(1.0, (lam + w - 1) * (lam + w - 1) / (w * w * lam));
  return 2.0 / (1.0 + std::sqrt(std::max(0.0, 1.0 - rho)));
}

}  // namespace kantor::detail
