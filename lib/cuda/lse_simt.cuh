// CUDA-core streaming LSE kernels with exact differences (the reference path: fp32 strict and
// fp64 updates, and every value pass). One query row per thread; key tiles stream through shared
// memory in d-chunks; online (max, sum) in the exp2 domain. Conventions: lib/cuda/lse_params.hpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "lib/cuda/lse_common.cuh"
#include "lib/cuda/lse_params.hpp"

namespace kantor::cuda {

/// Tile of the CUDA-core kernels: 128 query rows per block (one per thread), kKeys keys per
/// shared-memory tile, kDC coordinates per d-chunk (the stored clouds are zero-padded to a
/// multiple of kDC, so no guard is needed on coordinates).
template <class T, int kDC>
struct SimtTile {
  static constexpr int kThreads = 128;
  static constexpr int kKeys = std::is_same<T, double>::value ? 16 : 32;
  static constexpr int kVals = kValueChunk;
  static constexpr int kSmemBytes = int(sizeof(T)) * (kKeys * kDC + kKeys + kKeys * kVals);
  static_assert(kDC == 4 || kDC == 16, "d-chunks of 4 (d <= 4) or 16 coordinates");
  static_assert(kSmemBytes <= 16 * 1024, "keep several blocks resident per SM");
  // Registers per thread (in T words): kKeys distances + kDC coordinates + kVals accumulators.
  static_assert((kKeys + kDC + kVals) * sizeof(T) / 4 <= 160, "register budget");
};

/// Running state of one query row.
template <class T, int kVals>
struct ScanState {
  T m;                           // max_j u_ij so far (u units), -inf before any unmasked key
  T s;                           // sum_j exp2(alpha (u_ij - m))
  T acc[kVals > 0 ? kVals : 1];  // sum_j exp2(alpha (u_ij - m)) V_jk
  T cost;                        // sum_j exp2(alpha (u_ij - m)) |x_i - y_j|^2
};

/// Starts a row's state: the empty set (m = -inf, s = 0, values 0).
template <class A, int kVals>
__device__ __forceinline__ void scan_init(ScanState<A, kVals>& st) {
  st.m = neg_inf<A>();
  st.s = 0;
  st.cost = 0;
#pragma unroll
  for (int k = 0; k < (kVals > 0 ? kVals : 1); ++k) st.acc[k] = 0;
}

/// Adds keys [kbeg, kend) to the calling thread's row `row` (rows past sd.rows compute on
/// zeros and are discarded by the caller). All threads of the block must call it together.
/// With the side's pair term, u_ij -= pair[l_i, l_j] (key labels staged with the bias).
/// T: storage type of the clouds, potentials and values; A: arithmetic type (A = double for the
/// value passes of float data: their exponents are differences of large terms, (g_j - C_ij)/eps,
/// whose float rounding would cost ~2^-24 (|g| + C)/eps relative in every P_ij).
template <class T, class A, int kDC, int kVals, bool kCost>
__device__ __forceinline__ void simt_scan(const LseSide<T>& sd, int ld, A eps, A inv_c, A alpha,
                                          std::int64_t row, std::int64_t kbeg, std::int64_t kend,
                                          const T* __restrict__ values, std::int64_t vstride,
                                          int vcols, ScanState<A, kVals>& st) {
  using Tile = SimtTile<A, kDC>;
  constexpr int kKeys = Tile::kKeys;
  __shared__ A ks[kKeys][kDC];
  __shared__ A bias_s[kKeys];
  __shared__ A vals_s[kVals > 0 ? kKeys : 1][kVals > 0 ? kVals : 1];
  __shared__ std::int32_t lab_s[kKeys];
  const int tid = threadIdx.x;
  const bool row_ok = row < sd.rows;
  const bool pair = sd.pair != nullptr;
  const T* __restrict__ pair_row =
      pair ? sd.pair + std::int64_t(sd.query_labels[row_ok ? row : 0]) * sd.classes : nullptr;
  const T* __restrict__ xq = sd.queries + (row_ok ? row : 0) * std::int64_t(ld);
  const int nchunks = ld / kDC;
  A xr[kDC];
  if (nchunks == 1) {
#pragma unroll
    for (int k = 0; k < kDC; ++k) xr[k] = row_ok ? A(xq[k]) : A(0);
  }
  for (std::int64_t t0 = kbeg; t0 < kend; t0 += kKeys) {
    __syncthreads();  // the previous tile's shared memory is no longer read
    // beta_j = (g_j + eps log b_j) / c from the key potential and log weight (global, once per
    // block and key). Guard: keys past kend and zero-weight keys get -inf (masked).
    for (int jj = tid; jj < kKeys; jj += Tile::kThreads) {
      const std::int64_t j = t0 + jj;
      bias_s[jj] = j < kend ? (A(sd.key_pot[j]) + eps * A(sd.key_logw[j])) * inv_c : neg_inf<A>();
      if (pair) lab_s[jj] = j < kend ? sd.key_labels[j] : 0;
    }
    if constexpr (kVals > 0) {
      // V_jk from the value matrix (global, row stride vstride); zero past vcols or kend.
      for (int idx = tid; idx < kKeys * kVals; idx += Tile::kThreads) {
        const int jj = idx / kVals, k = idx % kVals;
        const std::int64_t j = t0 + jj;
        vals_s[jj][k] = (j < kend && k < vcols) ? A(values[j * vstride + k]) : A(0);
      }
    }
    A dist[kKeys];
#pragma unroll
    for (int jj = 0; jj < kKeys; ++jj) dist[jj] = 0;
    for (int c = 0; c < nchunks; ++c) {
      if (c > 0) __syncthreads();  // the previous chunk is no longer read
      // y chunk: ks[jj][k] = y_{t0+jj, c kDC + k} (global, coalesced along k), 0 past kend.
      for (int idx = tid; idx < kKeys * kDC; idx += Tile::kThreads) {
        const int jj = idx / kDC, k = idx % kDC;
        const std::int64_t j = t0 + jj;
        ks[jj][k] = j < kend ? A(sd.keys[j * ld + c * kDC + k]) : A(0);
      }
      if (nchunks > 1) {
#pragma unroll
        for (int k = 0; k < kDC; ++k) xr[k] = row_ok ? A(xq[c * kDC + k]) : A(0);
      }
      __syncthreads();
      // |x_i - y_j|^2 += sum_k (x_ik - y_jk)^2: x from registers, y broadcast from shared.
#pragma unroll
      for (int jj = 0; jj < kKeys; ++jj) {
#pragma unroll
        for (int k = 0; k < kDC; ++k) {
          const A diff = xr[k] - ks[jj][k];
          dist[jj] = fma(diff, diff, dist[jj]);
        }
      }
    }
    // The cost in u units: |x_i - y_j|^2 (+ the pair term c_w W / c); u_ij = beta_j - cost;
    // tile max, then rescale the running state only when the max grows (online_raise: -inf
    // safe).
    if (pair) {
#pragma unroll
      for (int jj = 0; jj < kKeys; ++jj) dist[jj] += A(pair_row[lab_s[jj]]);
    }
    A u[kKeys];
    A tmax = neg_inf<A>();
#pragma unroll
    for (int jj = 0; jj < kKeys; ++jj) {
      u[jj] = bias_s[jj] - dist[jj];
      tmax = u[jj] > tmax ? u[jj] : tmax;
    }
    {
      const A scale = online_raise(st.m, tmax, alpha, FastExp2{});
      if (scale != A(1)) {
        st.s *= scale;
        st.cost *= scale;
#pragma unroll
        for (int k = 0; k < (kVals > 0 ? kVals : 1); ++k) st.acc[k] *= scale;
      }
    }
    // Guard: a row that has only seen masked keys keeps m = -inf; exp2(-inf - -inf) would be
    // NaN, so it adds nothing.
    if (st.m != neg_inf<A>()) {
      const A nam = -alpha * st.m;
      A ts = 0;  // tile sum first, then one add: shorter fp32 accumulation chains
#pragma unroll
      for (int jj = 0; jj < kKeys; ++jj) {
        const A e = fast_exp2(fma(alpha, u[jj], nam));  // masked u = -inf -> 0
        ts += e;
        if (kCost) st.cost = fma(e, dist[jj], st.cost);
        if constexpr (kVals > 0) {
#pragma unroll
          for (int k = 0; k < (kVals > 0 ? kVals : 1); ++k)
            st.acc[k] = fma(e, vals_s[jj][k], st.acc[k]);
        }
      }
      st.s += ts;
    }
  }
}

/// Key range [kbeg, kend) of split `split` out of `splits` over nkeys keys (multiples of tile).
__device__ __forceinline__ void split_range(std::int64_t nkeys, int splits, int split, int tile,
                                            std::int64_t* kbeg, std::int64_t* kend) {
  std::int64_t per = (nkeys + splits - 1) / splits;
  per = (per + tile - 1) / tile * tile;
  *kbeg = per * split;
  *kend = min(nkeys, *kbeg + per);
  if (*kbeg > nkeys) *kbeg = nkeys;
}

/// Calls f(kbeg, kend) for each contiguous key range that row block `rb`, split `split` of
/// `splits` scans under the side's key schedule: the split-K range of a dense schedule (key
/// ranges multiples of `tile`), or this split's share of the row block's block-list tiles (the
/// tiles of its runs in list order, divided evenly by count). Block-uniform.
template <class T, class F>
__device__ __forceinline__ void for_each_key_range(const LseSide<T>& sd, std::int64_t rb,
                                                   int splits, int split, int tile, F&& f) {
  if (sd.run_ptr == nullptr) {
    std::int64_t kbeg, kend;
    split_range(sd.nkeys, splits, split, tile, &kbeg, &kend);
    if (kbeg < kend) f(kbeg, kend);
    return;
  }
  const std::int64_t p0 = sd.run_ptr[rb], p1 = sd.run_ptr[rb + 1];
  std::int64_t total = 0;
  for (std::int64_t q = p0; q < p1; ++q) total += sd.runs[2 * q + 1] - sd.runs[2 * q];
  const std::int64_t lo = total * split / splits, hi = total * (split + 1) / splits;
  std::int64_t off = 0;
  for (std::int64_t q = p0; q < p1 && off < hi; ++q) {
    const std::int64_t b = sd.runs[2 * q], len = sd.runs[2 * q + 1] - b;
    const std::int64_t t_lo = lo > off ? lo : off, t_hi = hi < off + len ? hi : off + len;
    if (t_lo < t_hi) {
      const std::int64_t kbeg = (b + t_lo - off) * sd.key_tile;
      const std::int64_t kend = min(sd.nkeys, (b + t_hi - off) * sd.key_tile);
      if (kbeg < kend) f(kbeg, kend);
    }
    off += len;
  }
}

/// LSE partials of one or two sides: grid (row blocks of side 0 + side 1, splits).
template <class T, int kDC>
__global__ void __launch_bounds__(128) lse_simt_kernel(LsePass<T> p, int blocks_side0) {
  using Tile = SimtTile<T, kDC>;
  const int side = int(blockIdx.x) < blocks_side0 ? 0 : 1;
  const LseSide<T> sd = side ? p.side[1] : p.side[0];
  const std::int64_t rb = std::int64_t(blockIdx.x) - (side ? blocks_side0 : 0);
  const std::int64_t row = rb * Tile::kThreads + threadIdx.x;
  ScanState<T, 0> st;
  scan_init(st);
  for_each_key_range(sd, rb, p.splits, int(blockIdx.y), Tile::kKeys,
                     [&](std::int64_t kbeg, std::int64_t kend) {
                       simt_scan<T, T, kDC, 0, false>(sd, p.ld, p.eps, T(1) / p.cost_scale,
                                                      p.alpha, row, kbeg, kend, nullptr, 0, 0, st);
                     });
  if (row < sd.rows) {
    sd.part_max[std::int64_t(blockIdx.y) * sd.rows + row] = st.m;
    sd.part_sum[std::int64_t(blockIdx.y) * sd.rows + row] = st.s;
  }
}

/// One value pass over all keys: outputs per ValueMode (see lse_params.hpp). Arithmetic A:
/// double for every storage type by default (the passes that run once per solve), or float for
/// float data when the pass asks for it (LseValuePass::float_arithmetic: the apply passes of the
/// HVP's conjugate gradients, two per iteration, in the precision of the fp32 engine).
template <class T, int kDC, class A = double>
__global__ void __launch_bounds__(128) value_simt_kernel(LseValuePass<T> p) {
  using Tile = SimtTile<A, kDC>;
  __shared__ double red[32];
  const LseSide<T>& sd = p.side;
  const std::int64_t row = std::int64_t(blockIdx.x) * Tile::kThreads + threadIdx.x;
  const A eps = A(p.eps), c = A(p.cost_scale);
  const A alpha = A(kLog2e) * c / eps;
  ScanState<A, Tile::kVals> st;
  scan_init(st);
  const bool split_k = p.mode == ValueMode::kApply && p.splits > 1;
  for_each_key_range(sd, std::int64_t(blockIdx.x), split_k ? p.splits : 1,
                     split_k ? int(blockIdx.y) : 0, Tile::kKeys,
                     [&](std::int64_t kbeg, std::int64_t kend) {
                       simt_scan<T, A, kDC, Tile::kVals, true>(sd, p.ld, eps, A(1) / c, alpha,
                                                               row, kbeg, kend, p.values,
                                                               p.vstride, p.vcols, st);
                     });
  if (split_k) {
    // This split's state (m, s, values) for value_merge_kernel: the plan prefactor is applied
    // once, after the merge.
    if (row < sd.rows) {
      double* q = p.partials + (std::int64_t(blockIdx.y) * sd.rows + row) * (2 + kValueChunk);
      q[0] = st.m;
      q[1] = st.s;
      for (int k = 0; k < Tile::kVals; ++k) q[2 + k] = st.acc[k];
    }
    return;
  }
  double mass = 0, cost = 0, fg = 0;
  if (row < sd.rows) {
    // P_ij = w_i exp(f_i/eps) exp2(alpha u_ij) = pref_i * exp2(alpha (u_ij - M_i)), in double.
    // Guard: zero-weight rows and rows without unmasked keys have P_i. = 0 (no exp(-inf + inf)).
    const double pref = plan_prefactor(double(p.query_logw[row]), double(sd.pot[row]), 0.0,
                                       double(eps), double(st.m), double(alpha));
    if (p.mode == ValueMode::kApply) {
      for (int k = 0; k < p.vcols; ++k) p.out[row * p.ostride + k] = T(pref * st.acc[k]);
    } else if (p.mode == ValueMode::kBarycentric) {
      for (int k = 0; k < p.vcols; ++k)
        p.out[row * p.ostride + k] = T(st.acc[k] / st.s + p.center[k]);
    } else {
      mass = pref * st.s;
      cost = pref * double(c) * st.cost;
      fg = double(sd.pot[row]) * mass + pref * st.acc[0];
    }
  }
  if (p.mode == ValueMode::kStats) {
    const double r0 = block_sum(mass, red);
    const double r1 = block_sum(cost, red);
    const double r2 = block_sum(fg, red);
    if (threadIdx.x == 0) {
      p.stat_partials[3 * blockIdx.x + 0] = r0;
      p.stat_partials[3 * blockIdx.x + 1] = r1;
      p.stat_partials[3 * blockIdx.x + 2] = r2;
    }
  }
}

/// Merges the split states of a split-K kApply value pass (one thread per row, double, the
/// shared online_merge) and writes out = pref * values. Guards as value_simt_kernel: masked rows
/// and rows without unmasked keys get 0.
template <class T>
__global__ void __launch_bounds__(256) value_merge_kernel(LseValuePass<T> p) {
  const LseSide<T>& sd = p.side;
  const std::int64_t row = std::int64_t(blockIdx.x) * 256 + threadIdx.x;
  if (row >= sd.rows) return;
  const double eps = double(p.eps), c = double(p.cost_scale);
  // The exponent scale the split kernels used (float-rounded when they ran in float), so that
  // the states' offsets cancel exactly against the prefactor.
  const double alpha =
      p.float_arithmetic
          ? double(float(kLog2e) * float(p.cost_scale) / float(p.eps))
          : kLog2e * c / eps;
  double m = -INFINITY, s = 0, v[kValueChunk];
  for (int k = 0; k < kValueChunk; ++k) v[k] = 0;
  for (int sp = 0; sp < p.splits; ++sp) {
    const double* q = p.partials + (std::int64_t(sp) * sd.rows + row) * (2 + kValueChunk);
    online_merge(m, s, v, q[0], q[1], q + 2, p.vcols, alpha, ExactExp2{});
  }
  const double pref =
      plan_prefactor(double(p.query_logw[row]), double(sd.pot[row]), 0.0, eps, m, alpha);
  for (int k = 0; k < p.vcols; ++k) p.out[row * p.ostride + k] = T(pref * v[k]);
}

}  // namespace kantor::cuda
