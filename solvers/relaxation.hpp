// The over-relaxation factor of alternating Sinkhorn steps from an observed convergence rate,
// and the key of a recorded relaxed step (Oracle::repeat), shared by the dense solver
// (solvers/sinkhorn.cpp) and the multiscale solver's levels (solvers/multiscale.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>

namespace kantor::detail {

/// The optimal factor w* = 2 / (1 + sqrt(1 - rho)) for the plain iteration's rate rho per
/// iteration, where rho follows from the rate `lam` observed at factor `w` by the SOR relation
/// (lam + w - 1)^2 = w^2 rho lam (w = 1: rho = lam). Only meaningful for 0 < lam < 1 and a
/// factor below the optimum (lam > w - 1: above it the rate is w - 1 whatever rho).
inline double sor_optimal_factor(double lam, double w) {
  const double rho = w == 1.0 ? lam : std::min(1.0, (lam + w - 1) * (lam + w - 1) / (w * w * lam));
  return 2.0 / (1.0 + std::sqrt(std::max(0.0, 1.0 - rho)));
}

/// Oracle::repeat's key for a step whose arguments depend on `values` (eps, factors) and
/// `pointers` (the buffers it reads and writes): an FNV-style digest of their bits.
inline std::uint64_t step_key(std::initializer_list<double> values,
                              std::initializer_list<const void*> pointers) {
  std::uint64_t key = 0;
  auto mix = [&key](std::uint64_t v) { key = (key ^ v) * 0x100000001b3ull; };
  for (const double v : values) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    mix(bits);
  }
  for (const void* p : pointers) mix(std::uint64_t(reinterpret_cast<std::uintptr_t>(p)));
  return key;
}

}  // namespace kantor::detail
