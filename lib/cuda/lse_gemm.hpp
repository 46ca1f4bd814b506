// The large-d TF32 path: scores of a block of query rows against all keys by a cuBLAS TF32 GEMM
// (S = X~ Y~^T into a workspace, tensor cores via wgmma on sm_90), then a streaming row-LSE over
// S with the key bias. Used when the padded dimension is large enough that the GEMM's arithmetic
// intensity hides writing and re-reading S (rule and evidence: docs/cuda-engine.md). Plain C++.
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
  LseGemm(void* stream, std::int64_t n, std::int64_t m);
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
};

}  // namespace kantor::cuda
