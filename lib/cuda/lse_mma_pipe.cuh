// Software-pipelined tensor-core streaming LSE kernel, one template for both tensor-core
// precisions: scores u_ij = beta_j + <x~_i, y~_j> by mma.sync with fp32 accumulation, the key
// bias beta_j entering as the fp32 C operand, then the online (max, sum) in the exp2 domain on
// the accumulator registers (lib/cuda/lse_mma_rows.cuh). Conventions: lib/cuda/lse_params.hpp.
// Runs on sm_80 and sm_90.
//
// Precisions (the MMA policy): tf32 = m16n8k8 on TF32 words (one value per 32-bit word); bf16 =
// m16n8k16 on packed bf16 pairs (word w of a row = elements 2w, 2w+1, low half first). In word
// units both take the same fragments (PTX ISA, "Matrix Fragments for mma.m16n8k8" / "k16"):
//   A (16 rows x 8 words, 4 regs): a0 = (row g, word t), a1 = (g+8, t), a2 = (g, t+4),
//                                  a3 = (g+8, t+4);
//   B (8 words x 8 keys, 2 regs):  b0 = (word t, key g), b1 = (word t+4, key g);
//   C/D (fp32, 4 regs):            c0 c1 = row g, keys 2t, 2t+1; c2 c3 = row g+8, same keys,
// with g = lane / 4, t = lane % 4, one k-step = 8 words. kW = words per row (resident widths 8,
// 16, 32, 64: tf32 d <= 64, bf16 d <= 128).
//
// Structure: 4 warps x 2 m-tiles = 128 query rows per block with their A fragments in registers
// for the whole pass; key tiles of 2 x kHalfNT x 8 keys in two cp.async stages (one block barrier
// per tile); each tile reduced as two halves of kHalfNT n-tiles (MmaPipeConfig: 4, or 2 at
// W = 64) whose MMAs are issued in the same basic block as
// the branch-free fold of the previous half, so the tensor pipe works while the SFU and FP32
// pipes exponentiate; each warp forms its own copy of the key bias.
//
// Shared with the tensor-core value kernel (lib/cuda/lse_mma_values.cuh): the tile and shared
// memory traits, mma_pipe_half (scores), the key range of a block (mma_pipe_key_range), the key
// staging (MmaPipeStaging, mma_pipe_issue), the key bias (mma_pipe_bias) and load_query_frag. The
// LSE kernel calls them through its lambdas; its SASS is bit-identical to the kernel before they
// were factored out (checked by hashing the cubin's .text sections).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "lib/cuda/check.hpp"
#include "lib/cuda/lse_common.cuh"
#include "lib/cuda/lse_mma_rows.cuh"
#include "lib/cuda/lse_params.hpp"
#include "lib/cuda/lse_simt.cuh"

namespace kantor::cuda {

/// MMA policies: one k-step (8 words) of D = A B + C.
struct MmaTf32 {
  __device__ __forceinline__ static void run(float (&d)[4], const std::uint32_t (&a)[4],
                                             std::uint32_t b0, std::uint32_t b1, float c0, float c1,
                                             float c2, float c3) {
    mma_tf32(d, a, b0, b1, c0, c1, c2, c3);
  }
};
struct MmaBf16 {
  __device__ __forceinline__ static void run(float (&d)[4], const std::uint32_t (&a)[4],
                                             std::uint32_t b0, std::uint32_t b1, float c0, float c1,
                                             float c2, float c3) {
    mma_bf16(d, a, b0, b1, c0, c1, c2, c3);
  }
};

/// Tile of the pipelined kernel for kW words per row.
///
/// Fragment word order: the dot product sums over k, so any bijection between the MMA's k index
/// and the stored words that A and B share gives the same score. The thread's words t and t + 4
/// of k-step kk are read from words p and p + 1 with
///   p(kk, t) = 16 (kk / 2) + 4 t + 2 (kk % 2)   (kW >= 16: one 16-byte load = 2 k-steps),
///   p(0, t) = 2 t                               (kW = 8: one 8-byte load),
/// so a thread loads its B fragments with one LDS.128 per two k-steps instead of four LDS.32.
/// Row strides kStride = 16 (mod 32) words (8 for kW = 8) keep each phase of those loads on 32
/// distinct banks.
template <int kW, int kHNT = 4>
struct MmaPipeTile {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMTiles = 2;
  static constexpr int kHalfNT = kHNT;  // n-tiles per half tile
  static constexpr int kRows = kWarps * kMTiles * 16;
  static constexpr int kKeys = 2 * kHalfNT * 8;  // keys per stage
  static constexpr int kKSteps = kW / 8;
  static constexpr int kStride = kW == 8 ? 8 : (kW % 32 == 16 ? kW : kW + 16);
  static_assert(kW == 8 || kW == 16 || kW == 32 || kW == 64, "resident widths only");
  static_assert(kW == 8 || kStride % 32 == 16, "LDS.128 phases conflict-free");
};

template <int kW, int kHNT, int kRaw = 3>
struct MmaPipeSmem {
  using Tile = MmaPipeTile<kW, kHNT>;
  float keys[2][Tile::kKeys * Tile::kStride];
  // g_j, c|y~_j|^2, log b_j of each stage; [3] (kRaw = 4, the policy variant): the key labels
  // (int32 bits) of the pair term.
  float raw[2][kRaw][Tile::kKeys];
  float bias[Tile::kWarps][Tile::kKeys];  // warp-private bias of the current tile
  static_assert(sizeof(float) * (2 * Tile::kKeys * Tile::kStride + 2 * kRaw * Tile::kKeys +
                                 Tile::kWarps * Tile::kKeys) <=
                    48 * 1024,
                "static shared memory limit");
};

/// Word of k-step kk, thread t (the word-t entry; word t + 4 is the next one).
template <int kW>
__device__ __forceinline__ int mma_pipe_col(int kk, int t) {
  return kW == 8 ? 2 * t : 16 * (kk >> 1) + 4 * t + 2 * (kk & 1);
}

/// acc[mt][n] = beta + <x~, y~> over the n-tiles of half `half` of the staged key tile ks
/// (shared), bias from the warp's bias array wb (shared).
template <class Mma, int kW, int kHNT>
__device__ __forceinline__ void mma_pipe_half(float (&acc)[2][kHNT][4],
                                              const std::uint32_t (&a)[2][kW / 8][4],
                                              const float* ks, const float* wb, int half, int g,
                                              int t) {
  using Tile = MmaPipeTile<kW, kHNT>;
  constexpr int kS = Tile::kStride;
#pragma unroll
  for (int n = 0; n < Tile::kHalfNT; ++n) {
    const int nt = half * Tile::kHalfNT + n;
    const float2 bb = *reinterpret_cast<const float2*>(&wb[nt * 8 + 2 * t]);
    const float* kp = &ks[(nt * 8 + g) * kS];
    std::uint32_t b[Tile::kKSteps][2];
    if (kW == 8) {
      const float2 v = *reinterpret_cast<const float2*>(&kp[2 * t]);
      b[0][0] = __float_as_uint(v.x);
      b[0][1] = __float_as_uint(v.y);
    } else {
#pragma unroll
      for (int q = 0; q < Tile::kKSteps / 2; ++q) {
        const float4 v = *reinterpret_cast<const float4*>(&kp[16 * q + 4 * t]);
        b[2 * q][0] = __float_as_uint(v.x);
        b[2 * q][1] = __float_as_uint(v.y);
        b[2 * q + 1][0] = __float_as_uint(v.z);
        b[2 * q + 1][1] = __float_as_uint(v.w);
      }
    }
#pragma unroll
    for (int kk = 0; kk < Tile::kKSteps; ++kk)
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        float(&d)[4] = acc[mt][n];
        if (kk == 0)
          Mma::run(d, a[mt][kk], b[kk][0], b[kk][1], bb.x, bb.y, bb.x, bb.y);
        else
          Mma::run(d, a[mt][kk], b[kk][0], b[kk][1], d[0], d[1], d[2], d[3]);
      }
  }
}

/// The A fragment of k-step kk of the m-tile whose rows are r_lo and r_lo + 8, in the permuted
/// word order: a0 (r_lo, p), a1 (r_lo + 8, p), a2 (r_lo, p + 1), a3 (r_lo + 8, p + 1) with
/// p = mma_pipe_col(kk, t); rows past `rows` are zero (global, rows of kW words). (The LSE kernel
/// below writes the same loads out in place: routing them through this function renumbers the
/// PTX virtual registers, and ptxas then allocates differently; its SASS is kept bit-identical.)
template <int kW>
__device__ __forceinline__ void load_query_frag(std::uint32_t (&a)[4], const float* __restrict__ X,
                                                std::int64_t rows, std::int64_t r_lo, int kk,
                                                int t) {
  const std::int64_t r_hi = r_lo + 8;
  const int k = mma_pipe_col<kW>(kk, t);
  const float2 lo =
      r_lo < rows ? *reinterpret_cast<const float2*>(X + r_lo * kW + k) : make_float2(0.f, 0.f);
  const float2 hi =
      r_hi < rows ? *reinterpret_cast<const float2*>(X + r_hi * kW + k) : make_float2(0.f, 0.f);
  a[0] = __float_as_uint(lo.x);
  a[1] = __float_as_uint(hi.x);
  a[2] = __float_as_uint(lo.y);
  a[3] = __float_as_uint(hi.y);
}

/// Key range [kbeg, kend) that block (row block rb, split `split` of `splits`) of side sd scans,
/// in whole stages of `tile` keys from kbeg. The one place that decides which keys a block of the
/// pipelined kernels (LSE and values, lib/cuda/lse_mma_values.cuh) visits: today an even split of
/// all keys (split_range).
__device__ __forceinline__ void mma_pipe_key_range(const LseSide<float>& sd, int splits, int split,
                                                   std::int64_t rb, int tile, std::int64_t* kbeg,
                                                   std::int64_t* kend) {
  (void)rb;
  split_range(sd.nkeys, splits, split, tile, kbeg, kend);
}

/// Key staging of the pipelined kernels (global -> shared, two cp.async stages of Tile::kKeys
/// keys): thread tid copies the 16-byte chunk k4 = tid % kChunks of key rows jj0 + i kJStep
/// (jj0 = tid / kChunks, y~ rows), and threads < 3 kRawChunks one 4-key chunk (rc = tid %
/// kRawChunks) of g, c|y~|^2 or log b (rq = tid / kRawChunks).
template <int kW, int kHNT>
struct MmaPipeStaging {
  using Tile = MmaPipeTile<kW, kHNT>;
  static constexpr int kChunks = kW / 4;                   // 16-byte chunks per key row
  static constexpr int kJStep = Tile::kThreads / kChunks;  // keys per round of the block
  static constexpr int kRounds = Tile::kKeys / kJStep;
  static constexpr int kRawChunks = Tile::kKeys / 4;  // 4-key chunks per raw input array
  static_assert(Tile::kThreads % kChunks == 0 && Tile::kKeys % kJStep == 0, "whole rounds");
  static_assert(4 * kRawChunks <= Tile::kThreads, "one raw chunk per thread (4 raw arrays)");
};

/// Stages key tile [t0, t0 + kKeys) into buffer b (global -> shared) by 16-byte copies (the raw
/// arrays by 16-byte copies when raw16, else by 4-byte copies): zeros past kend, never a read past
/// it. raw_src = the raw array of this thread (rq). The caller commits the group
/// (cp_async_commit), after adding its own copies to it if it has any. kFull: the caller knows
/// t0 + kKeys <= kend (no bounds tests).
template <int kW, int kHNT, int kRaw, bool kFull = false>
__device__ __forceinline__ void mma_pipe_issue(MmaPipeSmem<kW, kHNT, kRaw>& sm,
                                               const float* __restrict__ Y, const float* raw_src,
                                               std::int64_t kend, std::int64_t t0, int b, int tid,
                                               int jj0, int k4, int rq, int rc, bool raw16,
                                               int nraw = 3) {
  using Tile = MmaPipeTile<kW, kHNT>;
  using Stg = MmaPipeStaging<kW, kHNT>;
  constexpr int kS = Tile::kStride;
  const float* src = Y + (t0 + jj0) * kW + 4 * k4;
  float* dst = &sm.keys[b][jj0 * kS + 4 * k4];
  const std::int64_t left = kend - t0 - jj0;  // keys of this thread's column still in range
#pragma unroll
  for (int i = 0; i < Stg::kRounds; ++i) {
    const bool ok = kFull || i * Stg::kJStep < left;
    cp_async16(dst + i * Stg::kJStep * kS, ok ? src + std::int64_t(i) * Stg::kJStep * kW : Y, ok);
  }
  if (tid < nraw * Stg::kRawChunks) {
    const std::int64_t j = t0 + 4 * rc;
    const std::int64_t left_raw = kend - j;
    float* rdst = &sm.raw[b][rq][4 * rc];
    if (raw16 && (kFull || left_raw >= 4)) {
      cp_async16(rdst, raw_src + j, true);
    } else {  // unaligned inputs, or the chunk at kend: element copies, zeros past kend
#pragma unroll
      for (int e = 0; e < 4; ++e)
        cp_async4(rdst + e, e < left_raw ? raw_src + j + e : raw_src, e < left_raw);
    }
  }
}

/// The warp's bias wb of the tile staged in buffer b: beta_j = (g_j - c|y~_j|^2 + eps log b_j) /
/// (2c) (shared -> shared, lane l forms keys l, l + 32, ...). Guard: keys past kend and
/// zero-weight keys (log b = -inf, selected explicitly: whatever their potential) get -inf
/// (masked; the MMA adds a finite dot product, which stays -inf). The one place that forms the
/// per-key term of the scores (LSE and value kernels).
template <int kW, int kHNT, int kRaw>
__device__ __forceinline__ void mma_pipe_bias(const MmaPipeSmem<kW, kHNT, kRaw>& sm,
                                              std::int64_t t0, std::int64_t kend, int b, float* wb,
                                              int lane, float eps, float inv_2c) {
  using Tile = MmaPipeTile<kW, kHNT>;
#pragma unroll
  for (int h = 0; h < Tile::kKeys / 32; ++h) {
    const int jj = lane + 32 * h;
    const float lw = sm.raw[b][2][jj];
    wb[jj] = t0 + jj < kend && lw != -INFINITY
                 ? (sm.raw[b][0][jj] - sm.raw[b][1][jj] + eps * lw) * inv_2c
                 : -INFINITY;
  }
  __syncwarp();
}

/// LSE partials of one or two sides: grid (row blocks of side 0 + side 1, splits). The clouds
/// are rows of kW words (row stride kW). raw16: the key potential, norm and log-weight arrays are
/// 16-byte aligned (then staged by 16-byte copies, else by 4-byte copies).
///
/// kPolicies: the variant with the key-schedule and cost policies of LseSide (a block list of
/// key-tile runs, scanned run by run; the label pair term u_ij -= pair[l_i, l_j]: folded into
/// the warp's key bias when the warp's 32 rows share one label (rows ordered by class: nearly
/// every warp), else subtracted per score from the table (L1-cached gathers)). The plain
/// variant (kPolicies = false) is the dense squared-Euclidean kernel, unchanged.
///
/// kClassPot (with kPolicies = false): the plain kernel over the class-aligned row tiles of a
/// label-augmented cost (LseSide::tile_start): block r of a side covers the rows of tile r, all
/// of one label, and its key potential is that label's row of LseSide::class_pot (the pair term
/// folded in by class_key_potentials before the pass); everything else is the plain kernel.
template <class Mma, int kW, int kHNT, int kMinB, bool kPolicies = false, bool kClassPot = false>
__global__ void __launch_bounds__(128, kMinB)
    lse_mma_pipe_kernel(LsePass<float> p, int blocks_side0, bool raw16) {
  static_assert(!(kPolicies && kClassPot), "the class potentials are a plain-kernel variant");
  using Tile = MmaPipeTile<kW, kHNT>;
  constexpr int kNT = Tile::kHalfNT;
  __shared__ __align__(16) MmaPipeSmem<kW, kHNT, kPolicies ? 4 : 3> sm;

  const int side = int(blockIdx.x) < blocks_side0 ? 0 : 1;
  const LseSide<float> sd = side ? p.side[1] : p.side[0];
  const std::int64_t rb = std::int64_t(blockIdx.x) - (side ? blocks_side0 : 0);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  // Rows [row0, row_end) of this block: a fixed tile of kRows rows, or a class-aligned tile.
  std::int64_t row0 = rb * Tile::kRows, row_end = sd.rows;
  const float* key_pot = sd.key_pot;
  if constexpr (kClassPot) {
    row0 = sd.tile_start[rb];
    row_end = sd.tile_start[rb + 1];
    key_pot = sd.class_pot + std::int64_t(sd.tile_slot[rb]) * sd.nkeys;
  }
  const int wrow = warp * Tile::kMTiles * 16;
  const float* __restrict__ X = sd.queries;
  const float* __restrict__ Y = sd.keys;
  const float inv_2c = 0.5f / p.cost_scale, eps = p.eps, alpha = p.alpha;

  // A fragments, resident, in the permuted word order: a0 (g, p), a1 (g+8, p), a2 (g, p+1),
  // a3 (g+8, p+1) with p = mma_pipe_col(kk, t); rows past the end are zero (global).
  std::uint32_t a[2][Tile::kKSteps][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    const std::int64_t r_lo = row0 + wrow + mt * 16 + g, r_hi = r_lo + 8;
#pragma unroll
    for (int kk = 0; kk < Tile::kKSteps; ++kk) {
      const int k = mma_pipe_col<kW>(kk, t);
      const float2 lo = r_lo < row_end ? *reinterpret_cast<const float2*>(X + r_lo * kW + k)
                                       : make_float2(0.f, 0.f);
      const float2 hi = r_hi < row_end ? *reinterpret_cast<const float2*>(X + r_hi * kW + k)
                                       : make_float2(0.f, 0.f);
      a[mt][kk][0] = __float_as_uint(lo.x);
      a[mt][kk][1] = __float_as_uint(hi.x);
      a[mt][kk][2] = __float_as_uint(lo.y);
      a[mt][kk][3] = __float_as_uint(hi.y);
    }
  }
  float m[2][2], s[2][2];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    m[mt][0] = m[mt][1] = -INFINITY;
    s[mt][0] = s[mt][1] = 0.f;
  }
  std::int64_t kbeg, kend;
  mma_pipe_key_range(sd, p.splits, blockIdx.y, rb, Tile::kKeys, &kbeg, &kend);

  // Key staging (mma_pipe_issue) and the warp's key bias (mma_pipe_bias).
  using Stg = MmaPipeStaging<kW, kHNT>;
  const int jj0 = tid / Stg::kChunks, k4 = tid % Stg::kChunks;
  const int rq = tid / Stg::kRawChunks, rc = tid % Stg::kRawChunks;  // raw array and chunk
  const float* raw_src = rq == 0 ? key_pot : (rq == 1 ? sd.key_norm : sd.key_logw);
  if constexpr (!kPolicies) {
    // The plain kernel: this branch is, token for token, the kernel before the policies existed
    // (its SASS is the measured hot path; keep it so: ptxas allocates differently when even the
    // virtual register numbering of the PTX changes).
    auto issue = [&](std::int64_t t0, int b) {
      mma_pipe_issue<kW, kHNT>(sm, Y, raw_src, kend, t0, b, tid, jj0, k4, rq, rc, raw16);
      cp_async_commit();
    };
    float* wb = sm.bias[warp];
    auto make_bias = [&](std::int64_t t0, int b) {
      mma_pipe_bias<kW, kHNT>(sm, t0, kend, b, wb, lane, eps, inv_2c);
    };

    float acc0[2][kNT][4], acc1[2][kNT][4];
    // acc1 starts as masked scores: the first fold of the loop adds nothing.
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int n = 0; n < kNT; ++n)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc1[mt][n][r] = -INFINITY;

    int buf = 0;
    if (kbeg < kend) {
      issue(kbeg, 0);
      cp_async_wait_all();
      __syncthreads();
      if (kbeg + Tile::kKeys < kend) issue(kbeg + Tile::kKeys, 1);
      make_bias(kbeg, 0);
    }
    for (std::int64_t t0 = kbeg; t0 < kend; t0 += Tile::kKeys) {
      const float* ks = sm.keys[buf];
      // Half 0 of this tile on the tensor cores while half 1 of the previous tile is folded, then
      // half 1 while half 0 is folded (one basic block: the compiler interleaves them).
      mma_pipe_half<Mma, kW, kHNT>(acc0, a, ks, wb, 0, g, t);
      fold_mma_tile(acc1, alpha, m, s);
      mma_pipe_half<Mma, kW, kHNT>(acc1, a, ks, wb, 1, g, t);
      fold_mma_tile(acc0, alpha, m, s);
      const std::int64_t t1 = t0 + Tile::kKeys;
      if (t1 < kend) {
        cp_async_wait_all();  // tile t+1 has landed (this thread's copies)
        __syncthreads();      // everyone's copies visible; buffer `buf` and its raw inputs are free
        if (t1 + Tile::kKeys < kend) issue(t1 + Tile::kKeys, buf);
        make_bias(t1, buf ^ 1);
      }
      buf ^= 1;
    }
    fold_mma_tile(acc1, alpha, m, s);
  } else {
    // The policy variant: the same pipeline, run once per key range of the schedule, with the
    // pair term in the warp's bias (uniform-label warps) or per score (mixed warps).
    // This thread's row labels, and whether the warp's rows share one.
    const bool pair = sd.pair != nullptr;
    int rlab[2][2] = {{0, 0}, {0, 0}};
    bool uniform = true;
    const float* pair_w = nullptr;  // the warp's table row when uniform
    if (pair) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const std::int64_t r = row0 + wrow + mt * 16 + g + 8 * h;
          rlab[mt][h] = sd.query_labels[r < sd.rows ? r : sd.rows - 1];
        }
      const int l0 = __shfl_sync(0xffffffffu, rlab[0][0], 0);
      uniform = __all_sync(0xffffffffu, rlab[0][0] == l0 && rlab[0][1] == l0 && rlab[1][0] == l0 &&
                                            rlab[1][1] == l0);
      pair_w = sd.pair + std::int64_t(l0) * sd.classes;
    }
    // One choice per block (its barriers must be the same for every warp): the pair term goes
    // into the warp biases when every warp of the block is label-uniform, else per score.
    const bool mixed = __syncthreads_or(pair && !uniform) != 0;
    const bool fold_pair = pair && !mixed;
    const float* raw_p = rq == 3 ? reinterpret_cast<const float*>(sd.key_labels) : raw_src;
    const int nraw = pair ? 4 : 3;
    auto issue = [&](std::int64_t t0, int b) {
      mma_pipe_issue(sm, Y, raw_p, kend, t0, b, tid, jj0, k4, rq, rc, raw16, nraw);
      cp_async_commit();
    };
    float* wb = sm.bias[warp];
    auto make_bias = [&](std::int64_t t0, int b) {
      mma_pipe_bias(sm, t0, kend, b, wb, lane, eps, inv_2c);
      if (fold_pair) {
        // The warp's rows share label l0: the pair term is one more key bias.
#pragma unroll
        for (int h = 0; h < Tile::kKeys / 32; ++h) {
          const int jj = lane + 32 * h;
          if (t0 + jj < kend) wb[jj] -= __ldg(pair_w + __float_as_int(sm.raw[b][3][jj]));
        }
        __syncwarp();
      }
    };
    // Mixed-label warps: u_ij -= pair[l_i, l_j] per score of half `half` of the tile in buffer b.
    auto pair_fix = [&](float(&acc)[2][kNT][4], int half, int b) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int n = 0; n < kNT; ++n)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int jj = (half * kNT + n) * 8 + 2 * t + (r & 1);
            acc[mt][n][r] -= __ldg(sd.pair + std::int64_t(rlab[mt][r >> 1]) * sd.classes +
                                   __float_as_int(sm.raw[b][3][jj]));
          }
    };

    float acc0[2][kNT][4], acc1[2][kNT][4];
    // Scans keys [kbeg, kend): the two-stage pipeline over its tiles. kMixed (a block with a warp
    // whose rows carry several labels) adds the per-score pair term between each MMA and its fold;
    // the other instantiation keeps MMA and fold in one basic block (their overlap is the kernel's
    // speed: a branch between them measured 1.32x slower at d = 64).
    auto scan = [&](auto mixed) {
      constexpr bool kMixed = decltype(mixed)::value;
      // acc1 starts as masked scores: the first fold of the loop adds nothing.
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int n = 0; n < kNT; ++n)
#pragma unroll
          for (int r = 0; r < 4; ++r) acc1[mt][n][r] = -INFINITY;
      int buf = 0;
      if (kbeg < kend) {
        issue(kbeg, 0);
        cp_async_wait_all();
        __syncthreads();
        if (kbeg + Tile::kKeys < kend) issue(kbeg + Tile::kKeys, 1);
        make_bias(kbeg, 0);
      }
      for (std::int64_t t0 = kbeg; t0 < kend; t0 += Tile::kKeys) {
        const float* ks = sm.keys[buf];
        mma_pipe_half<Mma, kW, kHNT>(acc0, a, ks, wb, 0, g, t);
        if constexpr (kMixed) pair_fix(acc0, 0, buf);
        fold_mma_tile(acc1, alpha, m, s);
        mma_pipe_half<Mma, kW, kHNT>(acc1, a, ks, wb, 1, g, t);
        if constexpr (kMixed) pair_fix(acc1, 1, buf);
        fold_mma_tile(acc0, alpha, m, s);
        const std::int64_t t1 = t0 + Tile::kKeys;
        if (t1 < kend) {
          cp_async_wait_all();
          __syncthreads();
          if (t1 + Tile::kKeys < kend) issue(t1 + Tile::kKeys, buf);
          make_bias(t1, buf ^ 1);
        }
        buf ^= 1;
      }
      fold_mma_tile(acc1, alpha, m, s);
    };
    // The loop of the block (the per-score path only for blocks with a mixed-label warp).
    auto run = [&](auto mixed) {
      if (sd.run_ptr != nullptr) {
        // Block list: this split's share of the row block's key-tile runs, one pipeline per
        // range; the barrier lets every warp finish reading the previous range's buffers first.
        for_each_key_range(sd, rb, p.splits, int(blockIdx.y), Tile::kKeys,
                           [&](std::int64_t b, std::int64_t e) {
                             __syncthreads();
                             kbeg = b;
                             kend = e;
                             scan(mixed);
                           });
      } else {
        scan(mixed);
      }
    };
    if (mixed)
      run(std::true_type{});
    else
      run(std::false_type{});
  }
  // Merge the quad's partial states, then write the row partials.
  write_mma_rows(m, s, alpha, sd, row0 + wrow, g, t, row_end);
}

/// Tile choice per width (the traits of the kernel that serves W words per row): n-tiles per
/// half tile and the minimum resident blocks the register allocation must allow. Measured on the
/// H200 (n = m = 50k, 10 alternating iterations, tf32, ms; default = 4 n-tiles, 3 blocks):
///   W = 16: 4 blocks per SM (128 registers, no spill) 22.03 against 23.36 with 3 blocks;
///   W = 64: 2 n-tiles per half (32-key stages) 41.00 against 41.94 (symmetric 40.46 / 41.47,
///           n = 10k 1.895 / 1.956); 2 n-tiles with 4 blocks (128 registers) 41.62;
///   W = 32: 2 n-tiles with 4 blocks 29.04 against 27.74; W = 8 (124 registers) runs 4 blocks.
/// At W = 8 (d = 3, where the SFU bounds) 8 n-tiles per half (one rescale exp2 per 64 keys
/// instead of 32) was slower, 19.68 against 19.11, and so was computing 1/8 or 1/4 of the
/// exponentials on the FMA pipe with a degree-5 polynomial (FlashAttention-4's idea): 20.38 /
/// 21.28 with 8 n-tiles, 21.93 for 1/4 with 4 n-tiles. Pairwise-tree max and sum in the fold
/// (shorter dependency chains) measured 19.49 at W = 8 and 41.94 at W = 64: no gain, not kept.
template <int kW>
struct MmaPipeConfig {
  static constexpr int kHalfNT = kW == 64 ? 2 : 4;
  static constexpr int kMinBlocks = kW == 16 ? 4 : 3;
};

/// Host side: f(kernel) for the kernel of `words` words per row (8, 16, 32 or 64), plain or with
/// the policies.
template <class Mma, int kW, bool kPolicies, bool kClassPot = false>
constexpr auto mma_pipe_kernel() {
  return lse_mma_pipe_kernel<Mma, kW, MmaPipeConfig<kW>::kHalfNT, MmaPipeConfig<kW>::kMinBlocks,
                             kPolicies, kClassPot>;
}
template <class Mma, bool kPolicies, class F, bool kClassPot = false>
void with_mma_pipe_kernel_p(int words, F&& f) {
  switch (words) {
    case 8:
      return f(mma_pipe_kernel<Mma, 8, kPolicies, kClassPot>());
    case 16:
      return f(mma_pipe_kernel<Mma, 16, kPolicies, kClassPot>());
    case 32:
      return f(mma_pipe_kernel<Mma, 32, kPolicies, kClassPot>());
    default:
      return f(mma_pipe_kernel<Mma, 64, kPolicies, kClassPot>());
  }
}
template <class Mma, class F>
void with_mma_pipe_kernel(int words, F&& f) {
  with_mma_pipe_kernel_p<Mma, false>(words, static_cast<F&&>(f));
}

/// Resident blocks per SM of the pipelined kernel (occupancy query).
template <class Mma>
int mma_pipe_blocks_per_sm(int words) {
  int nb = 0;
  with_mma_pipe_kernel<Mma>(words, [&](auto kernel) {
    KANTOR_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, kernel, 128, 0));
  });
  return nb;
}

/// Launches the pipelined kernel for pass p whose clouds have `words` words per row.
template <class Mma>
void launch_mma_pipe(const LsePass<float>& p, int words, cudaStream_t st) {
  if (words != 8 && words != 16 && words != 32 && words != 64)
    throw InvalidArgument("tensor-core LSE kernel: row width must be 8, 16, 32 or 64 words");
  auto a16 = [](const void* q) { return reinterpret_cast<std::uintptr_t>(q) % 16 == 0; };
  // Guard: the key rows are staged by 16-byte copies and the query rows read as 8-byte pairs.
  for (int k = 0; k < p.nsides; ++k)
    if (!a16(p.side[k].keys) || !a16(p.side[k].queries))
      throw InvalidArgument("tensor-core LSE kernel: clouds must be 16-byte aligned");
  constexpr int kRows = MmaPipeTile<8>::kRows;
  static_assert(kRows == kBlockRows, "class-aligned tiles hold at most kBlockRows rows");
  // The class-potential variant when every side of the pass has class-aligned tiles, else the
  // policy variant when a side has a policy, else the plain kernel.
  bool raw16 = true, policies = false, class_pot = true;
  for (int k = 0; k < p.nsides; ++k) {
    const LseSide<float>& sd = p.side[k];
    raw16 = raw16 && a16(sd.key_pot) && a16(sd.key_norm) && a16(sd.key_logw);
    if (sd.pair) raw16 = raw16 && a16(sd.key_labels);
    policies = policies || sd.pair != nullptr || sd.run_ptr != nullptr;
    class_pot = class_pot && sd.tile_start != nullptr && sd.run_ptr == nullptr;
  }
  if (class_pot)
    for (int k = 0; k < p.nsides; ++k)
      raw16 = raw16 && a16(p.side[k].class_pot) && p.side[k].nkeys % 4 == 0;
  auto blocks = [&](const LseSide<float>& sd) {
    return class_pot ? sd.tiles : (sd.rows + kRows - 1) / kRows;
  };
  const int b0 = int(blocks(p.side[0]));
  const int b1 = p.nsides > 1 ? int(blocks(p.side[1])) : 0;
  if (b0 + b1 == 0) return;  // no rows: nothing to reduce (an empty grid cannot launch)
  const dim3 grid(unsigned(b0 + b1), unsigned(p.splits));
  auto go = [&](auto kernel) { kernel<<<grid, 128, 0, st>>>(p, b0, raw16); };
  if (class_pot)
    with_mma_pipe_kernel_p<Mma, false, decltype(go)&, true>(words, go);
  else if (policies)
    with_mma_pipe_kernel_p<Mma, true>(words, go);
  else
    with_mma_pipe_kernel_p<Mma, false>(words, go);
  KANTOR_CUDA_CHECK_LAUNCH();
}

}  // namespace kantor::cuda
