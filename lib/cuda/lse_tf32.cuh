// Tensor-core streaming LSE kernel (tf32 precision): scores u_ij = beta_j + <x~_i, y~_j> by
// mma.sync m16n8k8 TF32 with fp32 accumulation, the key bias beta_j entering as the fp32 C
// operand, then the online (max, sum) in the exp2 domain on the accumulator registers. Each
// thread owns 2 rows of each 16-row m-tile (rows g, g+8) and accumulates its own (max, sum) for
// them; the 4 threads of a quad merge once at the end, so the inner loop has no shuffles.
// Conventions: lib/cuda/lse_params.hpp. Runs on sm_80 and sm_90.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "lib/cuda/lse_common.cuh"
#include "lib/cuda/lse_mma_rows.cuh"
#include "lib/cuda/lse_params.hpp"
#include "lib/cuda/lse_simt.cuh"

namespace kantor::cuda {

/// Tile of the TF32 kernel. kDK = coordinates per d-chunk (the stored clouds are zero-padded to
/// a multiple of kDK); kResident: d = kDK and each warp keeps its A fragments (query rows) in
/// registers for the whole pass, else the query chunk is restaged in shared memory per key tile.
template <int kDK, bool kResident, int kMT = 2, int kNT = 8>
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
  static constexpr int kSmemBytes =
      4 * (kKeys * kStride + kKeys + (kResident ? 0 : kRows * kStride));
  static_assert(kDK % 8 == 0, "d-chunks are whole k8 steps");
  static_assert(kStride % 32 == 4 || kStride % 32 == 12 || kStride % 32 == 20 || kStride % 32 == 28,
                "stride = 4 (mod 8) words keeps fragment loads conflict-free");
  static_assert(kSmemBytes <= 48 * 1024, "static shared memory limit");
  // Accumulators (kMTiles*kNTiles*4) + resident A fragments (kMTiles*kKSteps*4) registers.
  static_assert(kMTiles * kNTiles * 4 + (kResident ? kMTiles * kKSteps * 4 : 16) <= 128,
                "register budget: keep >= 3 blocks of 128 threads per SM");
};

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

/// LSE partials of one or two sides: grid (row blocks of side 0 + side 1, splits).
template <int kDK, bool kResident, int kMT = 2, int kNT = 8>
__global__ void __launch_bounds__(128) lse_tf32_kernel(LsePass<float> p, int blocks_side0) {
  using Tile = Tf32Tile<kDK, kResident, kMT, kNT>;
  constexpr int kS = Tile::kStride;
  __shared__ __align__(16) float ks[Tile::kKeys * kS];
  __shared__ __align__(16) float bias_s[Tile::kKeys];
  __shared__ __align__(16) float qs[kResident ? 4 : Tile::kRows * kS];

  const int side = int(blockIdx.x) < blocks_side0 ? 0 : 1;
  const LseSide<float> sd = side ? p.side[1] : p.side[0];
  const std::int64_t rb = std::int64_t(blockIdx.x) - (side ? blocks_side0 : 0);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const std::int64_t row0 = rb * Tile::kRows;
  const int wrow = warp * Tile::kMTiles * 16;  // first row of this warp within the block
  const int ld = p.ld;
  const int nchunks = kResident ? 1 : ld / kDK;
  const float* __restrict__ X = sd.queries;
  const float* __restrict__ Y = sd.keys;
  const float inv_2c = 0.5f / p.cost_scale, eps = p.eps, alpha = p.alpha;

  // A fragments (m16n8k8 row-major): a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4).
  std::uint32_t a[Tile::kMTiles][Tile::kKSteps][4];
  if (kResident) {
#pragma unroll
    for (int mt = 0; mt < Tile::kMTiles; ++mt) {
      const std::int64_t r_lo = row0 + wrow + mt * 16 + g, r_hi = r_lo + 8;
#pragma unroll
      for (int kk = 0; kk < Tile::kKSteps; ++kk) {
        // x~ rows from global (TF32-rounded at setup); rows past the end are zero.
        const int k = kk * 8 + t;
        a[mt][kk][0] = __float_as_uint(r_lo < sd.rows ? X[r_lo * ld + k] : 0.f);
        a[mt][kk][1] = __float_as_uint(r_hi < sd.rows ? X[r_hi * ld + k] : 0.f);
        a[mt][kk][2] = __float_as_uint(r_lo < sd.rows ? X[r_lo * ld + k + 4] : 0.f);
        a[mt][kk][3] = __float_as_uint(r_hi < sd.rows ? X[r_hi * ld + k + 4] : 0.f);
      }
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
      if (!kResident) {
        // x~ chunk of the block's rows: qs[r][k] = x~_{row0+r, c kDK + k} (global), 0 past rows.
        for (int idx = tid; idx < Tile::kRows * (kDK / 4); idx += Tile::kThreads) {
          const int r = idx / (kDK / 4), k4 = idx % (kDK / 4);
          const std::int64_t i = row0 + r;
          float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
          if (i < sd.rows) v = __ldg(reinterpret_cast<const float4*>(X + i * ld + c * kDK) + k4);
          *reinterpret_cast<float4*>(&qs[r * kS + 4 * k4]) = v;
        }
      }
      __syncthreads();
      if (!kResident) {
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

/// Shared memory of the pipelined kernel: two key-tile stages (coordinates and the raw bias
/// inputs g_j, c|y~_j|^2, log b_j), and the bias of each stage.
template <int kDK>
struct Tf32PipeSmem {
  using Tile = Tf32Tile<kDK, true>;
  float keys[2][Tile::kKeys * Tile::kStride];
  float raw[2][3][Tile::kKeys];
  float bias[2][Tile::kKeys];
  static constexpr int kBytes = 4 * (2 * Tile::kKeys * Tile::kStride + 8 * Tile::kKeys);
  static_assert(kBytes <= 48 * 1024, "static shared memory limit");
};

/// The resident-query TF32 kernel with the key tiles double-buffered by cp.async: tile t+1 is
/// copied while tile t is reduced, so the L2 latency of the key stream is hidden inside each
/// block (the plain kernel above relies on other resident blocks for that).
template <int kDK>
__global__ void __launch_bounds__(128) lse_tf32_pipe_kernel(LsePass<float> p, int blocks_side0) {
  using Tile = Tf32Tile<kDK, true>;
  constexpr int kS = Tile::kStride;
  __shared__ __align__(16) Tf32PipeSmem<kDK> sm;

  const int side = int(blockIdx.x) < blocks_side0 ? 0 : 1;
  const LseSide<float> sd = side ? p.side[1] : p.side[0];
  const std::int64_t rb = std::int64_t(blockIdx.x) - (side ? blocks_side0 : 0);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const std::int64_t row0 = rb * Tile::kRows;
  const int wrow = warp * Tile::kMTiles * 16;
  const int ld = p.ld;  // == kDK
  const float* __restrict__ X = sd.queries;
  const float* __restrict__ Y = sd.keys;
  const float inv_2c = 0.5f / p.cost_scale, eps = p.eps, alpha = p.alpha;

  // A fragments (m16n8k8 row-major), resident: a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4).
  std::uint32_t a[Tile::kMTiles][Tile::kKSteps][4];
#pragma unroll
  for (int mt = 0; mt < Tile::kMTiles; ++mt) {
    const std::int64_t r_lo = row0 + wrow + mt * 16 + g, r_hi = r_lo + 8;
#pragma unroll
    for (int kk = 0; kk < Tile::kKSteps; ++kk) {
      const int k = kk * 8 + t;
      a[mt][kk][0] = __float_as_uint(r_lo < sd.rows ? X[r_lo * ld + k] : 0.f);
      a[mt][kk][1] = __float_as_uint(r_hi < sd.rows ? X[r_hi * ld + k] : 0.f);
      a[mt][kk][2] = __float_as_uint(r_lo < sd.rows ? X[r_lo * ld + k + 4] : 0.f);
      a[mt][kk][3] = __float_as_uint(r_hi < sd.rows ? X[r_hi * ld + k + 4] : 0.f);
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

  // Stage tile [t0, t0 + kKeys) into buffer b: y~ rows as 16-byte copies, the raw bias inputs as
  // 4-byte copies (global); zeros past kend.
  auto issue = [&](std::int64_t t0, int b) {
    for (int idx = tid; idx < Tile::kKeys * (kDK / 4); idx += Tile::kThreads) {
      const int jj = idx / (kDK / 4), k4 = idx % (kDK / 4);
      const std::int64_t j = t0 + jj;
      const bool ok = j < kend;
      cp_async16(&sm.keys[b][jj * kS + 4 * k4], Y + (ok ? j : 0) * ld + 4 * k4, ok);
    }
    for (int idx = tid; idx < 3 * Tile::kKeys; idx += Tile::kThreads) {
      const int q = idx / Tile::kKeys, jj = idx % Tile::kKeys;
      const std::int64_t j = t0 + jj;
      const bool ok = j < kend;
      const float* src = q == 0 ? sd.key_pot : (q == 1 ? sd.key_norm : sd.key_logw);
      cp_async4(&sm.raw[b][q][jj], src + (ok ? j : 0), ok);
    }
    cp_async_commit();
  };
  // beta_j = (g_j - c|y~_j|^2 + eps log b_j) / (2c) from the staged raw inputs (shared).
  // Guard: keys past kend and zero-weight keys get -inf (masked; the MMA adds a finite dot
  // product to it, which stays -inf).
  auto make_bias = [&](std::int64_t t0, int b) {
    if (tid < Tile::kKeys)
      sm.bias[b][tid] =
          t0 + tid < kend
              ? (sm.raw[b][0][tid] - sm.raw[b][1][tid] + eps * sm.raw[b][2][tid]) * inv_2c
              : -INFINITY;
  };

  int buf = 0;
  if (kbeg < kend) {
    issue(kbeg, 0);
    cp_async_wait_all();
    __syncthreads();
    make_bias(kbeg, 0);
    __syncthreads();
  }
  for (std::int64_t t0 = kbeg; t0 < kend; t0 += Tile::kKeys) {
    const bool next = t0 + Tile::kKeys < kend;
    if (next) issue(t0 + Tile::kKeys, buf ^ 1);
    const float* ks = sm.keys[buf];
    const float* bias_s = sm.bias[buf];
    float acc[Tile::kMTiles][Tile::kNTiles][4];
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
          if (kk == 0)
            mma_tf32(d, a[mt][kk], b0, b1, bb.x, bb.y, bb.x, bb.y);
          else
            mma_tf32(d, a[mt][kk], b0, b1, d[0], d[1], d[2], d[3]);
        }
      }
    }
    // Online (max, sum) of the thread's rows over this key tile (lib/cuda/lse_mma_rows.cuh).
    fold_mma_tile(acc, alpha, m, s);
    cp_async_wait_all();  // tile t+1 has landed (this thread's copies)
    __syncthreads();      // everyone's copies visible; nobody reads buffer `buf` any more
    if (next) {
      make_bias(t0 + Tile::kKeys, buf ^ 1);
      __syncthreads();
    }
    buf ^= 1;
  }
  // Merge the quad's partial states, then write the row partials.
  write_mma_rows(m, s, alpha, sd, row0 + wrow, g, t);
}

}  // namespace kantor::cuda
