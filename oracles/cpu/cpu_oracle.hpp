// The CPU engine's point-cloud oracle (Eigen + the context's thread pool).
#pragma once

#include <memory>

#include "kantor/context.hpp"
#include "kantor/oracle.hpp"

namespace kantor {

/// Problem views must be host memory. T = double serves fp64, T = float serves fp32.
template <class T>
std::unique_ptr<Oracle<T>> make_cpu_oracle(const Context& ctx, const Problem<T>& problem,
                                           Precision precision, bool clouds_checked = false);

}  // namespace kantor
