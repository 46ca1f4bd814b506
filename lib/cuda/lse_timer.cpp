#include "lib/cuda/lse_timer.hpp"

#include "lib/cuda/check.hpp"

namespace kantor::cuda {

LseEventTimer::LseEventTimer() {
  cudaEvent_t a, b;
  KANTOR_CUDA_TRY(cudaEventCreate(&a));
  KANTOR_CUDA_TRY(cudaEventCreate(&b));
  start_ = a;
  stop_ = b;
}
LseEventTimer::~LseEventTimer() {
  cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}
void LseEventTimer::start(void* stream) {
  KANTOR_CUDA_TRY(
      cudaEventRecord(static_cast<cudaEvent_t>(start_), static_cast<cudaStream_t>(stream)));
}
void LseEventTimer::stop(void* stream) {
  KANTOR_CUDA_TRY(
      cudaEventRecord(static_cast<cudaEvent_t>(stop_), static_cast<cudaStream_t>(stream)));
}
double LseEventTimer::elapsed_ms() const {
  KANTOR_CUDA_TRY(cudaEventSynchronize(static_cast<cudaEvent_t>(stop_)));
  float ms = 0;
  KANTOR_CUDA_TRY(
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), static_cast<cudaEvent_t>(stop_)));
  return double(ms);
}

}  // namespace kantor::cuda
