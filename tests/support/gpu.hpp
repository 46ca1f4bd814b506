// have_gpu(): a CUDA build with a visible device; GPU suites (Cuda*) GTEST_SKIP otherwise.
#pragma once

#include "kantor/config.hpp"
#include "kantor/info.hpp"

namespace kantor::testing {

inline bool have_gpu() {
#if KANTOR_CUDA_ENABLED
  return !cuda_devices().empty();
#else
  return false;
#endif
}

}  // namespace kantor::testing
