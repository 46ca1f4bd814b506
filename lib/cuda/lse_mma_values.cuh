// Tensor-core value kernel (TF32 scores): one streaming pass per (row block, key split, block of 64
// value columns) computes the LSE state (M_i, S_i) of each query row and the value columns
//   A_ik = sum_j exp2(alpha u_ij + nam_i) V_jk,   nam_i = -alpha M_i   (fp32 product),
// with the scores u_ij = beta_j + <x~_i, y~_j> on the tensor cores exactly as the pipelined LSE
// kernel (lib/cuda/lse_mma_pipe.cuh: the same fragments, key staging, key range and key bias;
// the A fragments resident in registers, or at W = 64 in shared memory), and the product P V as a
// second MMA on the probabilities, in fp16 (below; FlashAttention-2 style: the accumulators are
// rescaled when the running maximum grows). The finalize kernel (lse_values_tf32.cu) merges the
// splits in double and applies the row prefactor. Conventions: lib/cuda/lse_params.hpp; API:
// lib/cuda/lse_values.hpp.
//
// P V in half precision (m16n8k16 f16, fp32 accumulation). The probabilities and the values
// enter the second MMA as IEEE fp16, which has TF32's 11-bit significand (both round to nearest,
// relative 2^-11) and twice its MMA rate per instruction (one m16n8k16 does the work of two
// m16n8k8 TF32 MMAs in the same issue slot). fp16's narrow range is handled by exact powers of
// two: the probabilities are formed as p' = 2^7 p <= 2^15 (p <= 2^kSlack, see below; p' below
// 2^-14, i.e. p < 2^-21 of the row's running maximum, is subnormal: absolute error <= 2^-32 in p
// units), and the launcher converts V once per pass to fp16 with a power-of-two scale per column
// that puts the column's largest |V| in [2^13, 2^14) (lse_values_tf32.cu; elements below 2^-38 of
// the column's largest are subnormal). Both factors are removed exactly, 2^-7 when the partials
// are written and the column scale in the finalize.
//
// Fragment mapping (PTX ISA, "Matrix Fragments for mma.m16n8k16" with .f16): the score
// accumulators of two consecutive n-tiles nt, nt + 1 give thread (g = lane / 4, t = lane % 4)
// rows g, g+8 and keys nt*8 + 2t, +1 (c0 c1 = row g, c2 c3 = row g+8): packed in pairs they are
// the A fragment of one k16 step over those 16 keys as they lie, a0 = (g, keys 2t, 2t+1),
// a1 = (g+8, same), a2 = (g, keys 8+2t, 8+2t+1), a3 = (g+8, same) (FlashAttention-2's mapping).
// B = the staged fp16 values, key rows x 8 columns, is read with ldmatrix.trans: thread (g, t)
// gets b0 = (keys 2t, 2t+1; column g), b1 = (keys 8+2t, 8+2t+1; column g) of each 8-column block,
// and the result d0 d1 = (row g, columns 2t, 2t+1 of the block), d2 d3 = row g+8.
//
// Columns: a block serves up to 64 value columns as ncb = 1, 2, 4 or 8 column blocks of 8 (the
// fewest that hold them; runtime, warp-uniform): column c of the block is column block c / 8,
// column c % 8. Staged layout: key row r of a stage holds its 64 fp16 values at halves
// [r kVStrideH, r kVStrideH + 64), kVStrideH = 72 (144 bytes): the 8 row addresses of one
// ldmatrix 8x8 matrix (8 consecutive key rows, one 16-byte column chunk) start 36 words apart,
// on 8 distinct groups of 4 banks (conflict-free).
//
// Rescaling (FlashAttention-4): the running maximum of a row moves only when a tile's maximum
// exceeds it by more than kSlack / alpha (a factor 2^8), so exponentials stay <= 2^8 and the
// accumulators are rescaled (a warp-uniform branch) only a few times per row, by
// exp2(nam_new - nam_old), the ratio of the fp32 offsets actually used: every term then carries
// the final nam exactly up to the rounding of that difference. The maximum is quad-uniform (two
// shuffles per row and stage of 64 keys), because the 4 threads of a quad contribute to the same
// MMA. One stage is folded at once (fold_values_stage): scores of both halves, one maximum, the
// rare rescale branch, then the exponentials and the P V MMAs of both halves in one basic block.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "lib/cuda/check.hpp"
#include "lib/cuda/lse_common.cuh"
#include "lib/cuda/lse_mma_pipe.cuh"
#include "lib/cuda/lse_mma_rows.cuh"
#include "lib/cuda/lse_params.hpp"
#include "lib/cuda/lse_values.hpp"

namespace kantor::cuda {

/// Traits of the value kernel per width: n-tiles per half tile (4: stages of 64 keys, so that the
/// per-stage work (staging, key bias, barrier, maxima, rescale test) is amortized over 64 keys),
/// the place of the query A fragments, and the minimum resident blocks the register allocation must
/// allow (2: 8 warps per SM; the value accumulators alone are 64 registers and a stage's scores
/// another 64). At W = 64 the A fragments (64 registers) live in shared memory instead of
/// registers (mma_stage_smem_a): with them resident the kernel would need more than 255.
/// Measured (H100, n = m = 50,000, K = 64, tf32; docs/benchmarks.md, "P V at 1.37 LSE passes"):
/// at W = 64 these stages take P V from 3.75 ms to 2.72 ms (one LSE pass: 1.99 ms).
template <int kW>
struct MmaValueConfig {
  static constexpr int kHalfNT = 4;
  static constexpr bool kQuerySmem = kW == 64;
  static constexpr int kMinBlocks = 2;
};

/// Tile of the value kernel for kW words per row: the LSE kernel's rows (4 warps x 2 m-tiles =
/// 128 rows) and key staging, plus a stage of kKeys fp16 value rows of up to 64 columns.
template <int kW>
struct MmaValueTile {
  static constexpr int kHalfNT = MmaValueConfig<kW>::kHalfNT;
  using Pipe = MmaPipeTile<kW, kHalfNT>;
  static constexpr int kKeys = Pipe::kKeys;
  static constexpr int kCols = kValueBlockCols;
  static constexpr int kColBlocks = kCols / 8;
  static constexpr int kVStrideH = kCols + 8;  // halves per staged key row (144 bytes)
  static constexpr float kSlack = 8.f;         // log2 units: the running maximum lags by < 2^8
  static constexpr float kPScaleLog2 = 7.f;    // p' = 2^7 p <= 2^15 in fp16
  static_assert(kCols == 64 && (kVStrideH / 2) % 32 == 4, "the conflict-free layout assumes these");
  static_assert(Pipe::kThreads == 128 && (kKeys * 8) % 128 == 0, "whole staging rounds");
  static_assert(kHalfNT % 2 == 0, "k16 steps of two n-tiles");
};

template <int kW>
struct MmaValueSmem {
  using VT = MmaValueTile<kW>;
  static constexpr int kQSlots = MmaValueConfig<kW>::kQuerySmem ? 2 * (kW / 8) * 32 : 1;
  MmaPipeSmem<kW, VT::kHalfNT> pipe;                 // keys, raw key inputs, warp biases
  std::uint16_t vals[2][VT::kKeys * VT::kVStrideH];  // fp16 value rows of each stage
  // kQuerySmem: each warp's A fragments, (m-tile mt, k-step kk) of lane l at [(mt kKSteps + kk)
  // 32 + l] (one conflict-free LDS.128 per fragment); written and read by the same thread.
  uint4 qfrag[VT::Pipe::kWarps][kQSlots];
};

/// Scores of both halves of a stage (acc0: n-tiles 0..kHNT-1, acc1: the rest) with the A
/// fragments read from shared memory (qa: this lane's slots, MmaValueSmem::qfrag) two k-steps at
/// a time, each read once per stage: the same MMAs, in the same k order per score, as two calls of
/// mma_pipe_half on resident fragments.
template <int kW, int kHNT>
__device__ __forceinline__ void mma_stage_smem_a(float (&acc0)[2][kHNT][4],
                                                 float (&acc1)[2][kHNT][4], const uint4* qa,
                                                 const float* ks, const float* wb, int g, int t) {
  using Tile = MmaPipeTile<kW, kHNT>;
  constexpr int kS = Tile::kStride, kKS = Tile::kKSteps;
  static_assert(kW >= 16, "two k-steps per key load");
  float2 bb[2 * kHNT];  // the key bias of each n-tile: the C operand of its first k-step
#pragma unroll
  for (int n = 0; n < 2 * kHNT; ++n) bb[n] = *reinterpret_cast<const float2*>(&wb[n * 8 + 2 * t]);
#pragma unroll
  for (int q = 0; q < kKS / 2; ++q) {
    std::uint32_t a[2][2][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const uint4 v = qa[(mt * kKS + 2 * q + e) * 32];
        a[mt][e][0] = v.x;
        a[mt][e][1] = v.y;
        a[mt][e][2] = v.z;
        a[mt][e][3] = v.w;
      }
#pragma unroll
    for (int n = 0; n < 2 * kHNT; ++n) {
      const float4 v = *reinterpret_cast<const float4*>(&ks[(n * 8 + g) * kS + 16 * q + 4 * t]);
#pragma unroll
      for (int e = 0; e < 2; ++e)
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          float(&d)[4] = n < kHNT ? acc0[mt][n] : acc1[mt][n - kHNT];
          const std::uint32_t b0 = __float_as_uint(e ? v.z : v.x);
          const std::uint32_t b1 = __float_as_uint(e ? v.w : v.y);
          if (q == 0 && e == 0)
            mma_tf32(d, a[mt][e], b0, b1, bb[n].x, bb[n].y, bb[n].x, bb[n].y);
          else
            mma_tf32(d, a[mt][e], b0, b1, d[0], d[1], d[2], d[3]);
        }
    }
  }
}

/// D += A B, m16n8k16, A row-major fp16 (4 regs of f16x2), B col-major fp16 (2 regs), fp32 D.
__device__ __forceinline__ void mma_f16(float (&d)[4], const std::uint32_t (&a)[4],
                                        std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// Two floats -> f16x2 (round to nearest even), lo in the low half (the lower k index).
__device__ __forceinline__ std::uint32_t pack_f16x2(float lo, float hi) {
  std::uint32_t r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

/// ldmatrix .trans of four (x4) or two (x2) 8x8 fp16 matrices; `addr` = this lane's row address
/// (shared state space). Lanes 8q..8q+7 address the rows of matrix q; r[q] is its fragment.
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x2_trans(std::uint32_t (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}

/// Stages the fp16 values of keys [t0, t0 + kKeys) into the value stage vs (16-byte copies into
/// the current cp.async group): `nch` 16-byte chunks (8 columns each) per key row from Vh (the
/// block's first column, row stride kp halves, 16-byte aligned). Keys past kend get zeros (their
/// probability is 0 and 0 * 0 stays 0); chunks past nch are never written (zeroed once by the
/// kernel).
template <int kW, bool kFull = false>
__device__ __forceinline__ void mma_value_issue(std::uint16_t* vs,
                                                const std::uint16_t* __restrict__ Vh,
                                                std::int64_t kp, std::int64_t t0, std::int64_t kend,
                                                int nch, int tid) {
  using VT = MmaValueTile<kW>;
#pragma unroll
  for (int i = 0; i < VT::kKeys * 8 / 128; ++i) {  // 8 chunks per row, 128 threads
    const int idx = tid + 128 * i, jj = idx >> 3, ch = idx & 7;
    if (ch < nch) {
      const bool ok = kFull || t0 + jj < kend;
      cp_async16(vs + jj * VT::kVStrideH + 8 * ch, ok ? Vh + (t0 + jj) * kp + 8 * ch : Vh, ok);
    }
  }
}

/// vacc += P' V for one half tile of probabilities p (2 m-tiles x kHNT n-tiles) on the tensor
/// cores, one m16n8k16 per k16 step (two n-tiles of the half) and column block: A = p' packed to
/// f16x2 as it lies, B = the staged values by ldmatrix.trans. vaddr: the shared address of this
/// lane's ldmatrix row in the current value stage (key row (lane & 7) + 8 ((lane >> 3) & 1), column
/// block lane >> 4). Compile-time kNCB column blocks: one basic block.
template <int kW, int kNCB>
__device__ __forceinline__ void values_pv(const float (&p)[2][MmaValueTile<kW>::kHalfNT][4],
                                          float (&vacc)[2][8][4], unsigned vaddr, int half) {
  using VT = MmaValueTile<kW>;
  constexpr int kHNT = VT::kHalfNT;
#pragma unroll
  for (int q = 0; q < kHNT / 2; ++q) {
    const int key0 = (half * kHNT + 2 * q) * 8;  // first key (stage row) of this k16 step
    std::uint32_t pa[2][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      pa[mt][0] = pack_f16x2(p[mt][2 * q][0], p[mt][2 * q][1]);          // (g, keys 2t, 2t+1)
      pa[mt][1] = pack_f16x2(p[mt][2 * q][2], p[mt][2 * q][3]);          // (g + 8, same)
      pa[mt][2] = pack_f16x2(p[mt][2 * q + 1][0], p[mt][2 * q + 1][1]);  // (g, keys 8 + 2t, +1)
      pa[mt][3] = pack_f16x2(p[mt][2 * q + 1][2], p[mt][2 * q + 1][3]);  // (g + 8, same)
    }
#pragma unroll
    for (int cp = 0; cp < (kNCB + 1) / 2; ++cp) {
      std::uint32_t b[4];
      const unsigned addr = vaddr + 2u * unsigned(key0 * VT::kVStrideH + 16 * cp);
      if (kNCB == 1)
        ldmatrix_x2_trans(b, addr);
      else
        ldmatrix_x4_trans(b, addr);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) mma_f16(vacc[mt][2 * cp], pa[mt], b[0], b[1]);
      if (2 * cp + 1 < kNCB) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) mma_f16(vacc[mt][2 * cp + 1], pa[mt], b[2], b[3]);
      }
    }
  }
}

/// The largest of x[0..kN) as a balanced tree of fmaxf (depth log2 kN instead of kN).
template <int kN>
__device__ __forceinline__ float tree_max(const float* x) {
  if constexpr (kN == 1) {
    return x[0];
  } else {
    return fmaxf(tree_max<kN / 2>(x), tree_max<kN - kN / 2>(x + kN / 2));
  }
}

/// Folds a whole stage (both halves' scores, acc0 and acc1) in one pass, for kNCB column blocks:
/// one quad-uniform maximum per row over the stage's 2 kHNT n-tiles; only when some row of the
/// warp moves its maximum (by more than the slack: rare), a warp-uniform branch forms the new
/// offsets and rescales S and the value accumulators; then the probabilities p' = 2^7 p in
/// place, S, and vacc += P' V for both halves in one basic block (the exponentials of half 1
/// overlap the MMAs of half 0). State per row: the running maximum m (u units) and nam7 =
/// nam + 7 with nam = -alpha m as the fp32 product (0 while m = -inf), the exponent offset of p'.
template <int kW, int kNCB>
__device__ __forceinline__ void fold_values_stage(float (&acc0)[2][MmaValueTile<kW>::kHalfNT][4],
                                                  float (&acc1)[2][MmaValueTile<kW>::kHalfNT][4],
                                                  float (&vacc)[2][8][4], float (&m)[2][2],
                                                  float (&nam7)[2][2], float (&s)[2][2],
                                                  unsigned vaddr, float alpha) {
  using VT = MmaValueTile<kW>;
  constexpr int kHNT = VT::kHalfNT;
  float tmax[2][2];
  bool grow[2][2], grow_any = false;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float x[4 * kHNT];
#pragma unroll
      for (int n = 0; n < kHNT; ++n) {
        x[4 * n] = acc0[mt][n][2 * h];
        x[4 * n + 1] = acc0[mt][n][2 * h + 1];
        x[4 * n + 2] = acc1[mt][n][2 * h];
        x[4 * n + 3] = acc1[mt][n][2 * h + 1];
      }
      float tm = tree_max<4 * kHNT>(x);
      tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 1));
      tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 2));
      tmax[mt][h] = tm;
      // Guards: tmax = -inf (all masked so far or here) never moves the maximum (the comparison
      // of NaN or -inf is false); the first finite tile always does (+inf > slack).
      grow[mt][h] = alpha * (tm - m[mt][h]) > VT::kSlack;
      grow_any = grow_any || grow[mt][h];
    }
  }
  if (__any_sync(0xffffffffu, grow_any)) {
    float scale[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float mo = m[mt][h];
        const float nam_old = mo == -INFINITY ? 0.f : -alpha * mo;
        const float nam_new = -alpha * tmax[mt][h];
        // The ratio of the offsets actually used (0 on the state that is still all zeros).
        scale[mt][h] = !grow[mt][h] ? 1.f : (mo == -INFINITY ? 0.f : fast_exp2(nam_new - nam_old));
        if (grow[mt][h]) {
          m[mt][h] = tmax[mt][h];
          nam7[mt][h] = nam_new + VT::kPScaleLog2;
        }
        s[mt][h] *= scale[mt][h];
      }
    }
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
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float nm = nam7[mt][h];
      float ts0 = 0.f, ts1 = 0.f;
#pragma unroll
      for (int n = 0; n < kHNT; ++n) {
        acc0[mt][n][2 * h] = fast_exp2(fmaf(alpha, acc0[mt][n][2 * h], nm));
        acc0[mt][n][2 * h + 1] = fast_exp2(fmaf(alpha, acc0[mt][n][2 * h + 1], nm));
        acc1[mt][n][2 * h] = fast_exp2(fmaf(alpha, acc1[mt][n][2 * h], nm));
        acc1[mt][n][2 * h + 1] = fast_exp2(fmaf(alpha, acc1[mt][n][2 * h + 1], nm));
        ts0 += acc0[mt][n][2 * h] + acc1[mt][n][2 * h];
        ts1 += acc0[mt][n][2 * h + 1] + acc1[mt][n][2 * h + 1];
      }
      s[mt][h] += ts0 + ts1;
    }
  }
  values_pv<kW, kNCB>(acc0, vacc, vaddr, 0);
  values_pv<kW, kNCB>(acc1, vacc, vaddr, 1);
}

/// Value partials: grid (row blocks, splits, column blocks of 64). Writes, for split s = blockIdx.y
/// and column block z = blockIdx.z, with R = rows, S = splits, G = gridDim.z:
///   M[(z S + s) R + i]             at workspace,             (the running maximum, u units)
///   S[(z S + s) R + i]             at workspace + G S R,
///   A[((z S + s) R + i) astride + c] at workspace + 2 G S R, c < min(64, vcols - 64 z),
/// astride = min(vcols, 64), A in the column-scaled units of the fp16 values (the finalize
/// removes the scale). raw16: key_pot, key_norm, key_logw 16-byte aligned. vh: the fp16 values,
/// nkeys x kp halves (kp = vcols rounded up to 8), 16-byte aligned.
template <int kW, int kMinB>
__global__ void __launch_bounds__(128, kMinB)
    lse_mma_values_kernel(MmaValuePass p, float alpha, bool raw16, const std::uint16_t* vh,
                          std::int64_t kp) {
  using VT = MmaValueTile<kW>;
  using Tile = typename VT::Pipe;
  constexpr int kHNT = VT::kHalfNT;
  extern __shared__ __align__(16) unsigned char value_smem[];
  MmaValueSmem<kW>& sm = *reinterpret_cast<MmaValueSmem<kW>*>(value_smem);

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
  const int nch = (cols + 7) >> 3;
  const std::uint16_t* V = vh + VT::kCols * z;

  constexpr bool kQSmem = MmaValueConfig<kW>::kQuerySmem;
  std::uint32_t a[2][kQSmem ? 1 : Tile::kKSteps][4];
  uint4* qa = &sm.qfrag[warp][lane];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int kk = 0; kk < Tile::kKSteps; ++kk) {
      if constexpr (kQSmem) {
        std::uint32_t f[4];
        load_query_frag<kW>(f, sd.queries, sd.rows, row0 + wrow + mt * 16 + g, kk, t);
        qa[(mt * Tile::kKSteps + kk) * 32] = make_uint4(f[0], f[1], f[2], f[3]);
      } else {
        load_query_frag<kW>(a[mt][kk], sd.queries, sd.rows, row0 + wrow + mt * 16 + g, kk, t);
      }
    }
  float m[2][2], nam7[2][2], s[2][2], vacc[2][VT::kColBlocks][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    m[mt][0] = m[mt][1] = -INFINITY;
    nam7[mt][0] = nam7[mt][1] = VT::kPScaleLog2;
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
  // The stage of keys [t0, t0 + kKeys) into buffer b; the unguarded copies when all of it is in
  // range (every stage but a block's last).
  auto issue = [&](std::int64_t t0, int b) {
    if (t0 + Tile::kKeys <= kend) {
      mma_pipe_issue<kW, kHNT, 3, true>(sm.pipe, Y, raw_src, kend, t0, b, tid, jj0, k4, rq, rc,
                                        raw16);
      mma_value_issue<kW, true>(sm.vals[b], V, kp, t0, kend, nch, tid);
    } else {
      mma_pipe_issue<kW, kHNT>(sm.pipe, Y, raw_src, kend, t0, b, tid, jj0, k4, rq, rc, raw16);
      mma_value_issue<kW>(sm.vals[b], V, kp, t0, kend, nch, tid);
    }
    cp_async_commit();
  };
  float* wb = sm.pipe.bias[warp];
  auto make_bias = [&](std::int64_t t0, int b) {
    mma_pipe_bias<kW, kHNT>(sm.pipe, t0, kend, b, wb, lane, eps, inv_2c);
  };
  // This lane's ldmatrix row in stage 0 (key row (lane & 7) + 8 ((lane >> 3) & 1), column
  // block lane >> 4); stage 1 is sizeof(sm.vals[0]) further.
  const unsigned vaddr0 = unsigned(__cvta_generic_to_shared(
      &sm.vals[0][((lane & 7) + 8 * ((lane >> 3) & 1)) * VT::kVStrideH + 8 * (lane >> 4)]));
  constexpr unsigned kStageBytes = sizeof(sm.vals[0]);

  // Chunks the copies never write (columns past nch * 8) must hold finite values: zero both
  // stages once, before any copy lands.
  for (int b = 0; b < 2; ++b)
    for (int i = tid; i < VT::kKeys * VT::kVStrideH; i += Tile::kThreads) sm.vals[b][i] = 0;
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
  // The stream over the key stages, for a compile-time number of column blocks (one switch per
  // block, not per half tile: the stage's fold and MMAs stay in few basic blocks).
  auto stream = [&](auto ncb_tag) {
    constexpr int kNCB = decltype(ncb_tag)::value;
    for (std::int64_t t0 = kbeg; t0 < kend; t0 += Tile::kKeys) {
      const float* ks = sm.pipe.keys[buf];
      const unsigned vaddr = vaddr0 + unsigned(buf) * kStageBytes;
      // Both halves' scores, then the stage's fold and P V. Everything of this stage is read
      // before the barrier below.
      if constexpr (kQSmem) {
        mma_stage_smem_a<kW, kHNT>(acc0, acc1, qa, ks, wb, g, t);
      } else {
        mma_pipe_half<MmaTf32, kW, kHNT>(acc0, a, ks, wb, 0, g, t);
        mma_pipe_half<MmaTf32, kW, kHNT>(acc1, a, ks, wb, 1, g, t);
      }
      fold_values_stage<kW, kNCB>(acc0, acc1, vacc, m, nam7, s, vaddr, alpha);
      const std::int64_t t1 = t0 + Tile::kKeys;
      if (t1 < kend) {
        cp_async_wait_all();  // tile t+1 has landed (this thread's copies)
        __syncthreads();      // everyone's copies visible; buffer `buf` is free
        if (t1 + Tile::kKeys < kend) issue(t1 + Tile::kKeys, buf);
        make_bias(t1, buf ^ 1);
      }
      buf ^= 1;
    }
  };
  switch (lg) {  // block-uniform
    case 0:
      stream(std::integral_constant<int, 1>{});
      break;
    case 1:
      stream(std::integral_constant<int, 2>{});
      break;
    case 2:
      stream(std::integral_constant<int, 4>{});
      break;
    default:
      stream(std::integral_constant<int, 8>{});
      break;
  }

  // Partials, with the 2^7 of p' removed (exact). The quad shares M (quad-uniform); S sums the
  // quad's keys; A is already complete per thread (the MMA summed over the quad's keys):
  // d0 d1 = row g, columns 2t, 2t+1 of each column block, d2 d3 = row g + 8.
  constexpr float kUnscale = 1.f / 128.f;
  static_assert(VT::kPScaleLog2 == 7.f, "kUnscale = 2^-kPScaleLog2");
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
          ws[i] = sum * kUnscale;
        }
#pragma unroll
        for (int cb = 0; cb < VT::kColBlocks; ++cb) {
          if (cb < ncb) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int c = 8 * cb + 2 * t + e;
              if (c < cols) wa[i * astride + c] = vacc[mt][cb][2 * h + e] * kUnscale;
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

/// Host side: f(kernel, dynamic shared bytes) for the value kernel of `words` words per row (8,
/// 16, 32 or 64), its shared-memory limit raised to those bytes (above the 48 KB default at 64).
template <class F>
void with_mma_values_kernel(int words, F&& f) {
  auto call = [&](auto kernel, std::size_t bytes) {
    KANTOR_CUDA_TRY(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    return f(kernel, bytes);
  };
  switch (words) {
    case 8:
      return call(mma_values_kernel<8>(), sizeof(MmaValueSmem<8>));
    case 16:
      return call(mma_values_kernel<16>(), sizeof(MmaValueSmem<16>));
    case 32:
      return call(mma_values_kernel<32>(), sizeof(MmaValueSmem<32>));
    default:
      return call(mma_values_kernel<64>(), sizeof(MmaValueSmem<64>));
  }
}

}  // namespace kantor::cuda
