// The per-thread online (max, sum) of the tensor-core LSE kernels (tf32 and bf16), shared by all
// of them. The m16n8 accumulator layout gives each thread 2 rows of each 16-row m-tile: rows g
// (values acc[mt][nt][0..1]) and g + 8 (values acc[mt][nt][2..3]); the 4 threads of a quad own
// the same rows and merge once at the end, so the inner loop has no shuffles.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "lib/cuda/lse_common.cuh"
#include "lib/cuda/lse_params.hpp"

namespace kantor::cuda {

/// Folds one key tile of scores u (in registers) into the running (m, s) of the thread's rows:
///   M' = max(M, max_j u_j),  S' = S exp2(alpha (M - M')) + sum_j exp2(alpha (u_j - M')).
/// The rescale runs only when the maximum grows.
template <int kMT, int kNT>
__device__ __forceinline__ void fold_mma_tile(const float (&acc)[kMT][kNT][4], float alpha,
                                              float (&m)[kMT][2], float (&s)[kMT][2]) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float tmax = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
        tmax = fmaxf(tmax, fmaxf(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]));
      if (tmax > m[mt][h]) {
        // Guard: m = -inf (first unmasked tile) gives exp2(-inf) = 0 times a zero sum.
        s[mt][h] *= fast_exp2(alpha * (m[mt][h] - tmax));
        m[mt][h] = tmax;
      }
      // Guard: m = -inf means every key so far was masked: add nothing (no -inf - -inf).
      if (m[mt][h] != -INFINITY) {
        const float nam = -alpha * m[mt][h];
        float ts = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
          ts += fast_exp2(fmaf(alpha, acc[mt][nt][2 * h], nam)) +
                fast_exp2(fmaf(alpha, acc[mt][nt][2 * h + 1], nam));
        s[mt][h] += ts;
      }
    }
  }
}

/// Merges the quad's partial states (lanes 4g..4g+3 own the same rows) and writes the row's
/// (max, sum) partial of split blockIdx.y: part_max/part_sum[split * rows + i] (global).
/// `first_row` is the first row of the warp's first m-tile.
template <int kMT>
__device__ __forceinline__ void write_mma_rows(float (&m)[kMT][2], float (&s)[kMT][2],
                                               float alpha, const LseSide<float>& sd,
                                               std::int64_t first_row, int g, int t) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int o = 1; o <= 2; o <<= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m[mt][h], o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s[mt][h], o);
        merge_max_sum(m[mt][h], s[mt][h], m2, s2, alpha);
      }
      const std::int64_t i = first_row + mt * 16 + g + 8 * h;
      if (t == 0 && i < sd.rows) {
        sd.part_max[std::int64_t(blockIdx.y) * sd.rows + i] = m[mt][h];
        sd.part_sum[std::int64_t(blockIdx.y) * sd.rows + i] = s[mt][h];
      }
    }
  }
}

}  // namespace kantor::cuda
