// Tensor-core value kernel (TF32): one streaming pass per (row block, key split, block of 64 value
// columns) computes the LSE state (M_i, S_i) of each query row and the value columns
//   A_ik = sum_j exp2(alpha u_ij + nam_i) V_jk,   nam_i = -alpha M_i   (fp32 product),
// with the scores u_ij = beta_j + <x~_i, y~_j> on the tensor cores exactly as the pipelined LSE
// kernel (lib/cuda/lse_mma_pipe.cuh: resident A fragments, the same key staging, key range and key
// bias), and the product P V as a second TF32 MMA on the probabilities (FlashAttention-2 style:
// the accumulators are rescaled when the running maximum grows). The finalize kernel
// (lse_values_tf32.cu) merges the splits in double and applies the row prefactor. Conventions:
// lib/cuda/lse_params.hpp; API: lib/cuda/lse_values.hpp.
//
// Fragment mapping of the second MMA (m16n8k8, PTX ISA "Matrix Fragments for mma.m16n8k8"). The
// score accumulator of n-tile nt gives thread (g = lane / 4, t = lane % 4) the scores of rows g,
// g+8 and keys nt*8 + 2t, nt*8 + 2t + 1: c0 = (g, 2t), c1 = (g, 2t+1), c2 = (g+8, 2t),
// c3 = (g+8, 2t+1). The A operand of P V wants a0 = (row g, k t), a1 = (g+8, t), a2 = (g, t+4),
// a3 = (g+8, t+4). The reduction over k is order-free, so let k = t stand for key 2t and k = t+4
// for key 2t+1 (a bijection of the n-tile's 8 keys): the probabilities are the A fragment as they
// lie, a = (p0, p2, p1, p3), no shuffle. The B operand then is b0 = (k t, n g) = V[key 2t][col],
// b1 = (k t+4, n g) = V[key 2t+1][col] of the column block's column n = g, and the result
// d0 d1 = (g, n 2t, 2t+1), d2 d3 = (g+8, same n).
//
// Columns: a block serves up to 64 value columns as ncb = 1, 2, 4 or 8 column blocks of 8 (the
// fewest that hold them; runtime, warp-uniform). Column n of column block cb is value column
// c = n * ncb + cb, so thread g's B values of all column blocks, c = g * ncb + cb for cb < ncb,
// are consecutive: one 16-byte load per key row and 4 column blocks. Staged layout of key row r
// (stride kVStride = 72 words = 8 mod 32): column c at 8 n + 4 ((cb >> 2) ^ s(r)) + (cb & 3),
// s(r) = (r >> 2) & 1 (the two 16-byte halves of a thread's 8 words swapped on every other group
// of 4 rows). A quarter warp (lanes 8q..8q+7: g = 2q, 2q+1, t = 0..3) loading half h of rows
// 2t + e then starts at word 16 (t + q) + 8 e + 8 (g & 1) + 4 (h ^ (t >> 1)) (mod 32): 8
// distinct multiples of 4, so each 16-byte load phase covers the 32 banks once.
//
// Rescaling (FlashAttention-4): the running maximum of a row moves only when a tile's maximum
// exceeds it by more than kSlack / alpha (a factor 2^8), so exponentials stay <= 2^8 and the
// accumulators are rescaled (a warp-uniform branch) only a few times per row, by
// exp2(nam_new - nam_old), the ratio of the fp32 offsets actually used: every term then carries
// the final nam exactly up to the rounding of that difference. The maximum is quad-uniform (two
// shuffles per row and half tile), because the 4 threads of a quad contribute to the same MMA.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "lib/cuda/lse_common.cuh"
#include "lib/cuda/lse_mma_pipe.cuh"
#include "lib/cuda/lse_mma_rows.cuh"
#include "lib/cuda/lse_params.hpp"
#include "lib/cuda/lse_values.hpp"

namespace kantor::cuda {

/// Traits of the value kernel per width: n-tiles per half tile, i.e. stages of 16 kHalfNT keys
/// (64 keys at W = 8, where the 16-byte key staging of 128 threads needs >= 64 keys; 32 keys
/// elsewhere: 64-key key + value stages exceed 48 KB of static shared memory at W = 32, 64, and
/// at W = 16 they fit (47.6 KB) but take 247 registers against 202), and the minimum resident
/// blocks the register allocation must allow (2: 8 warps per SM; the value accumulators alone
/// are 64 registers). ptxas (sm_90, CUDA 13.0): W = 8 / 16 / 32 / 64 use 217 / 202 / 215 / 236
/// registers, no spills.
template <int kW>
struct MmaValueConfig {
  static constexpr int kHalfNT = kW == 8 ? 4 : 2;
  static constexpr int kMinBlocks = 2;
};

/// Tile of the value kernel for kW words per row: the LSE kernel's rows (4 warps x 2 m-tiles =
/// 128 rows) and key staging, plus a stage of kKeys value rows of up to 64 columns.
template <int kW>
struct MmaValueTile {
  static constexpr int kHalfNT = MmaValueConfig<kW>::kHalfNT;
  using Pipe = MmaPipeTile<kW, kHalfNT>;
  static constexpr int kKeys = Pipe::kKeys;
  static constexpr int kCols = kValueBlockCols;
  static constexpr int kColBlocks = kCols / 8;
  static constexpr int kVStride = kCols + 8;
  static constexpr float kSlack = 8.f;  // log2 units: the running maximum lags by < 2^8
  static_assert(kCols == 64 && kVStride % 32 == 8, "the conflict-free layout assumes these");
  static_assert(Pipe::kThreads == 128 && (kKeys * 16) % 128 == 0, "whole staging rounds");
};

template <int kW>
struct MmaValueSmem {
  using VT = MmaValueTile<kW>;
  MmaPipeSmem<kW, VT::kHalfNT> pipe;        // keys, raw key inputs, warp biases
  float vals[2][VT::kKeys * VT::kVStride];  // the value rows of each stage (layout above)
};

/// Word of value column c (0..63) of staged key row r with 2^lg column blocks (layout above).
template <int kW>
__device__ __forceinline__ int value_slot(int r, int c, int lg) {
  const int n = c >> lg, cb = c & ((1 << lg) - 1);
  return r * MmaValueTile<kW>::kVStride + 8 * n + 4 * ((cb >> 2) ^ ((r >> 2) & 1)) + (cb & 3);
}

/// Stages the `cols` value columns of keys [t0, t0 + kKeys) (global V, row stride vstride, first
/// column of the block at V) into the value stage vs, into the current cp.async group. vec:
/// 16-byte copies (V and vstride 16-byte aligned, cols % 4 == 0, ncb >= 4: 4 consecutive columns
/// are 4 consecutive words), else 4-byte copies. Keys past kend get zeros (their probability is 0
/// and 0 * 0 stays 0); columns past cols are never written (zeroed once by the kernel).
template <int kW>
__device__ __forceinline__ void mma_value_issue(float* vs, const float* __restrict__ V,
                                                std::int64_t vstride, std::int64_t t0,
                                                std::int64_t kend, int cols, int lg, bool vec,
                                                int tid) {
  constexpr int kKeys = MmaValueTile<kW>::kKeys;
  if (vec) {
    const int nq = cols >> 2;  // 16-byte chunks per key row (<= 16)
#pragma unroll
    for (int i = 0; i < kKeys * 16 / 128; ++i) {  // 16 chunks per row, 128 threads
      const int idx = tid + 128 * i, jj = idx >> 4, q = idx & 15;
      if (q < nq) {
        const bool ok = t0 + jj < kend;
        cp_async16(vs + value_slot<kW>(jj, 4 * q, lg), ok ? V + (t0 + jj) * vstride + 4 * q : V,
                   ok);
      }
    }
  } else {
    const int warp = tid >> 5, lane = tid & 31;
    for (int jj = warp; jj < kKeys; jj += 4) {
      const bool ok = t0 + jj < kend;
      const float* src = ok ? V + (t0 + jj) * vstride : V;
      for (int c = lane; c < cols; c += 32) cp_async4(vs + value_slot<kW>(jj, c, lg), src + c, ok);
    }
  }
}

/// The second half of a fold with kNCB column blocks: rescale of the value accumulators when a
/// row's maximum moved (a warp-uniform branch; scale = 1 for the others), then vacc += P V on the
/// tensor cores per n-tile: A = the probabilities p as they lie (k = t: key 2t, k = t + 4: key
/// 2t + 1), B = V rows 2t, 2t + 1 of the n-tile, column g * kNCB + cb of each column block, from
/// the value stage vs. Compile-time kNCB: one basic block of MMAs per n-tile.
template <int kW, int kNCB>
__device__ __forceinline__ void values_rescale_pv(const float (&p)[2][MmaValueTile<kW>::kHalfNT][4],
                                                  float (&vacc)[2][8][4],
                                                  const float (&scale)[2][2], bool grow_any,
                                                  const float* vs, int half, int g, int t) {
  using VT = MmaValueTile<kW>;
  constexpr int kVS = VT::kVStride;
  constexpr int kHNT = VT::kHalfNT;
  if (__any_sync(0xffffffffu, grow_any)) {
#pragma unroll
    for (int cb = 0; cb < kNCB; ++cb) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        vacc[mt][cb][0] *= scale[mt][0];
        vacc[mt][cb][1] *= scale[mt][0];
        vacc[mt][cb][2] *= scale[mt][1];
        vacc[mt][cb][3] *= scale[mt][1];
      }
    }
  }
  const int sw = 4 * (t >> 1);  // half swizzle s(r) of rows nt * 8 + 2t, nt * 8 + 2t + 1
#pragma unroll
  for (int n = 0; n < kHNT; ++n) {
    const int nt = half * kHNT + n;
    const float* v0 = vs + (nt * 8 + 2 * t) * kVS + 8 * g;
    float b0f[8], b1f[8];
    {
      const float4 l0 = *reinterpret_cast<const float4*>(v0 + sw);
      const float4 l1 = *reinterpret_cast<const float4*>(v0 + kVS + sw);
      b0f[0] = l0.x, b0f[1] = l0.y, b0f[2] = l0.z, b0f[3] = l0.w;
      b1f[0] = l1.x, b1f[1] = l1.y, b1f[2] = l1.z, b1f[3] = l1.w;
    }
    if (kNCB == 8) {
      const float4 h0 = *reinterpret_cast<const float4*>(v0 + (sw ^ 4));
      const float4 h1 = *reinterpret_cast<const float4*>(v0 + kVS + (sw ^ 4));
      b0f[4] = h0.x, b0f[5] = h0.y, b0f[6] = h0.z, b0f[7] = h0.w;
      b1f[4] = h1.x, b1f[5] = h1.y, b1f[6] = h1.z, b1f[7] = h1.w;
    }
    std::uint32_t pa[2][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      pa[mt][0] = to_tf32(p[mt][n][0]);  // (g, key 2t)
      pa[mt][1] = to_tf32(p[mt][n][2]);  // (g + 8, key 2t)
      pa[mt][2] = to_tf32(p[mt][n][1]);  // (g, key 2t + 1)
      pa[mt][3] = to_tf32(p[mt][n][3]);  // (g + 8, key 2t + 1)
    }
#pragma unroll
    for (int cb = 0; cb < kNCB; ++cb) {
      const std::uint32_t b0 = to_tf32(b0f[cb]), b1 = to_tf32(b1f[cb]);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        float(&d)[4] = vacc[mt][cb];
        mma_tf32(d, pa[mt], b0, b1, d[0], d[1], d[2], d[3]);
      }
    }
  }
}

/// Folds one half tile of scores (acc: 2 m-tiles x kHNT n-tiles, n-tiles kHNT half + n of the
/// stage) into the running state: quad-uniform maximum with slack, probabilities in place, S,
/// then the rescale and vacc += P V (values_rescale_pv, 2^lg column blocks) with V from the
/// value stage vs.
template <int kW>
__device__ __forceinline__ void fold_values_half(float (&acc)[2][MmaValueTile<kW>::kHalfNT][4],
                                                 float (&vacc)[2][8][4], float (&m)[2][2],
                                                 float (&s)[2][2], const float* vs, int half,
                                                 int lg, float alpha, int g, int t) {
  using VT = MmaValueTile<kW>;
  constexpr int kHNT = VT::kHalfNT;
  float scale[2][2], nam[2][2];
  bool grow_any = false;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float tmax = -INFINITY;
#pragma unroll
      for (int n = 0; n < kHNT; ++n)
        tmax = fmaxf(tmax, fmaxf(acc[mt][n][2 * h], acc[mt][n][2 * h + 1]));
      tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
      tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
      // Guards: tmax = -inf (all masked so far or here) never moves the maximum (the comparison
      // of NaN or -inf is false); the first finite tile always does (+inf > slack), with scale
      // 0 on the state that is still all zeros.
      const float mo = m[mt][h];
      const bool grow = alpha * (tmax - mo) > VT::kSlack;
      const float nam_old = mo == -INFINITY ? 0.f : -alpha * mo;
      const float mn = grow ? tmax : mo;
      const float nam_new = mn == -INFINITY ? 0.f : -alpha * mn;
      scale[mt][h] = !grow ? 1.f : (mo == -INFINITY ? 0.f : fast_exp2(nam_new - nam_old));
      nam[mt][h] = nam_new;
      m[mt][h] = mn;
      grow_any = grow_any || grow;
    }
  }
  // Probabilities p = exp2(alpha u + nam) <= 2^kSlack (masked u = -inf -> 0), S in two chains.
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float ts0 = 0.f, ts1 = 0.f;
#pragma unroll
      for (int n = 0; n < kHNT; ++n) {
        acc[mt][n][2 * h] = fast_exp2(fmaf(alpha, acc[mt][n][2 * h], nam[mt][h]));
        acc[mt][n][2 * h + 1] = fast_exp2(fmaf(alpha, acc[mt][n][2 * h + 1], nam[mt][h]));
        ts0 += acc[mt][n][2 * h];
        ts1 += acc[mt][n][2 * h + 1];
      }
      s[mt][h] = fmaf(s[mt][h], scale[mt][h], ts0 + ts1);
    }
  }
  switch (lg) {  // warp-uniform (per block)
    case 0:
      values_rescale_pv<kW, 1>(acc, vacc, scale, grow_any, vs, half, g, t);
      break;
    case 1:
      values_rescale_pv<kW, 2>(acc, vacc, scale, grow_any, vs, half, g, t);
      break;
    case 2:
      values_rescale_pv<kW, 4>(acc, vacc, scale, grow_any, vs, half, g, t);
      break;
    default:
      values_rescale_pv<kW, 8>(acc, vacc, scale, grow_any, vs, half, g, t);
      break;
  }
}

/// Value partials: grid (row blocks, splits, column blocks of 64). Writes, for split s = blockIdx.y
/// and column block z = blockIdx.z, with R = rows, S = splits, G = gridDim.z:
///   M[(z S + s) R + i]             at workspace,             (the running maximum, u units)
///   S[(z S + s) R + i]             at workspace + G S R,
///   A[((z S + s) R + i) astride + c] at workspace + 2 G S R, c < min(64, vcols - 64 z),
/// astride = min(vcols, 64). raw16: key_pot, key_norm, key_logw 16-byte aligned; v16: values and
/// vstride 16-byte aligned.
template <int kW, int kMinB>
__global__ void __launch_bounds__(128, kMinB)
    lse_mma_values_kernel(MmaValuePass p, float alpha, bool raw16, bool v16) {
  using VT = MmaValueTile<kW>;
  using Tile = typename VT::Pipe;
  constexpr int kHNT = VT::kHalfNT;
  __shared__ __align__(16) MmaValueSmem<kW> sm;

  const LseSide<float> sd = p.side;
  const std::int64_t rb = blockIdx.x;
  const int split = blockIdx.y, z = blockIdx.z;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const std::int64_t row0 = rb * Tile::kRows;
  const int wrow = warp * Tile::kMTiles * 16;
  const float* __restrict__ Y = sd.keys;
  const float inv_2c = 0.5f / p.cost_scale, eps = p.eps;
  // This block's value columns [64 z, 64 z + cols) in 2^lg column blocks of 8.
  const int cols = min(VT::kCols, p.vcols - VT::kCols * z);
  const int lg = cols <= 8 ? 0 : (cols <= 16 ? 1 : (cols <= 32 ? 2 : 3));
  const bool vec = v16 && (cols & 3) == 0 && lg >= 2;
  const float* V = p.values + VT::kCols * z;

  std::uint32_t a[2][Tile::kKSteps][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int kk = 0; kk < Tile::kKSteps; ++kk)
      load_query_frag<kW>(a[mt][kk], sd.queries, sd.rows, row0 + wrow + mt * 16 + g, kk, t);
  float m[2][2], s[2][2], vacc[2][VT::kColBlocks][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    m[mt][0] = m[mt][1] = -INFINITY;
    s[mt][0] = s[mt][1] = 0.f;
#pragma unroll
    for (int cb = 0; cb < VT::kColBlocks; ++cb)
#pragma unroll
      for (int r = 0; r < 4; ++r) vacc[mt][cb][r] = 0.f;
  }
  std::int64_t kbeg, kend;
  mma_pipe_key_range(sd, p.splits, split, rb, Tile::kKeys, &kbeg, &kend);

  using Stg = MmaPipeStaging<kW, kHNT>;
  const int jj0 = tid / Stg::kChunks, k4 = tid % Stg::kChunks;
  const int rq = tid / Stg::kRawChunks, rc = tid % Stg::kRawChunks;
  const float* raw_src = rq == 0 ? sd.key_pot : (rq == 1 ? sd.key_norm : sd.key_logw);
  auto issue = [&](std::int64_t t0, int b) {
    mma_pipe_issue<kW, kHNT>(sm.pipe, Y, raw_src, kend, t0, b, tid, jj0, k4, rq, rc, raw16);
    mma_value_issue<kW>(sm.vals[b], V, p.vstride, t0, kend, cols, lg, vec, tid);
    cp_async_commit();
  };
  float* wb = sm.pipe.bias[warp];
  auto make_bias = [&](std::int64_t t0, int b) {
    mma_pipe_bias<kW, kHNT>(sm.pipe, t0, kend, b, wb, lane, eps, inv_2c);
  };

  // Words the copies never write (columns past cols) must hold finite values: zero both stages
  // once, before any copy lands.
  for (int b = 0; b < 2; ++b)
    for (int i = tid; i < VT::kKeys * VT::kVStride; i += Tile::kThreads) sm.vals[b][i] = 0.f;
  __syncthreads();

  float acc0[2][kHNT][4], acc1[2][kHNT][4];
  int buf = 0;
  if (kbeg < kend) {
    issue(kbeg, 0);
    cp_async_wait_all();
    __syncthreads();
    if (kbeg + Tile::kKeys < kend) issue(kbeg + Tile::kKeys, 1);
    make_bias(kbeg, 0);
  }
  for (std::int64_t t0 = kbeg; t0 < kend; t0 += Tile::kKeys) {
    const float* ks = sm.pipe.keys[buf];
    const float* vs = sm.vals[buf];
    // Both halves' scores first (the tensor pipe works on half 1 while half 0 is exponentiated),
    // then each half's fold and P V. Everything of this stage is read before the barrier below.
    mma_pipe_half<MmaTf32, kW, kHNT>(acc0, a, ks, wb, 0, g, t);
    mma_pipe_half<MmaTf32, kW, kHNT>(acc1, a, ks, wb, 1, g, t);
    fold_values_half<kW>(acc0, vacc, m, s, vs, 0, lg, alpha, g, t);
    fold_values_half<kW>(acc1, vacc, m, s, vs, 1, lg, alpha, g, t);
    const std::int64_t t1 = t0 + Tile::kKeys;
    if (t1 < kend) {
      cp_async_wait_all();  // tile t+1 has landed (this thread's copies)
      __syncthreads();      // everyone's copies visible; buffer `buf` is free
      if (t1 + Tile::kKeys < kend) issue(t1 + Tile::kKeys, buf);
      make_bias(t1, buf ^ 1);
    }
    buf ^= 1;
  }

  // Partials. The quad shares M (quad-uniform); S sums the quad's keys; A is already complete
  // per thread (the MMA summed over the quad's keys): d0 d1 = row g, columns n = 2t, 2t+1 of
  // each column block, d2 d3 = row g + 8.
  const std::int64_t R = sd.rows, S = p.splits, G = gridDim.z;
  const int astride = min(p.vcols, VT::kCols);
  float* wm = p.workspace + (std::int64_t(z) * S + split) * R;
  float* ws = wm + G * S * R;
  float* wa = p.workspace + 2 * G * S * R + (std::int64_t(z) * S + split) * R * astride;
  const int ncb = 1 << lg;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float sum = s[mt][h];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const std::int64_t i = row0 + wrow + mt * 16 + g + 8 * h;
      if (i < R) {
        if (t == 0) {
          wm[i] = m[mt][h];
          ws[i] = sum;
        }
#pragma unroll
        for (int cb = 0; cb < VT::kColBlocks; ++cb) {
          if (cb < ncb) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int c = ((2 * t + e) << lg) + cb;
              if (c < cols) wa[i * astride + c] = vacc[mt][cb][2 * h + e];
            }
          }
        }
      }
    }
  }
}

template <int kW>
constexpr auto mma_values_kernel() {
  return lse_mma_values_kernel<kW, MmaValueConfig<kW>::kMinBlocks>;
}

/// Host side: f(kernel) for the value kernel of `words` words per row (8, 16, 32 or 64).
template <class F>
void with_mma_values_kernel(int words, F&& f) {
  switch (words) {
    case 8:
      return f(mma_values_kernel<8>());
    case 16:
      return f(mma_values_kernel<16>());
    case 32:
      return f(mma_values_kernel<32>());
    default:
      return f(mma_values_kernel<64>());
  }
}

}  // namespace kantor::cuda
