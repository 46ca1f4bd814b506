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
class LseGemm {
 public:
  /// tf32: TF32 tensor-core GEMMs (CUBLAS_COMPUTE_32F_FAST_TF32; the tf32 and 3xTF32 families);
  /// else float32 GEMMs on the CUDA cores (CUBLAS_COMPUTE_32F; the gemm-fp32 family).
  LseGemm(void* stream, std::int64_t n, std::int64_t m, bool tf32 = true);
  ~LseGemm();
  LseGemm(const LseGemm&) = delete;
  LseGemm& operator=(const LseGemm&) = delete;
  /// Same contract as run_lse_pass(LseKernel::kTf32, p, stream) with p.splits == 1.
  void run(const LsePass<float>& p);
  std::int64_t rows_per_chunk() const { return chunk_rows_; }

 private:
  void side_partials(const LseSide<float>& sd, int ld, float eps, float cost_scale, float alpha);
  void release() noexcept;
  void* stream_;
  void* handle_ = nullptr;
  float* scores_ = nullptr;  // chunk_rows_ x ld_scores_
  float* beta_ = nullptr;    // ld_scores_
  std::int64_t chunk_rows_ = 0, ld_scores_ = 0;
  bool tf32_ = true;
};

}  // namespace kantor::cuda
