// run_lse_pass: LSE kernel (CUDA cores or TF32) + finalize (+ error reduction); split-K choice;
// dual value. All asynchronous on the given stream.
#include <algorithm>

#include "lib/cuda/check.hpp"
#include "lib/cuda/lse_finalize.cuh"
#include "lib/cuda/lse_launch.hpp"

namespace kantor::cuda {

int lse_block_rows(LseKernel kernel) {
  return kernel == LseKernel::kTf32 ? tf32_block_rows() : simt_block_rows();
}

int choose_splits(LseKernel kernel, std::int64_t rows_total, std::int64_t nkeys, int sm_count) {
  // Split the key range until the grid has about kBlocksPerSm blocks per SM (a few resident
  // blocks per SM, so the last wave's tail is short), keeping >= kMinKeysPerSplit keys per split
  // so that the partials' write + merge stays small next to the scan.
  constexpr int kBlocksPerSm = 6;
  constexpr std::int64_t kMinKeysPerSplit = 512;
  constexpr int kMaxSplits = 64;
  const std::int64_t rb = (rows_total + lse_block_rows(kernel) - 1) / lse_block_rows(kernel);
  const std::int64_t target = std::int64_t(kBlocksPerSm) * std::max(sm_count, 1);
  if (rb >= target) return 1;
  std::int64_t s = (target + rb - 1) / rb;
  s = std::min<std::int64_t>(s, std::max<std::int64_t>(1, nkeys / kMinKeysPerSplit));
  return int(std::max<std::int64_t>(1, std::min<std::int64_t>(s, kMaxSplits)));
}

int finalize_blocks(std::int64_t rows_total) {
  return int((rows_total + kFinalizeThreads - 1) / kFinalizeThreads);
}

int current_sm_count() {
  static int cached_device = -1, cached = 0;
  int dev = 0;
  KANTOR_CUDA_TRY(cudaGetDevice(&dev));
  if (dev != cached_device) {
    KANTOR_CUDA_TRY(cudaDeviceGetAttribute(&cached, cudaDevAttrMultiProcessorCount, dev));
    cached_device = dev;
  }
  return cached;
}

namespace {

template <class T>
void finish_pass(const LsePass<T>& p, cudaStream_t st) {
  const std::int64_t rows = p.side[0].rows + (p.nsides > 1 ? p.side[1].rows : 0);
  const int blocks = finalize_blocks(rows);
  lse_finalize_kernel<T><<<blocks, kFinalizeThreads, 0, st>>>(p);
  KANTOR_CUDA_CHECK_LAUNCH();
  if (p.err) {
    reduce_partials_kernel<<<1, 256, 0, st>>>(p.err_partials, blocks, 1, p.err);
    KANTOR_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void run_lse_pass(LseKernel kernel, const LsePass<float>& p, void* stream) {
  LsePass<float> q = p;
  const double a = (kernel == LseKernel::kTf32 ? 2.0 : 1.0) * kLog2e * double(p.cost_scale) /
                   double(p.eps);
  q.alpha = float(a);
  if (kernel == LseKernel::kTf32)
    launch_lse_tf32(q, stream);
  else
    launch_lse_simt(q, stream);
  finish_pass(q, static_cast<cudaStream_t>(stream));
}

void run_lse_pass(LseKernel kernel, const LsePass<double>& p, void* stream) {
  if (kernel != LseKernel::kSimt)
    throw InvalidArgument("the tensor-core LSE kernels take float data only");
  LsePass<double> q = p;
  q.alpha = kLog2e * p.cost_scale / p.eps;
  launch_lse_simt(q, stream);
  finish_pass(q, static_cast<cudaStream_t>(stream));
}

void run_dual_value(const float* a, const float* f, std::int64_t n, const float* b,
                    const float* g, std::int64_t m, double* out, void* stream) {
  dual_value_kernel<float><<<1, 1024, 0, static_cast<cudaStream_t>(stream)>>>(a, f, n, b, g, m,
                                                                             out);
  KANTOR_CUDA_CHECK_LAUNCH();
}
void run_dual_value(const double* a, const double* f, std::int64_t n, const double* b,
                    const double* g, std::int64_t m, double* out, void* stream) {
  dual_value_kernel<double><<<1, 1024, 0, static_cast<cudaStream_t>(stream)>>>(a, f, n, b, g,
                                                                              m, out);
  KANTOR_CUDA_CHECK_LAUNCH();
}

}  // namespace kantor::cuda
