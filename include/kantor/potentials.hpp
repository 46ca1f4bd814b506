// Potentials: owning dual vectors f (n) and g (m) in the context's memory space.
#pragma once

#include <vector>

#include "kantor/buffer.hpp"
#include "kantor/problem.hpp"

namespace kantor {

/// Dual potentials in the standard convention of docs/numerics.md: at the optimum
/// P_ij = a_i b_j exp((f_i + g_j - C_ij) / eps). (OTT-JAX uses the same f, g.) Empty potentials
/// mean "cold start"; potentials of the right sizes passed into a solve are a warm start.
template <class T>
struct Potentials {
  Buffer<T> f;
  Buffer<T> g;
  double epsilon = 0;  ///< the eps they were computed at (0 = unknown)

  bool empty() const { return f.empty() && g.empty(); }
};

/// Shifted potentials fh_i = f_i - c|x_i|^2, gh_j = g_j - c|y_j|^2 (the attention form of the
/// LSE update, docs/numerics.md section 2), returned on the host. Synchronizes.
template <class T>
void to_shifted(const Context& ctx, const Problem<T>& problem, const Potentials<T>& p,
                std::vector<T>* fh, std::vector<T>* gh);

}  // namespace kantor
