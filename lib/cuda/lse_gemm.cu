// LseGemm: cuBLAS score blocks + streaming row-LSE (lib/cuda/lse_gemm.hpp).
#include <cublas_v2.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "lib/cuda/check.hpp"
#include "lib/cuda/lse_common.cuh"
#include "lib/cuda/cublas_check.hpp"
#include "lib/cuda/lse_gemm.hpp"
#include "lib/cuda/lse_launch.hpp"

namespace kantor::cuda {
namespace {

/// Score workspace budget: 1 GiB per chunk of rows (2^28 floats, 2^27 doubles).
constexpr std::int64_t kScoreBudgetBytes = std::int64_t(1) << 30;

/// beta_j = (g_j - c|y~_j|^2 + eps log b_j) / (2c) for j < nkeys; -inf on the padding (masked).
/// B = double (gemm-fp64): the same in double, with the keys' norms in double (norm64).
template <class B>
__global__ void gemm_bias_kernel(LseSide<float> sd, B eps, B inv_2c, std::int64_t ld_s,
                                 const double* norm64, B* beta) {
  const std::int64_t j = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= ld_s) return;
  const B norm = j < sd.nkeys ? (norm64 ? B(norm64[j]) : B(sd.key_norm[j])) : B(0);
  beta[j] = j < sd.nkeys ? (B(sd.key_pot[j]) - norm + eps * B(sd.key_logw[j])) * inv_2c
                         : B(-INFINITY);
}

/// Four consecutive entries q*4 .. q*4+3 of a 16-byte aligned row.
__device__ __forceinline__ void load4(const float* p, std::int64_t q, float u[4]) {
  const float4 v = reinterpret_cast<const float4*>(p)[q];
  u[0] = v.x, u[1] = v.y, u[2] = v.z, u[3] = v.w;
}
__device__ __forceinline__ void load4(const double* p, std::int64_t q, double u[4]) {
  const double2 a = reinterpret_cast<const double2*>(p)[2 * q];
  const double2 b = reinterpret_cast<const double2*>(p)[2 * q + 1];
  u[0] = a.x, u[1] = a.y, u[2] = b.x, u[3] = b.y;
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
///
/// ST = double (gemm-fp64): S, beta, u and the running maximum in double (u_ij - m is exact
/// enough however large u is), each exponent rounded to float once; the row maximum is written
/// as a float and the sum rescaled by the exact difference, so (m, s) stay consistent.
template <bool kPair, class ST>
__global__ void __launch_bounds__(256)
    gemm_row_lse_kernel(const ST* __restrict__ S, std::int64_t rows, std::int64_t ld_s,
                        const ST* __restrict__ beta, float alpha, RowPair rp, float* part_max,
                        float* part_sum) {
  constexpr bool kF64 = std::is_same<ST, double>::value;
  const std::int64_t r = std::int64_t(blockIdx.x) * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= rows) return;  // whole warps leave together
  const ST* srow = S + r * ld_s;
  const float* prow = kPair ? rp.pair + std::int64_t(rp.qlab[r]) * rp.classes : nullptr;
  const ST a = ST(alpha);
  ST m = -INFINITY;
  float s = 0.f;
  for (std::int64_t q = lane; q < ld_s / 4; q += 32) {
    ST u[4], bv[4];
    load4(srow, q, u);
    load4(beta, q, bv);
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      u[t] += bv[t];
      // Padding keys (j >= nkeys) have beta = -inf: no pair term needed there.
      if (kPair && 4 * q + t < rp.nkeys) u[t] -= ST(prow[rp.klab[4 * q + t]]);
    }
    const ST tmax = fmax(fmax(u[0], u[1]), fmax(u[2], u[3]));
    if (tmax > m) {  // guard: tmax = -inf (all masked) never passes; m = -inf gives 0 * 0
      s *= fast_exp2(float(a * (m - tmax)));
      m = tmax;
    }
    if (m != ST(-INFINITY)) {  // guard: no exp2(-inf - -inf)
      if constexpr (kF64) {
        s += (fast_exp2(float(a * (u[0] - m))) + fast_exp2(float(a * (u[1] - m)))) +
             (fast_exp2(float(a * (u[2] - m))) + fast_exp2(float(a * (u[3] - m))));
      } else {
        const float nam = -alpha * m;
        s += (fast_exp2(fmaf(alpha, u[0], nam)) + fast_exp2(fmaf(alpha, u[1], nam))) +
             (fast_exp2(fmaf(alpha, u[2], nam)) + fast_exp2(fmaf(alpha, u[3], nam)));
      }
    }
  }
  if constexpr (kF64) {
    for (int o = 16; o > 0; o >>= 1) {
      const double m2 = __shfl_xor_sync(0xffffffffu, m, o);
      const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
      const double mm = fmax(m, m2);
      if (mm != -INFINITY)  // guard: both empty stays (-inf, 0)
        s = s * fast_exp2(float(a * (m - mm))) + s2 * fast_exp2(float(a * (m2 - mm)));
      m = mm;
    }
  } else {
    for (int o = 16; o > 0; o >>= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
      const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
      merge_max_sum(m, s, m2, s2, alpha);
    }
  }
  if (lane == 0) {
    const float mf = float(m);
    if (kF64 && m != -INFINITY) s *= fast_exp2(float(a * (m - ST(mf))));
    part_max[r] = mf;
    part_sum[r] = s;
  }
}

}  // namespace

LseGemm::LseGemm(void* stream, std::int64_t n, std::int64_t m, Scores scores)
    : stream_(stream), mode_(scores) {
  const std::size_t elem = mode_ == Scores::kFp64 ? sizeof(double) : sizeof(float);
  ld_scores_ = (std::max(n, m) + 3) / 4 * 4;  // 16-byte aligned rows of S (4 entries)
  chunk_rows_ =
      std::max<std::int64_t>(128, kScoreBudgetBytes / std::int64_t(elem) / ld_scores_ / 128 * 128);
  chunk_rows_ = std::min(chunk_rows_, (std::max(n, m) + 127) / 128 * 128);
  // Guard: a failure part-way releases what was acquired (the destructor does not run).
  try {
    cublasHandle_t h;
    cublas_check(cublasCreate(&h), "cublasCreate");
    handle_ = h;
    cublas_check(cublasSetStream(h, static_cast<cudaStream_t>(stream)), "cublasSetStream");
    void* p = nullptr;
    KANTOR_CUDA_TRY(cudaMalloc(&p, elem * std::size_t(chunk_rows_ * ld_scores_)));
    scores_ = p;
    // Guard: the padding columns of S are never written by the GEMM; zeros there (finite) plus
    // beta = -inf stay -inf, where uninitialized NaN bits would poison the row sums.
    KANTOR_CUDA_TRY(cudaMemsetAsync(scores_, 0, elem * std::size_t(chunk_rows_ * ld_scores_),
                                    static_cast<cudaStream_t>(stream)));
    KANTOR_CUDA_TRY(cudaMalloc(&p, elem * std::size_t(ld_scores_)));
    beta_ = p;
  } catch (...) {
    release();
    throw;
  }
}

void LseGemm::release() noexcept {
  // Queued passes may still use the workspace: finish the stream first.
  if (scores_ || beta_ || vwork_) cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  cudaFree(scores_);
  cudaFree(beta_);
  cudaFree(vwork_);
  scores_ = beta_ = nullptr;
  vwork_ = nullptr;
  vwork_size_ = 0;
  if (handle_) cublasDestroy(static_cast<cublasHandle_t>(handle_));
  handle_ = nullptr;
}

LseGemm::~LseGemm() { release(); }

namespace {

/// The row-LSE of a chunk over its score block (float or double scores).
template <class ST>
void row_lse(const LseSide<float>& sd, const ST* S, std::int64_t r0, std::int64_t rows,
             std::int64_t ld_s, const ST* beta, float alpha, cudaStream_t st) {
  const unsigned grid = unsigned((rows + 7) / 8);
  if (sd.pair) {
    const RowPair rp{sd.query_labels + r0, sd.key_labels, sd.pair, sd.classes, sd.nkeys};
    gemm_row_lse_kernel<true, ST><<<grid, 256, 0, st>>>(S, rows, ld_s, beta, alpha, rp,
                                                         sd.part_max + r0, sd.part_sum + r0);
  } else {
    gemm_row_lse_kernel<false, ST><<<grid, 256, 0, st>>>(S, rows, ld_s, beta, alpha, RowPair{},
                                                          sd.part_max + r0, sd.part_sum + r0);
  }
  KANTOR_CUDA_CHECK_LAUNCH();
}

}  // namespace

void LseGemm::side_partials(const LseSide<float>& sd, int ld, float eps, float cost_scale,
                            float alpha, const double* q64, const double* k64, const double* kn64,
                            int ld64) {
  auto st = static_cast<cudaStream_t>(stream_);
  auto h = static_cast<cublasHandle_t>(handle_);
  const std::int64_t ld_s = (sd.nkeys + 3) / 4 * 4;
  const unsigned bias_grid = unsigned((ld_s + 255) / 256);
  if (mode_ == Scores::kFp64) {
    gemm_bias_kernel<double><<<bias_grid, 256, 0, st>>>(
        sd, double(eps), 0.5 / double(cost_scale), ld_s, kn64, static_cast<double*>(beta_));
  } else {
    gemm_bias_kernel<float><<<bias_grid, 256, 0, st>>>(sd, eps, 0.5f / cost_scale, ld_s, nullptr,
                                                       static_cast<float*>(beta_));
  }
  KANTOR_CUDA_CHECK_LAUNCH();
  for (std::int64_t r0 = 0; r0 < sd.rows; r0 += chunk_rows_) {
    const std::int64_t rows = std::min(chunk_rows_, sd.rows - r0);
    // S (rows x nkeys, row stride ld_s) = X~[r0 : r0+rows] Y~^T; column-major view: S^T = Y~ X~^T.
    if (mode_ == Scores::kFp64) {
      const double one = 1.0, zero = 0.0;
      cublas_check(cublasDgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, int(sd.nkeys), int(rows), ld64, &one,
                               k64, ld64, q64 + r0 * ld64, ld64, &zero,
                               static_cast<double*>(scores_), int(ld_s)),
                   "cublasDgemm (scores)");
      row_lse(sd, static_cast<const double*>(scores_), r0, rows, ld_s,
              static_cast<const double*>(beta_), alpha, st);
    } else {
      const float one = 1.f, zero = 0.f;
      cublas_check(
          cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(sd.nkeys), int(rows), ld, &one, sd.keys,
                       CUDA_R_32F, ld, sd.queries + r0 * ld, CUDA_R_32F, ld, &zero, scores_,
                       CUDA_R_32F, int(ld_s),
                       mode_ == Scores::kTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx (scores)");
      row_lse(sd, static_cast<const float*>(scores_), r0, rows, ld_s,
              static_cast<const float*>(beta_), alpha, st);
    }
  }
}

namespace {

/// [V 1] in double: keys x (k + 1), column k all ones (the row masses); padding keys (up to
/// ld_s) zero.
__global__ void values_to_double_kernel(const float* __restrict__ V, std::int64_t vstride, int k,
                                        std::int64_t nkeys, std::int64_t ld_s,
                                        double* __restrict__ V64) {
  const std::int64_t idx = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t w = k + 1;
  if (idx >= ld_s * w) return;
  const std::int64_t j = idx / w;
  const int c = int(idx - j * w);
  V64[idx] = j >= nkeys ? 0.0 : (c == k ? 1.0 : double(V[j * vstride + c]));
}

/// One warp per row of the chunk: M = max_j u_j (u_j = S_j + beta_j - pair), then S_j <-
/// exp(alpha (u_j - M)) in double (0 on masked keys: beta = -inf), M to maxima[r] (-inf for a
/// row without keys).
template <bool kPair>
__global__ void __launch_bounds__(256)
    values_exp_kernel(double* __restrict__ S, std::int64_t rows, std::int64_t ld_s,
                      std::int64_t nkeys, const double* __restrict__ beta, double alpha, RowPair rp,
                      double* __restrict__ maxima) {
  const std::int64_t r = std::int64_t(blockIdx.x) * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= rows) return;
  double* srow = S + r * ld_s;
  const float* prow = kPair ? rp.pair + std::int64_t(rp.qlab[r]) * rp.classes : nullptr;
  auto u_of = [&](std::int64_t j) {
    if (j >= nkeys) return double(-INFINITY);  // padding: never read (stale entries)
    double u = srow[j] + beta[j];
    if (kPair && j < rp.nkeys) u -= double(prow[rp.klab[j]]);
    return u;
  };
  double m = -INFINITY;
  for (std::int64_t j = lane; j < ld_s; j += 32) m = fmax(m, u_of(j));
  for (int o = 16; o > 0; o >>= 1) m = fmax(m, __shfl_xor_sync(0xffffffffu, m, o));
  for (std::int64_t j = lane; j < ld_s; j += 32) {
    const double u = u_of(j);
    // Padding keys (beta = -inf) and masked ones are written 0 explicitly: the padding columns
    // hold whatever an earlier pass of another row stride left there.
    srow[j] = (m == -INFINITY || u == -INFINITY) ? 0.0 : exp(alpha * (u - m));
  }
  if (lane == 0) maxima[r] = m;
}

/// out_ik = exp(r_i + alpha M_i) W_ik, row_mass_i = the same of W's last column.
__global__ void values_scale_kernel(const double* __restrict__ W, int k, std::int64_t rows,
                                    const double* __restrict__ maxima, double alpha,
                                    const float* __restrict__ pot, const double* __restrict__ qn,
                                    const float* __restrict__ logw, double inv_eps, float* out,
                                    std::int64_t ostride, float* row_mass) {
  const std::int64_t idx = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t w = k + 1;
  if (idx >= rows * w) return;
  const std::int64_t i = idx / w;
  const int c = int(idx - i * w);
  const double m = maxima[i];
  const double lw = double(logw[i]);
  double v = 0;
  if (m != -INFINITY && lw != -INFINITY)
    v = exp((double(pot[i]) - qn[i]) * inv_eps + lw + alpha * m) * W[idx];
  if (c < k)
    out[i * ostride + c] = float(v);
  else if (row_mass)
    row_mass[i] = float(v);
}

}  // namespace

void LseGemm::values(const GemmValues& v) {
  if (mode_ != Scores::kFp64)
    throw InvalidArgument("LseGemm::values: the value pass serves the float64 score blocks");
  const LseSide<float>& sd = v.side;
  auto st = static_cast<cudaStream_t>(stream_);
  auto h = static_cast<cublasHandle_t>(handle_);
  const std::int64_t ld_s = (sd.nkeys + 3) / 4 * 4;
  const int k = v.vcols;
  const std::int64_t w = k + 1;
  // Workspace: [V 1] (ld_s x w), W (chunk x w), maxima (chunk).
  const std::int64_t need = ld_s * w + chunk_rows_ * w + chunk_rows_;
  if (vwork_size_ < need) {
    cudaStreamSynchronize(st);  // the old workspace may still be read by queued work
    cudaFree(vwork_);
    vwork_ = nullptr;
    vwork_size_ = 0;
    void* p = nullptr;
    KANTOR_CUDA_TRY(cudaMalloc(&p, sizeof(double) * std::size_t(need)));
    vwork_ = static_cast<double*>(p);
    vwork_size_ = need;
  }
  double* V64 = vwork_;
  double* W = vwork_ + ld_s * w;
  double* maxima = W + chunk_rows_ * w;
  values_to_double_kernel<<<unsigned((ld_s * w + 255) / 256), 256, 0, st>>>(
      v.values, v.vstride, k, sd.nkeys, ld_s, V64);
  KANTOR_CUDA_CHECK_LAUNCH();
  const double eps = v.eps, c = v.cost_scale;
  gemm_bias_kernel<double><<<unsigned((ld_s + 255) / 256), 256, 0, st>>>(
      sd, eps, 0.5 / c, ld_s, v.key_norms, static_cast<double*>(beta_));
  KANTOR_CUDA_CHECK_LAUNCH();
  const double alpha = 2.0 * c / eps;
  double* S = static_cast<double*>(scores_);
  for (std::int64_t r0 = 0; r0 < sd.rows; r0 += chunk_rows_) {
    const std::int64_t rows = std::min(chunk_rows_, sd.rows - r0);
    const double one = 1.0, zero = 0.0;
    cublas_check(cublasDgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, int(sd.nkeys), int(rows), v.ld64, &one,
                             v.keys, v.ld64, v.queries + r0 * v.ld64, v.ld64, &zero, S, int(ld_s)),
                 "cublasDgemm (value scores)");
    const unsigned grid = unsigned((rows + 7) / 8);
    if (sd.pair) {
      const RowPair rp{sd.query_labels + r0, sd.key_labels, sd.pair, sd.classes, sd.nkeys};
      values_exp_kernel<true><<<grid, 256, 0, st>>>(S, rows, ld_s, sd.nkeys,
                                                    static_cast<double*>(beta_), alpha, rp, maxima);
    } else {
      values_exp_kernel<false><<<grid, 256, 0, st>>>(S, rows, ld_s, sd.nkeys,
                                                     static_cast<double*>(beta_), alpha, RowPair{},
                                                     maxima);
    }
    KANTOR_CUDA_CHECK_LAUNCH();
    // W (rows x w, row-major) = S (rows x ld_s) [V 1] (ld_s x w); column-major: W^T = V1^T S^T.
    cublas_check(cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, int(w), int(rows), int(ld_s), &one, V64,
                             int(w), S, int(ld_s), &zero, W, int(w)),
                 "cublasDgemm (values)");
    values_scale_kernel<<<unsigned((rows * w + 255) / 256), 256, 0, st>>>(
        W, k, rows, maxima, alpha, sd.pot + r0, v.query_norms + r0, v.query_logw + r0, 1.0 / eps,
        v.out ? v.out + r0 * v.ostride : nullptr, v.ostride, v.row_mass ? v.row_mass + r0 : nullptr);
    KANTOR_CUDA_CHECK_LAUNCH();
  }
}

void LseGemm::run(const LsePass<float>& p, const GemmFp64Operands* f64, const int* side_of) {
  if (p.splits != 1) throw InvalidArgument("LseGemm::run: the GEMM path takes splits = 1");
  if (mode_ == Scores::kFp64 && (!f64 || !side_of))
    throw InvalidArgument("LseGemm::run: float64 scores need the double operands");
  LsePass<float> q = p;
  q.alpha = float(2.0 * kLog2e * double(p.cost_scale) / double(p.eps));
  for (int s = 0; s < q.nsides; ++s) {
    const int k = side_of ? side_of[s] : 0;
    side_partials(q.side[s], q.ld, q.eps, q.cost_scale, q.alpha,
                  f64 ? f64->queries[k] : nullptr, f64 ? f64->keys[k] : nullptr,
                  f64 ? f64->key_norms[k] : nullptr, f64 ? f64->ld : 0);
  }
  finish_lse_pass(q, stream_);
}

}  // namespace kantor::cuda
