// LseGemm: cuBLAS TF32 score blocks + streaming row-LSE (lib/cuda/lse_gemm.hpp).
#include <cublas_v2.h>

#include <algorithm>
#include <string>

#include "lib/cuda/check.hpp"
#include "lib/cuda/lse_common.cuh"
#include "lib/cuda/lse_gemm.hpp"
#include "lib/cuda/lse_launch.hpp"

namespace kantor::cuda {
namespace {

void cublas_check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw CudaError(std::string("cuBLAS error ") + std::to_string(int(s)) + " in " + what);
}

/// Score workspace budget: 2^28 floats (1 GiB) per chunk of rows.
constexpr std::int64_t kScoreBudget = std::int64_t(1) << 28;

/// beta_j = (g_j - c|y~_j|^2 + eps log b_j) / (2c) for j < nkeys; -inf on the padding (masked).
__global__ void gemm_bias_kernel(LseSide<float> sd, float eps, float inv_2c, std::int64_t ld_s,
                                 float* beta) {
  const std::int64_t j = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= ld_s) return;
  beta[j] =
      j < sd.nkeys ? (sd.key_pot[j] - sd.key_norm[j] + eps * sd.key_logw[j]) * inv_2c : -INFINITY;
}

/// The label pair term of a chunk's rows (LabelAugmented): row r subtracts
/// pair[qlab[r] * classes + klab[j]] from u_j (the table c_w W in the shifted form's units, / 2c).
struct RowPair {
  const std::int32_t* qlab = nullptr;  ///< the chunk's query labels
  const std::int32_t* klab = nullptr;  ///< nkeys key labels
  const float* pair = nullptr;
  int classes = 0;
  std::int64_t nkeys = 0;
};

/// One warp per row r of the chunk: u_j = S_rj + beta_j (- the pair term) over all keys (16-byte
/// loads of S and beta from global), online (max, sum) per lane, merged across the warp; writes
/// the row's partial (split 0). kPair: the pair term, one gather from the row's table row per
/// score (the table and the key labels stay in L1 / L2: S is the only stream from memory).
template <bool kPair>
__global__ void __launch_bounds__(256)
    gemm_row_lse_kernel(const float* __restrict__ S, std::int64_t rows, std::int64_t ld_s,
                        const float* __restrict__ beta, float alpha, RowPair rp, float* part_max,
                        float* part_sum) {
  const std::int64_t r = std::int64_t(blockIdx.x) * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= rows) return;  // whole warps leave together
  const float4* srow = reinterpret_cast<const float4*>(S + r * ld_s);
  const float4* b4 = reinterpret_cast<const float4*>(beta);
  const float* prow = kPair ? rp.pair + std::int64_t(rp.qlab[r]) * rp.classes : nullptr;
  float m = -INFINITY, s = 0.f;
  for (std::int64_t q = lane; q < ld_s / 4; q += 32) {
    const float4 sv = srow[q], bv = b4[q];
    float u0 = sv.x + bv.x, u1 = sv.y + bv.y, u2 = sv.z + bv.z, u3 = sv.w + bv.w;
    if (kPair) {
      // Padding keys (j >= nkeys) have beta = -inf: no pair term needed there.
      const std::int64_t j = 4 * q;
      if (j + 0 < rp.nkeys) u0 -= prow[rp.klab[j + 0]];
      if (j + 1 < rp.nkeys) u1 -= prow[rp.klab[j + 1]];
      if (j + 2 < rp.nkeys) u2 -= prow[rp.klab[j + 2]];
      if (j + 3 < rp.nkeys) u3 -= prow[rp.klab[j + 3]];
    }
    const float tmax = fmaxf(fmaxf(u0, u1), fmaxf(u2, u3));
    if (tmax > m) {  // guard: tmax = -inf (all masked) never passes; m = -inf gives 0 * 0
      s *= fast_exp2(alpha * (m - tmax));
      m = tmax;
    }
    if (m != -INFINITY) {  // guard: no exp2(-inf - -inf)
      const float nam = -alpha * m;
      s += (fast_exp2(fmaf(alpha, u0, nam)) + fast_exp2(fmaf(alpha, u1, nam))) +
           (fast_exp2(fmaf(alpha, u2, nam)) + fast_exp2(fmaf(alpha, u3, nam)));
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
    merge_max_sum(m, s, m2, s2, alpha);
  }
  if (lane == 0) {
    part_max[r] = m;
    part_sum[r] = s;
  }
}

}  // namespace

LseGemm::LseGemm(void* stream, std::int64_t n, std::int64_t m, bool tf32)
    : stream_(stream), tf32_(tf32) {
  ld_scores_ = (std::max(n, m) + 3) / 4 * 4;  // 16-byte aligned rows of S
  chunk_rows_ = std::max<std::int64_t>(128, kScoreBudget / ld_scores_ / 128 * 128);
  chunk_rows_ = std::min(chunk_rows_, (std::max(n, m) + 127) / 128 * 128);
  // Guard: a failure part-way releases what was acquired (the destructor does not run).
  try {
    cublasHandle_t h;
    cublas_check(cublasCreate(&h), "cublasCreate");
    handle_ = h;
    cublas_check(cublasSetStream(h, static_cast<cudaStream_t>(stream)), "cublasSetStream");
    void* p = nullptr;
    KANTOR_CUDA_TRY(cudaMalloc(&p, sizeof(float) * std::size_t(chunk_rows_ * ld_scores_)));
    scores_ = static_cast<float*>(p);
    // Guard: the padding columns of S are never written by the GEMM; zeros there (finite) plus
    // beta = -inf stay -inf, where uninitialized NaN bits would poison the row sums.
    KANTOR_CUDA_TRY(cudaMemsetAsync(scores_, 0,
                                    sizeof(float) * std::size_t(chunk_rows_ * ld_scores_),
                                    static_cast<cudaStream_t>(stream)));
    KANTOR_CUDA_TRY(cudaMalloc(&p, sizeof(float) * std::size_t(ld_scores_)));
    beta_ = static_cast<float*>(p);
  } catch (...) {
    release();
    throw;
  }
}

void LseGemm::release() noexcept {
  // Queued passes may still use the workspace: finish the stream first.
  if (scores_ || beta_) cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  cudaFree(scores_);
  cudaFree(beta_);
  scores_ = beta_ = nullptr;
  if (handle_) cublasDestroy(static_cast<cublasHandle_t>(handle_));
  handle_ = nullptr;
}

LseGemm::~LseGemm() { release(); }

void LseGemm::side_partials(const LseSide<float>& sd, int ld, float eps, float cost_scale,
                            float alpha) {
  auto st = static_cast<cudaStream_t>(stream_);
  const std::int64_t ld_s = (sd.nkeys + 3) / 4 * 4;
  gemm_bias_kernel<<<unsigned((ld_s + 255) / 256), 256, 0, st>>>(sd, eps, 0.5f / cost_scale, ld_s,
                                                                 beta_);
  KANTOR_CUDA_CHECK_LAUNCH();
  const float one = 1.f, zero = 0.f;
  for (std::int64_t r0 = 0; r0 < sd.rows; r0 += chunk_rows_) {
    const std::int64_t rows = std::min(chunk_rows_, sd.rows - r0);
    // S (rows x nkeys, row stride ld_s) = X~[r0 : r0+rows] Y~^T; column-major view: S^T = Y~ X~^T.
    cublas_check(cublasGemmEx(static_cast<cublasHandle_t>(handle_), CUBLAS_OP_T, CUBLAS_OP_N,
                              int(sd.nkeys), int(rows), ld, &one, sd.keys, CUDA_R_32F, ld,
                              sd.queries + r0 * ld, CUDA_R_32F, ld, &zero, scores_, CUDA_R_32F,
                              int(ld_s), tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx (scores)");
    const unsigned grid = unsigned((rows + 7) / 8);
    if (sd.pair) {
      const RowPair rp{sd.query_labels + r0, sd.key_labels, sd.pair, sd.classes, sd.nkeys};
      gemm_row_lse_kernel<true><<<grid, 256, 0, st>>>(scores_, rows, ld_s, beta_, alpha, rp,
                                                       sd.part_max + r0, sd.part_sum + r0);
    } else {
      gemm_row_lse_kernel<false><<<grid, 256, 0, st>>>(scores_, rows, ld_s, beta_, alpha,
                                                        RowPair{}, sd.part_max + r0,
                                                        sd.part_sum + r0);
    }
    KANTOR_CUDA_CHECK_LAUNCH();
  }
}

void LseGemm::run(const LsePass<float>& p) {
  if (p.splits != 1) throw InvalidArgument("LseGemm::run: the GEMM path takes splits = 1");
  LsePass<float> q = p;
  q.alpha = float(2.0 * kLog2e * double(p.cost_scale) / double(p.eps));
  for (int s = 0; s < q.nsides; ++s) side_partials(q.side[s], q.ld, q.eps, q.cost_scale, q.alpha);
  finish_lse_pass(q, stream_);
}

}  // namespace kantor::cuda
