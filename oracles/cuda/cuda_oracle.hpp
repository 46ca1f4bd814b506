// The CUDA engine's point-cloud oracle (issue: CUDA engine). Declared for every build; defined
// only in CUDA builds (oracles/cuda/*.cu).
#pragma once

#include <memory>

#include "kantor/context.hpp"
#include "kantor/oracle.hpp"

namespace kantor {

template <class T>
std::unique_ptr<Oracle<T>> make_cuda_oracle(const Context& ctx, const Problem<T>& problem,
                                            Precision precision, KernelChoice kernel,
                                            bool clouds_checked = false);

}  // namespace kantor
