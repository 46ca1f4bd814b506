// KANTOR_CUDA_TRY: check every CUDA runtime call; KANTOR_CUDA_CHECK_LAUNCH after every launch.
// Include only from .cu files or .cpp files compiled with the CUDA toolkit's include path.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "kantor/error.hpp"

namespace kantor::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t e, const char* expr, const char* file,
                                          int line) {
  if (e == cudaErrorMemoryAllocation) {
    throw OutOfMemory(std::string("CUDA out of memory in ") + expr + " (" + file + ":" +
                      std::to_string(line) + ")");
  }
  throw CudaError(std::string("CUDA error '") + cudaGetErrorString(e) + "' in " + expr + " (" +
                  file + ":" + std::to_string(line) + ")");
}

}  // namespace kantor::cuda

#define KANTOR_CUDA_TRY(expr)                                                   \
  do {                                                                          \
    cudaError_t kantor_err_ = (expr);                                           \
    if (kantor_err_ != cudaSuccess)                                             \
      ::kantor::cuda::throw_cuda_error(kantor_err_, #expr, __FILE__, __LINE__); \
  } while (0)

#define KANTOR_CUDA_CHECK_LAUNCH() KANTOR_CUDA_TRY(cudaGetLastError())
