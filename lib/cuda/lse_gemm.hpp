// The large-d TF32 path: scores of a block of query rows against all keys by a cuBLAS TF32 GEMM
// (S = X~ Y~^T into a workspace, tensor cores via wgmma on sm_90), then a streaming row-LSE over
// S with the key bias, the two overlapped across row chunks. Used when the padded dimension is
// large enough that the GEMM's arithmetic intensity hides writing and re-reading S (rule and
// evidence: docs/cuda-engine.md). Plain C++.
#pragma once

#include <cstdint>

#include "lib/cuda/lse_params.hpp"

namespace kantor::cuda {

/// Owns a cuBLAS handle bound to `stream`, a second stream for the row-LSE kernels, two score
/// workspaces (rows_per_chunk x keys each), the bias vector and the events that order them.
/// Sized once for a problem with n and m points; run() allocates nothing. The GEMM of row chunk
/// c + 1 runs on `stream` while the row-LSE of chunk c reads the other workspace on the second
/// stream (the GEMM is compute-bound, the row-LSE bound by reading S from memory), and `stream`
/// waits for the last row-LSE before the finalize: callers see one stream-ordered pass.
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
  void* aux_ = nullptr;                      // stream of the row-LSE kernels
  void* handle_ = nullptr;                   // cublasHandle_t
  float* scores_[2] = {nullptr, nullptr};    // chunk_rows_ x ld_scores_ each
  float* beta_ = nullptr;                    // ld_scores_
  void* gemm_done_[2] = {nullptr, nullptr};  // S[b] written (recorded on stream_)
  void* lse_done_[2] = {nullptr, nullptr};   // S[b] read (recorded on aux_)
  void* ready_ = nullptr;                    // beta and the pass inputs ready (on stream_)
  std::int64_t chunk_rows_ = 0, ld_scores_ = 0;
};

}  // namespace kantor::cuda
