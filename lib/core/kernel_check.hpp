// The CPU engine's one kernel family: a check shared by the context (ContextOptions::kernel) and
// the oracle factory (make_oracle's own choice).
#pragma once

#include <string>

#include "kantor/error.hpp"
#include "kantor/types.hpp"

namespace kantor::detail {

/// Throws InvalidArgument naming `field` unless `k` is auto or exact (`note` is appended).
inline void require_cpu_kernel(KernelChoice k, const std::string& field,
                               const std::string& note = "") {
  if (k == KernelChoice::kAuto || k == KernelChoice::kExact) return;
  throw InvalidArgument(field + " = " + to_string(k) +
                        " is a CUDA kernel family, but the engine is the CPU's (its one family: "
                        "auto or exact)" + note);
}

}  // namespace kantor::detail
