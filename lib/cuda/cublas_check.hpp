// cublas_check: the one check of a cuBLAS status for the CUDA engine's cuBLAS users (the
// score-block passes, the DGEMM certificate, the Bures table). CUDA translation units only.
#pragma once

#include <cublas_v2.h>

#include <string>

#include "kantor/error.hpp"

namespace kantor::cuda {

/// Throws CudaError naming `what` (the call and its caller) unless s is CUBLAS_STATUS_SUCCESS.
inline void cublas_check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw CudaError(std::string("cuBLAS error ") + std::to_string(int(s)) + " in " + what);
}

}  // namespace kantor::cuda
