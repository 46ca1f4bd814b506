// The cuBLAS score-block path: scores of a block of query rows against all keys by one cuBLAS
// GEMM (S = X~ Y~^T into a workspace), then a streaming row-LSE over S with the key bias (and the
// label pair term, gathered per score). Used when the padded dimension is large enough that the
// GEMM's arithmetic intensity hides writing and re-reading S (rule and evidence:
// docs/cuda-engine.md sections 3 and 7). Four families run it: tf32 (the TF32-rounded clouds,
// tensor cores), gemm-fp32 (float32 SGEMM), gemm-3xtf32 (the oracle hands it split clouds of
// width 3 ld, x = hi + lo with hi TF32-rounded, x as [lo, hi, hi] and y as [hi, lo, hi], so that
// one TF32 GEMM sums lo.hi + hi.lo + hi.hi) and gemm-fp64 (DGEMM on double copies, double beta
// and maxima). Plain C++.
#pragma once

#include <cstdint>

#include "lib/cuda/lse_params.hpp"

namespace kantor::cuda {

/// The float64 operands of the gemm-fp64 family: per side of a pass (0: rows x, 1: rows y) the
/// queries and keys as double rows of stride ld (the float data, converted exactly), and the
/// keys' c|y|^2 in double.
struct GemmFp64Operands {
  const double* queries[2] = {nullptr, nullptr};
  const double* keys[2] = {nullptr, nullptr};
  const double* key_norms[2] = {nullptr, nullptr};
  int ld = 0;
};

/// A value pass on float64 score blocks (gemm-fp64): out_ik = sum_j P_ij V_jk for the rows of
/// one side, P_ij = w_i v_j exp((p_i + q_j - C_ij) / eps) (the exact value pass's kApply: w, p
/// the rows' weights and potential, v, q the keys'), and optionally the row masses sum_j P_ij.
/// Per chunk of rows: S = X Y^T (DGEMM), the row maxima M_i of u_ij = S_ij + beta_j (- the pair
/// term), S <- exp(alpha (u_ij - M_i)) in double (alpha = 2c / eps), W = S [V 1] (DGEMM), and
/// out_i = exp(r_i + alpha M_i) W_i with r_i = (p_i - c|x_i|^2) / eps + log w_i.
struct GemmValues {
  LseSide<float> side;        ///< rows, keys, key_pot (q), key_logw, pair term; pot = p (read)
  const float* query_logw = nullptr;
  const double* queries = nullptr;       ///< rows x ld64, double
  const double* keys = nullptr;          ///< nkeys x ld64, double
  const double* key_norms = nullptr;     ///< c|y_j|^2, double
  const double* query_norms = nullptr;   ///< c|x_i|^2, double
  int ld64 = 0;
  const float* values = nullptr;  ///< nkeys x vcols, row stride vstride
  std::int64_t vstride = 0;
  int vcols = 0;
  float* out = nullptr;  ///< rows x vcols, row stride ostride (may be null when vcols = 0)
  std::int64_t ostride = 0;
  float* row_mass = nullptr;  ///< rows, or null
  double eps = 1, cost_scale = 1;
};

/// Owns a cuBLAS handle bound to `stream`, the score workspace (rows_per_chunk x keys) and the
/// bias vector. Sized once for a problem with n and m points; run() allocates nothing. GEMM and
/// row-LSE run one after the other: overlapping them on two streams (two half-size workspaces)
/// was slower on the H200, 260.7 against 211.4 ms at 50k, d = 512 (docs/cuda-engine.md).
class LseGemm {
 public:
  /// How the score blocks are computed: kTf32 = TF32 tensor-core GEMMs
  /// (CUBLAS_COMPUTE_32F_FAST_TF32; the tf32 and 3xTF32 families), kFp32 = float32 GEMMs on the
  /// CUDA cores (CUBLAS_COMPUTE_32F; gemm-fp32), kFp64 = float64 GEMMs (DGEMM, the FP64 tensor
  /// cores on sm_90; gemm-fp64: double scores, beta and row maxima, float exponentials).
  enum class Scores { kTf32, kFp32, kFp64 };
  LseGemm(void* stream, std::int64_t n, std::int64_t m, Scores scores = Scores::kTf32);
  ~LseGemm();
  LseGemm(const LseGemm&) = delete;
  LseGemm& operator=(const LseGemm&) = delete;
  /// Same contract as run_lse_pass(LseKernel::kTf32, p, stream) with p.splits == 1. kFp64:
  /// `f64` gives the double operands of p's sides in order (p.side[k] is side `side_of[k]`).
  void run(const LsePass<float>& p, const GemmFp64Operands* f64 = nullptr,
           const int* side_of = nullptr);
  std::int64_t rows_per_chunk() const { return chunk_rows_; }
  /// The value pass above (kFp64 only); its extra workspace (the values and W in double, the
  /// row maxima) is grown on demand and kept.
  void values(const GemmValues& v);

 private:
  void side_partials(const LseSide<float>& sd, int ld, float eps, float cost_scale, float alpha,
                     const double* q64, const double* k64, const double* kn64, int ld64);
  void release() noexcept;
  void* stream_;
  void* handle_ = nullptr;
  void* scores_ = nullptr;  // chunk_rows_ x ld_scores_ floats (doubles on kFp64)
  void* beta_ = nullptr;    // ld_scores_ floats (doubles on kFp64)
  double* vwork_ = nullptr;  // values(): [V 1] (keys x (k+1)), W (chunk x (k+1)), row maxima
  std::int64_t vwork_size_ = 0;
  std::int64_t chunk_rows_ = 0, ld_scores_ = 0;
  Scores mode_ = Scores::kTf32;
};

}  // namespace kantor::cuda
