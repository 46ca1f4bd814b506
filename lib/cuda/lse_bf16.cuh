// Tensor-core streaming LSE kernel (bf16 precision): scores u_ij = beta_j + <x~_i, y~_j> by
// mma.sync m16n8k16 bf16 with fp32 accumulation, x~, y~ the bf16-rounded centred coordinates.
// Same structure as the resident-query TF32 kernel (lib/cuda/lse_tf32.cuh): 4 warps x 2 m-tiles
// = 128 query rows per block with their A fragments in registers for the whole pass, key tiles
// of 64 keys in shared memory, the key bias beta_j fed as the fp32 C operand, per-thread online
// (max, sum) in the exp2 domain, one quad merge at the end. Padded widths 16, 32, 64 only.
//
// Storage: each cloud row holds ld bf16 values as ld/2 32-bit words, word w = (element 2w in
// the low half, element 2w+1 in the high half), i.e. the little-endian bf16 array. In word
// units the m16n8k16 bf16 fragments index exactly like the m16n8k8 TF32 ones (PTX ISA, "Matrix
// Fragments for mma.m16n8k16 with floating point type"):
//   A (16x16 row-major, 4 regs): a0a1 = row g, cols 2t..2t+1     -> word 8kk + t of row g
//                                a2a3 = row g+8, same cols       -> word 8kk + t of row g+8
//                                a4a5 = row g, cols 2t+8..2t+9   -> word 8kk + t + 4 of row g
//                                a6a7 = row g+8, cols 2t+8..+9   -> word 8kk + t + 4 of row g+8
//   B (16x8 "col", 2 regs):      b0b1 = k 2t..2t+1, n = g        -> word 8kk + t of key g
//                                b2b3 = k 2t+8..2t+9, n = g      -> word 8kk + t + 4 of key g
//   C/D (fp32, 4 regs):          c0c1 = row g, cols 2t..2t+1; c2c3 = row g+8, same cols,
// with g = lane / 4 (groupID), t = lane % 4 (threadID_in_group), kk the 16-wide k-step.
// Conventions: lib/cuda/lse_params.hpp. Runs on sm_80 and sm_90.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "lib/cuda/lse_common.cuh"
#include "lib/cuda/lse_mma_rows.cuh"
#include "lib/cuda/lse_params.hpp"
#include "lib/cuda/lse_simt.cuh"

namespace kantor::cuda {

/// Tile of the bf16 kernel for padded width kD (bf16 values per row, = 16 kKSteps).
template <int kD>
struct Bf16Tile {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMTiles = 2;                    // 16-row m-tiles per warp
  static constexpr int kNTiles = 8;                    // 8-key n-tiles per key tile
  static constexpr int kRows = kWarps * kMTiles * 16;  // 128 query rows per block
  static constexpr int kKeys = kNTiles * 8;            // 64 keys per shared-memory tile
  static constexpr int kWords = kD / 2;                // 32-bit words per row
  static constexpr int kStride = kWords + 4;  // words per key row in shared memory: B fragment
                                              // loads of a warp hit 32 distinct banks
  static constexpr int kKSteps = kD / 16;
  static constexpr int kSmemBytes = 4 * (kKeys * kStride + kKeys);
  static_assert(kD == 16 || kD == 32 || kD == 64, "resident widths only");
  static_assert(kStride % 8 == 4, "stride = 4 (mod 8) words keeps fragment loads conflict-free");
  static_assert(kSmemBytes <= 48 * 1024, "static shared memory limit");
  // Accumulators (kMTiles*kNTiles*4) + resident A fragments (kMTiles*kKSteps*4) registers.
  static_assert(kMTiles * kNTiles * 4 + kMTiles * kKSteps * 4 <= 128,
                "register budget: keep >= 3 blocks of 128 threads per SM");
};

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

/// LSE partials of one or two sides: grid (row blocks of side 0 + side 1, splits). p.ld = kD;
/// the queries and keys of each side are packed bf16 words (see the header comment).
template <int kD>
__global__ void __launch_bounds__(128) lse_bf16_kernel(LsePass<float> p, int blocks_side0) {
  using Tile = Bf16Tile<kD>;
  constexpr int kS = Tile::kStride;
  constexpr int kW = Tile::kWords;
  __shared__ __align__(16) std::uint32_t ks[Tile::kKeys * kS];
  __shared__ __align__(16) float bias_s[Tile::kKeys];

  const int side = int(blockIdx.x) < blocks_side0 ? 0 : 1;
  const LseSide<float> sd = side ? p.side[1] : p.side[0];
  const std::int64_t rb = std::int64_t(blockIdx.x) - (side ? blocks_side0 : 0);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const std::int64_t row0 = rb * Tile::kRows;
  const int wrow = warp * Tile::kMTiles * 16;  // first row of this warp within the block
  const std::uint32_t* __restrict__ X = reinterpret_cast<const std::uint32_t*>(sd.queries);
  const std::uint32_t* __restrict__ Y = reinterpret_cast<const std::uint32_t*>(sd.keys);
  const float inv_2c = 0.5f / p.cost_scale, eps = p.eps, alpha = p.alpha;

  // A fragments (word units): a0 (g, 8kk+t), a1 (g+8, 8kk+t), a2 (g, 8kk+t+4), a3 (g+8, +4).
  std::uint32_t a[Tile::kMTiles][Tile::kKSteps][4];
#pragma unroll
  for (int mt = 0; mt < Tile::kMTiles; ++mt) {
    const std::int64_t r_lo = row0 + wrow + mt * 16 + g, r_hi = r_lo + 8;
#pragma unroll
    for (int kk = 0; kk < Tile::kKSteps; ++kk) {
      // x~ rows from global (bf16-rounded at setup); rows past the end are zero.
      const int w = kk * 8 + t;
      a[mt][kk][0] = r_lo < sd.rows ? X[r_lo * kW + w] : 0u;
      a[mt][kk][1] = r_hi < sd.rows ? X[r_hi * kW + w] : 0u;
      a[mt][kk][2] = r_lo < sd.rows ? X[r_lo * kW + w + 4] : 0u;
      a[mt][kk][3] = r_hi < sd.rows ? X[r_hi * kW + w + 4] : 0u;
    }
  }
  float m[Tile::kMTiles][2], s[Tile::kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < Tile::kMTiles; ++mt) {
    m[mt][0] = m[mt][1] = -INFINITY;
    s[mt][0] = s[mt][1] = 0.f;
  }
  std::int64_t kbeg, kend;
  split_range(sd.nkeys, p.splits, blockIdx.y, Tile::kKeys, &kbeg, &kend);

  for (std::int64_t t0 = kbeg; t0 < kend; t0 += Tile::kKeys) {
    __syncthreads();  // the previous tile's shared memory is no longer read
    // beta_j = (g_j - c|y~_j|^2 + eps log b_j) / (2c) (global, once per block and key).
    // Guard: keys past kend and zero-weight keys get -inf (masked; the MMA adds a finite dot
    // product to it, which stays -inf).
    if (tid < Tile::kKeys) {
      const std::int64_t j = t0 + tid;
      bias_s[tid] =
          j < kend ? (sd.key_pot[j] - sd.key_norm[j] + eps * sd.key_logw[j]) * inv_2c : -INFINITY;
    }
    // y~ tile: ks[jj][w] = word w of key t0+jj as 16-byte vectors (global). Guard: keys past
    // kend are zero words, so no out-of-range read (their bias is -inf anyway).
    for (int idx = tid; idx < Tile::kKeys * (kW / 4); idx += Tile::kThreads) {
      const int jj = idx / (kW / 4), w4 = idx % (kW / 4);
      const std::int64_t j = t0 + jj;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (j < kend) v = __ldg(reinterpret_cast<const uint4*>(Y + j * kW) + w4);
      *reinterpret_cast<uint4*>(&ks[jj * kS + 4 * w4]) = v;
    }
    __syncthreads();
    float acc[Tile::kMTiles][Tile::kNTiles][4];
    // u = beta + <x~, y~>: B fragments b0 (word 8kk+t of key g), b1 (word 8kk+t+4) from shared;
    // C = beta of columns 2t, 2t+1 at the first k-step, the running accumulator after.
#pragma unroll
    for (int nt = 0; nt < Tile::kNTiles; ++nt) {
      const float2 bb = *reinterpret_cast<const float2*>(&bias_s[nt * 8 + 2 * t]);
#pragma unroll
      for (int kk = 0; kk < Tile::kKSteps; ++kk) {
        const std::uint32_t* kp = &ks[(nt * 8 + g) * kS + kk * 8 + t];
        const std::uint32_t b0 = kp[0], b1 = kp[4];
#pragma unroll
        for (int mt = 0; mt < Tile::kMTiles; ++mt) {
          float(&d)[4] = acc[mt][nt];
          if (kk == 0)
            mma_bf16(d, a[mt][kk], b0, b1, bb.x, bb.y, bb.x, bb.y);
          else
            mma_bf16(d, a[mt][kk], b0, b1, d[0], d[1], d[2], d[3]);
        }
      }
    }
    // Online (max, sum) of the thread's rows over this key tile (lib/cuda/lse_mma_rows.cuh).
    fold_mma_tile(acc, alpha, m, s);
  }
  // Merge the quad's partial states, then write the row partials.
  write_mma_rows(m, s, alpha, sd, row0 + wrow, g, t);
}

}  // namespace kantor::cuda
