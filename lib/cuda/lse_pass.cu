// run_lse_pass: LSE kernel (CUDA cores, TF32 or bf16) + finalize (+ error reduction); split-K
// choice; dual value; the class key potentials of label-uniform row blocks. All asynchronous on
// the given stream.
#include <algorithm>

#include "lib/cuda/check.hpp"
#include "lib/cuda/lse_finalize.cuh"
#include "lib/cuda/lse_launch.hpp"

namespace kantor::cuda {

int lse_block_rows(LseKernel kernel, int ld) {
  switch (kernel) {
    case LseKernel::kTf32:
      return tf32_block_rows(ld);
    case LseKernel::kBf16:
      return bf16_block_rows(ld);
    default:
      return simt_block_rows();
  }
}

int choose_splits(LseKernel kernel, int ld, bool is_double, std::int64_t rows_total,
                  std::int64_t nkeys) {
  // Wave quantization rule: with `slots` = SMs x resident blocks per SM, a grid of B equal
  // blocks runs in ceil(B / slots) waves at efficiency B / (waves * slots). Take the smallest
  // split count within 2% of the best efficiency, keeping >= kMinKeysPerSplit keys per split so
  // that writing and merging the partials stays small next to the scan. (H200, 50k x 50k d = 3
  // TF32: 391 row blocks on 528 slots ran at 74% efficiency with 1 or 3 splits; 4 splits fill
  // 3 waves at 99%.)
  const int per_sm = kernel == LseKernel::kTf32       ? tf32_blocks_per_sm(ld)
                     : kernel == LseKernel::kBf16     ? bf16_blocks_per_sm(ld)
                     : kernel == LseKernel::kExpanded ? expanded_blocks_per_sm(ld)
                                                      : simt_blocks_per_sm(ld, is_double);
  const std::int64_t br = lse_block_rows(kernel, ld);
  return wave_splits(per_sm, (rows_total + br - 1) / br, nkeys);
}

int wave_splits(int blocks_per_sm, std::int64_t blocks, std::int64_t nkeys) {
  constexpr std::int64_t kMinKeysPerSplit = 512;
  constexpr int kMaxSplits = 64;
  const std::int64_t slots =
      std::int64_t(std::max(current_sm_count(), 1)) * std::max(blocks_per_sm, 1);
  const std::int64_t rb = std::max<std::int64_t>(blocks, 1);
  const int max_s =
      int(std::max<std::int64_t>(1, std::min<std::int64_t>(kMaxSplits, nkeys / kMinKeysPerSplit)));
  // A small pass, whose grid stays under one wave even at 512 keys per split, takes splits of
  // down to kMinKeysSmall keys, up to one wave: its time is one block's scan, not the slots'
  // throughput. (H100, twentieth session: 2,048 points a side ran 16 x 4 blocks of 512 keys,
  // 30 us a pass, on 132 SMs; the multiscale solver's coarsest level runs ~100 iterations of
  // two such passes.)
  constexpr std::int64_t kMinKeysSmall = 128;
  if (rb * max_s < slots) {
    const int small = int(std::min<std::int64_t>(
        {std::int64_t(kMaxSplits), nkeys / kMinKeysSmall, slots / rb}));
    if (small > max_s) return small;
  }
  auto efficiency = [&](int s) {
    const std::int64_t b = rb * s;
    const std::int64_t waves = (b + slots - 1) / slots;
    return double(b) / double(waves * slots);
  };
  double best = 0;
  for (int s = 1; s <= max_s; ++s) best = std::max(best, efficiency(s));
  for (int s = 1; s <= max_s; ++s)
    if (efficiency(s) >= best - 0.02) return s;
  return 1;
}

int class_tile_splits(LseKernel kernel, int ld, std::int64_t tiles, std::int64_t fixed_blocks,
                      int fixed_splits, std::int64_t nkeys) {
  // A wave model: a grid of B equal blocks at s splits runs ceil(B s / slots) waves of 1/s of a
  // block scan. The class tiles number a few more than the fixed ones (one extra tile per class
  // boundary), which can cost a whole wave: at 50k rows, d = 64 (3 blocks per SM, 396 slots on
  // the H200), 10 classes make 400 tiles against 391 fixed blocks, and one split ran 61.5 ms per
  // 10 iterations against 40.5 plain and 53.4 for the policy variant; the wave rule's split count
  // removes that. The policy variant costs 1.16-1.37x the plain kernel per block (50k, d = 3
  // and 64, 10 and 100 classes): the class tiles win unless they are more than kPolicyFactor
  // slower in this model.
  constexpr double kPolicyFactor = 1.15;
  if (kernel != LseKernel::kTf32 && kernel != LseKernel::kBf16) return 0;
  const int per_sm = kernel == LseKernel::kTf32 ? tf32_blocks_per_sm(ld) : bf16_blocks_per_sm(ld);
  const std::int64_t slots = std::int64_t(std::max(current_sm_count(), 1)) * std::max(per_sm, 1);
  auto scan_time = [&](std::int64_t blocks, int s) {
    return double((std::max<std::int64_t>(blocks, 1) * s + slots - 1) / slots) / double(s);
  };
  const int s = wave_splits(per_sm, tiles, nkeys);
  return scan_time(tiles, s) <= kPolicyFactor * scan_time(fixed_blocks, std::max(fixed_splits, 1))
             ? s
             : 0;
}

int finalize_blocks(std::int64_t rows_total) {
  return int((rows_total + kFinalizeThreads - 1) / kFinalizeThreads);
}

int current_sm_count() {
  // Per host thread (a Context is used by one thread; the current device is per thread).
  thread_local int cached_device = -1, cached = 0;
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
  // Shifted form (tf32, bf16): alpha = 2 log2(e) c / eps; exact form: log2(e) c / eps.
  const bool shifted = kernel == LseKernel::kTf32 || kernel == LseKernel::kBf16;
  const double a = (shifted ? 2.0 : 1.0) * kLog2e * double(p.cost_scale) / double(p.eps);
  q.alpha = float(a);
  if (kernel == LseKernel::kTf32)
    launch_lse_tf32(q, stream);
  else if (kernel == LseKernel::kBf16)
    launch_lse_bf16(q, stream);
  else if (kernel == LseKernel::kExpanded)
    launch_lse_expanded(q, stream);
  else
    launch_lse_simt(q, stream);
  finish_pass(q, static_cast<cudaStream_t>(stream));
}

void finish_lse_pass(const LsePass<float>& p, void* stream) {
  finish_pass(p, static_cast<cudaStream_t>(stream));
}

void run_lse_pass(LseKernel kernel, const LsePass<double>& p, void* stream) {
  if (kernel != LseKernel::kSimt)
    throw InvalidArgument("the tensor-core LSE kernels take float data only");
  LsePass<double> q = p;
  q.alpha = kLog2e * p.cost_scale / p.eps;
  launch_lse_simt(q, stream);
  finish_pass(q, static_cast<cudaStream_t>(stream));
}

void run_dual_value(const float* a, const float* f, std::int64_t n, const float* b, const float* g,
                    std::int64_t m, double rho_inv_a, double rho_inv_b, double* out, void* stream) {
  dual_value_kernel<float><<<1, 1024, 0, static_cast<cudaStream_t>(stream)>>>(
      a, f, n, b, g, m, rho_inv_a, rho_inv_b, out);
  KANTOR_CUDA_CHECK_LAUNCH();
}
void run_dual_value(const double* a, const double* f, std::int64_t n, const double* b,
                    const double* g, std::int64_t m, double rho_inv_a, double rho_inv_b,
                    double* out, void* stream) {
  dual_value_kernel<double><<<1, 1024, 0, static_cast<cudaStream_t>(stream)>>>(
      a, f, n, b, g, m, rho_inv_a, rho_inv_b, out);
  KANTOR_CUDA_CHECK_LAUNCH();
}

namespace {
// One thread per (slot, key): out[s nkeys + j] = key_pot[j] - pair[class(s), label(j)].
__global__ void class_key_potentials_kernel(const float* __restrict__ key_pot,
                                            const std::int32_t* __restrict__ key_labels,
                                            const double* __restrict__ pair, int classes,
                                            const std::int32_t* __restrict__ slot_class, int nslots,
                                            std::int64_t nkeys, float* out) {
  const std::int64_t idx = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= nkeys * nslots) return;
  const std::int64_t s = idx / nkeys, j = idx - s * nkeys;
  const double w = pair[std::int64_t(slot_class[s]) * classes + key_labels[j]];
  out[idx] = float(double(key_pot[j]) - w);
}
}  // namespace

void class_key_potentials(const float* key_pot, const std::int32_t* key_labels, const double* pair,
                          int classes, const std::int32_t* slot_class, int nslots,
                          std::int64_t nkeys, float* out, void* stream) {
  const std::int64_t total = nkeys * std::int64_t(nslots);
  if (total <= 0) return;
  constexpr int kThreads = 256;
  class_key_potentials_kernel<<<unsigned((total + kThreads - 1) / kThreads), kThreads, 0,
                                static_cast<cudaStream_t>(stream)>>>(
      key_pot, key_labels, pair, classes, slot_class, nslots, nkeys, out);
  KANTOR_CUDA_CHECK_LAUNCH();
}

}  // namespace kantor::cuda
