// The large-d TF32 path: scores of a block of query rows against all keys by a cuBLAS TF32 GEMM
// (S = X~ Y~^T into a workspace, tensor cores via wgmma on sm_90), then a streaming row-LSE over
// S with the key bias (and the label pair term, gathered per score). Used when the padded
// dimension is large enough that the GEMM's arithmetic intensity hides writing and re-reading S
// (rule and evidence: docs/cuda-engine.md). Two families run it: tf32 (the TF32-rounded clouds)
// and fp32 as 3xTF32, where the oracle hands it split clouds of width 3 ld, queries
// [hi, hi, lo] and keys [hi, lo, hi] with x = hi + lo (hi TF32-rounded), so that one TF32 GEMM
// sums hi.hi + hi.lo + lo.hi: the dot product to float32 accuracy (docs/numerics.md). Plain C++.
#pragma once

#include <cstdint>

#include "lib/cuda/lse_params.hpp"

namespace kantor::cuda {

/// Owns a cuBLAS handle bound to `stream`, the score workspace (rows_per_chunk x keys) and the
/// bias vector. Sized once for a problem with n and m points; run() allocates nothing. GEMM and
/// row-LSE run one after the other: overlapping them on two streams (two half-size workspaces)
/// was slower on the H200, 260.7 against 211.4 ms at 50k, d = 512 (docs/cuda-engine.md).
/// The float64 operands of the gemm-fp64 family: per side of a pass (0: rows x, 1: rows y) the
/// queries and keys as double rows of stride ld (the float data, converted exactly).
struct GemmFp64Operands {
  const double* queries[2] = {nullptr, nullptr};
  const double* keys[2] = {nullptr, nullptr};
  int ld = 0;
};

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

 private:
  void side_partials(const LseSide<float>& sd, int ld, float eps, float cost_scale, float alpha,
                     const double* q64, const double* k64, int ld64);
  void release() noexcept;
  void* stream_;
  void* handle_ = nullptr;
  void* scores_ = nullptr;  // chunk_rows_ x ld_scores_ floats (doubles on kFp64)
  void* beta_ = nullptr;    // ld_scores_ floats (doubles on kFp64)
  std::int64_t chunk_rows_ = 0, ld_scores_ = 0;
  Scores mode_ = Scores::kTf32;
};

}  // namespace kantor::cuda
