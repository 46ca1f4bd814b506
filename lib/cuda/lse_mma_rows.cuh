// Pieces shared by the tensor-core LSE kernels (tf32 and bf16): the mma.sync wrappers, cp.async,
// and the per-thread online (max, sum). The m16n8 accumulator layout gives each thread 2 rows of
// each 16-row m-tile: rows g (values acc[mt][nt][0..1]) and g + 8 (values acc[mt][nt][2..3]); the 4
// threads of a quad own the same rows and merge once at the end, so the inner loop has no shuffles.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "lib/cuda/lse_common.cuh"
#include "lib/cuda/lse_params.hpp"

namespace kantor::cuda {

/// D = A B + C, m16n8k8, A row-major TF32 (4 regs), B col-major TF32 (2 regs), C/D fp32.
__device__ __forceinline__ void mma_tf32(float (&d)[4], const std::uint32_t (&a)[4],
                                         std::uint32_t b0, std::uint32_t b1, float c0, float c1,
                                         float c2, float c3) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c0), "f"(c1), "f"(c2),
        "f"(c3));
}

/// D = A B + C, m16n8k16, A row-major bf16 (4 regs of bf16x2), B col-major bf16 (2 regs),
/// C/D fp32.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const std::uint32_t (&a)[4],
                                         std::uint32_t b0, std::uint32_t b1, float c0, float c1,
                                         float c2, float c3) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c0), "f"(c1), "f"(c2),
        "f"(c3));
}

/// float -> TF32 (cvt.rna: round to nearest, ties away from zero; the 13 low bits of the result
/// are zero), for MMA operands formed in registers.
__device__ __forceinline__ std::uint32_t to_tf32(float x) {
  std::uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

/// 16-byte (4-byte) asynchronous copy global -> shared (sm_80+); src_size 0 writes zeros.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = unsigned(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, bool valid) {
  const unsigned s = unsigned(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem),
               "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

/// Folds one key tile of scores u (in registers) into the running (m, s) of the thread's rows:
///   M' = max(M, max_j u_j),  S' = S exp2(alpha (M - M')) + sum_j exp2(alpha (u_j - M')).
/// Branch-free: the rescale runs every time (one exp2 per row and tile, usually exp2(0) = 1), so
/// the compiler can interleave the fold with the tensor-core instructions of the next tile. Guards:
/// a maximum still -inf (all keys so far masked) uses offset 0, so the masked scores give
/// exp2(-inf) = 0 and nothing computes -inf - -inf; m == M' (both -inf included) scales by 1.
template <int kMT, int kNT>
__device__ __forceinline__ void fold_mma_tile(const float (&acc)[kMT][kNT][4], float alpha,
                                              float (&m)[kMT][2], float (&s)[kMT][2]) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float tmax = m[mt][h];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
        tmax = fmaxf(tmax, fmaxf(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]));
      const float nam = tmax == -INFINITY ? 0.f : -alpha * tmax;
      const float scale = m[mt][h] == tmax ? 1.f : fast_exp2(alpha * (m[mt][h] - tmax));
      float ts0 = 0.f, ts1 = 0.f;  // two chains: shorter dependency, fixed order
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        ts0 += fast_exp2(fmaf(alpha, acc[mt][nt][2 * h], nam));
        ts1 += fast_exp2(fmaf(alpha, acc[mt][nt][2 * h + 1], nam));
      }
      s[mt][h] = fmaf(s[mt][h], scale, ts0 + ts1);
      m[mt][h] = tmax;
    }
  }
}

/// Merges the quad's partial states (lanes 4g..4g+3 own the same rows) and writes the row's
/// (max, sum) partial of split blockIdx.y: part_max/part_sum[split * rows + i] (global) for the
/// rows i < row_end (default: sd.rows; a class-aligned tile ends earlier). `first_row` is the
/// first row of the warp's first m-tile.
template <int kMT>
__device__ __forceinline__ void write_mma_rows(float (&m)[kMT][2], float (&s)[kMT][2], float alpha,
                                               const LseSide<float>& sd, std::int64_t first_row,
                                               int g, int t, std::int64_t row_end = -1) {
  if (row_end < 0) row_end = sd.rows;
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
      if (t == 0 && i < row_end) {
        sd.part_max[std::int64_t(blockIdx.y) * sd.rows + i] = m[mt][h];
        sd.part_sum[std::int64_t(blockIdx.y) * sd.rows + i] = s[mt][h];
      }
    }
  }
}

}  // namespace kantor::cuda
