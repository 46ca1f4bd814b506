// Tensor-core streaming LSE kernel (tf32 precision) for wide clouds (padded d > 64, in 32-wide
// d-chunks): scores u_ij = beta_j + <x~_i, y~_j> by mma.sync m16n8k8 TF32 with fp32
// accumulation, the key bias beta_j entering as the fp32 C operand, then the online (max, sum) in
// the exp2 domain on the accumulator registers. Each thread owns 2 rows of each 16-row m-tile
// (rows g, g+8) and accumulates its own (max, sum) for them; the 4 threads of a quad merge once
// at the end, so the inner loop has no shuffles. The query chunk is restaged in shared memory per
// key tile. Resident widths (d <= 64) run lib/cuda/lse_mma_pipe.cuh.
// Conventions: lib/cuda/lse_params.hpp. Runs on sm_80 and sm_90.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "lib/cuda/lse_common.cuh"
#include "lib/cuda/lse_mma_rows.cuh"
#include "lib/cuda/lse_params.hpp"
#include "lib/cuda/lse_simt.cuh"

namespace kantor::cuda {

/// Tile of the chunked TF32 kernel. kDK = coordinates per d-chunk (the stored clouds are
/// zero-padded to a multiple of kDK); the query chunk is restaged in shared memory per key tile.
template <int kDK, int kMT = 2, int kNT = 8>
struct Tf32Tile {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMTiles = kMT;                  // 16-row m-tiles per warp
  static constexpr int kNTiles = kNT;                  // 8-key n-tiles per key tile
  static constexpr int kRows = kWarps * kMTiles * 16;  // 128 query rows per block
  static constexpr int kKeys = kNTiles * 8;            // 64 keys per shared-memory tile
  static constexpr int kStride = kDK + 4;  // row stride in shared memory: B (and A) fragment
                                           // loads of a warp hit 32 distinct banks
  static constexpr int kKSteps = kDK / 8;
  static constexpr int kSmemBytes = 4 * (kKeys * kStride + kKeys + kRows * kStride);
  static_assert(kDK % 8 == 0, "d-chunks are whole k8 steps");
  static_assert(kStride % 32 == 4 || kStride % 32 == 12 || kStride % 32 == 20 || kStride % 32 == 28,
                "stride = 4 (mod 8) words keeps fragment loads conflict-free");
  static_assert(kSmemBytes <= 48 * 1024, "static shared memory limit");
  // Accumulators (kMTiles*kNTiles*4) + A fragments of one chunk (kMTiles*kKSteps*4) registers.
  static_assert(kMTiles * kNTiles * 4 + kMTiles * kKSteps * 4 <= 128,
                "register budget: keep >= 3 blocks of 128 threads per SM");
};

/// LSE partials of one or two sides: grid (row blocks of side 0 + side 1, splits).
template <int kDK, int kMT = 2, int kNT = 8>
__global__ void __launch_bounds__(128) lse_tf32_kernel(LsePass<float> p, int blocks_side0) {
  using Tile = Tf32Tile<kDK, kMT, kNT>;
  constexpr int kS = Tile::kStride;
  __shared__ __align__(16) float ks[Tile::kKeys * kS];
  __shared__ __align__(16) float bias_s[Tile::kKeys];
  __shared__ __align__(16) float qs[Tile::kRows * kS];

  const int side = int(blockIdx.x) < blocks_side0 ? 0 : 1;
  const LseSide<float> sd = side ? p.side[1] : p.side[0];
  const std::int64_t rb = std::int64_t(blockIdx.x) - (side ? blocks_side0 : 0);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const std::int64_t row0 = rb * Tile::kRows;
  const int wrow = warp * Tile::kMTiles * 16;  // first row of this warp within the block
  const int ld = p.ld;
  const int nchunks = ld / kDK;
  const float* __restrict__ X = sd.queries;
  const float* __restrict__ Y = sd.keys;
  const float inv_2c = 0.5f / p.cost_scale, eps = p.eps, alpha = p.alpha;

  // A fragments (m16n8k8 row-major) of the current chunk: a0 (g, t), a1 (g+8, t), a2 (g, t+4),
  // a3 (g+8, t+4).
  std::uint32_t a[Tile::kMTiles][Tile::kKSteps][4];
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
    float acc[Tile::kMTiles][Tile::kNTiles][4];
    for (int c = 0; c < nchunks; ++c) {
      if (c > 0) __syncthreads();  // the previous chunk is no longer read
      // y~ chunk: ks[jj][k] = y~_{t0+jj, c kDK + k} as 16-byte vectors (global), 0 past kend.
      for (int idx = tid; idx < Tile::kKeys * (kDK / 4); idx += Tile::kThreads) {
        const int jj = idx / (kDK / 4), k4 = idx % (kDK / 4);
        const std::int64_t j = t0 + jj;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (j < kend) v = __ldg(reinterpret_cast<const float4*>(Y + j * ld + c * kDK) + k4);
        *reinterpret_cast<float4*>(&ks[jj * kS + 4 * k4]) = v;
      }
      // x~ chunk of the block's rows: qs[r][k] = x~_{row0+r, c kDK + k} (global), 0 past rows.
      for (int idx = tid; idx < Tile::kRows * (kDK / 4); idx += Tile::kThreads) {
        const int r = idx / (kDK / 4), k4 = idx % (kDK / 4);
        const std::int64_t i = row0 + r;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (i < sd.rows) v = __ldg(reinterpret_cast<const float4*>(X + i * ld + c * kDK) + k4);
        *reinterpret_cast<float4*>(&qs[r * kS + 4 * k4]) = v;
      }
      __syncthreads();
      // A fragments of this chunk from shared memory (conflict-free: stride = 4 mod 8).
#pragma unroll
      for (int mt = 0; mt < Tile::kMTiles; ++mt) {
        const int r = wrow + mt * 16 + g;
#pragma unroll
        for (int kk = 0; kk < Tile::kKSteps; ++kk) {
          const int k = kk * 8 + t;
          a[mt][kk][0] = __float_as_uint(qs[r * kS + k]);
          a[mt][kk][1] = __float_as_uint(qs[(r + 8) * kS + k]);
          a[mt][kk][2] = __float_as_uint(qs[r * kS + k + 4]);
          a[mt][kk][3] = __float_as_uint(qs[(r + 8) * kS + k + 4]);
        }
      }
      // u = beta + <x~, y~>: B fragments b0 (k = t, n = g), b1 (k = t+4, n = g) from shared;
      // C = beta of columns 2t, 2t+1 at the first k-step, the running accumulator after.
#pragma unroll
      for (int nt = 0; nt < Tile::kNTiles; ++nt) {
        const float2 bb = *reinterpret_cast<const float2*>(&bias_s[nt * 8 + 2 * t]);
#pragma unroll
        for (int kk = 0; kk < Tile::kKSteps; ++kk) {
          const float* kp = &ks[(nt * 8 + g) * kS + kk * 8 + t];
          const std::uint32_t b0 = __float_as_uint(kp[0]), b1 = __float_as_uint(kp[4]);
#pragma unroll
          for (int mt = 0; mt < Tile::kMTiles; ++mt) {
            float(&d)[4] = acc[mt][nt];
            if (kk == 0 && c == 0)
              mma_tf32(d, a[mt][kk], b0, b1, bb.x, bb.y, bb.x, bb.y);
            else
              mma_tf32(d, a[mt][kk], b0, b1, d[0], d[1], d[2], d[3]);
          }
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
