// Certificate side pass (lib/cuda/certify.hpp): each thread owns one query row i and sweeps every
// key j in tiles of kKeys, in double:
//   sq_ij = sum_k (x_ik - y_jk)^2         (exact differences; coordinates staged kChunk at a time)
//   then certificate_pair / certificate_row (lib/core/certificate.hpp), the CPU engine's math.
// Bytes: query rows and key tiles go global -> shared (double), potentials and weights of the key
// tile too; each block reduces its rows' sums and adds them to p.out with double atomics (the max
// as an unsigned 64-bit max on the bits of a non-negative double). The pass runs once per
// certificate, so it favours plain, obviously right code over speed.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "kantor/error.hpp"
#include "lib/core/certificate.hpp"
#include "lib/cuda/certify.hpp"
#include "lib/cuda/check.hpp"
#include "lib/cuda/cublas_check.hpp"
#include "lib/cuda/lse_common.cuh"

namespace kantor::cuda {
namespace {

constexpr int kRows = kCertifyRows;  // query rows (threads) per block = the list row tile
constexpr int kKeys = 32;   // keys per tile (distances held in registers)
constexpr int kChunk = 8;   // coordinates staged per step

// The key ranges of a row tile: every key (one range), or the runs of the block list.
struct KeyRanges {
  std::int64_t q0, q1;  // runs [q0, q1)
  template <class T>
  __device__ KeyRanges(const CertifySide<T>& p, unsigned tile)
      : q0(p.run_ptr ? p.run_ptr[tile] : 0), q1(p.run_ptr ? p.run_ptr[tile + 1] : 1) {}
  // Keys [*kb, *ke) of run q.
  template <class T>
  __device__ static void range(const CertifySide<T>& p, std::int64_t q, std::int64_t* kb,
                               std::int64_t* ke) {
    *kb = p.run_ptr ? std::int64_t(p.runs[2 * q]) * p.key_tile : 0;
    const std::int64_t e = p.run_ptr ? std::int64_t(p.runs[2 * q + 1]) * p.key_tile : p.nk;
    *ke = e < p.nk ? e : p.nk;
  }
};

// Adds one side's row sums to p.out (kCertifyOutputs doubles): warp shuffles, then one atomic
// per warp and field (the max as an unsigned 64-bit max on the bits of a non-negative double).
__device__ void add_side(const CertificateSide& s, double* out) {
  double v[7] = {s.error, s.mass, s.weighted_t, s.cost, s.potentials, s.weight,
                 s.target_exposure};
  double xs = s.extra;
  unsigned long long mt = __double_as_longlong(s.max_t);
  for (int off = 16; off > 0; off >>= 1) {
#pragma unroll
    for (int k = 0; k < 7; ++k) v[k] += __shfl_down_sync(0xffffffffu, v[k], off);
    xs += __shfl_down_sync(0xffffffffu, xs, off);
    const unsigned long long o = __shfl_down_sync(0xffffffffu, mt, off);
    mt = o > mt ? o : mt;
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(out + 0, v[0]);
    atomicAdd(out + 1, v[1]);
    atomicAdd(out + 2, v[2]);
    atomicMax(reinterpret_cast<unsigned long long*>(out + 3), mt);
    atomicAdd(out + 4, v[3]);
    atomicAdd(out + 5, v[4]);
    atomicAdd(out + 6, v[5]);
    atomicAdd(out + 7, v[6]);
    atomicAdd(out + 8, xs);
  }
}

template <class T>
__global__ void __launch_bounds__(kRows) certify_side_kernel(const CertifySide<T> p) {
  __shared__ double qs[kRows][kChunk + 1];
  __shared__ double ks[kKeys][kChunk + 1];
  __shared__ double kpot[kKeys], kw[kKeys];
  __shared__ int klab[kKeys];
  const int t = threadIdx.x;
  const std::int64_t i = std::int64_t(blockIdx.x) * kRows + t;
  const bool row_ok = i < p.nq && p.query_w[i < p.nq ? i : 0] > 0;
  const double pi = i < p.nq ? double(p.query_pot[i]) : 0.0;
  const double inv_eps = 1.0 / p.eps;
  const double* pair_row =
      p.pair ? p.pair + std::int64_t(p.query_labels[i < p.nq ? i : 0]) * p.classes : nullptr;
  CertificateRow row;
  const KeyRanges kr(p, blockIdx.x);
  for (std::int64_t q = kr.q0; q < kr.q1; ++q) {
  std::int64_t kb, ke;
  KeyRanges::range(p, q, &kb, &ke);
  for (std::int64_t j0 = kb; j0 < ke; j0 += kKeys) {
    double sq[kKeys];
#pragma unroll
    for (int jj = 0; jj < kKeys; ++jj) sq[jj] = 0;
    for (int k0 = 0; k0 < p.d; k0 += kChunk) {
      __syncthreads();
      for (int e = t; e < kRows * kChunk; e += kRows) {
        const int r = e / kChunk, c = e % kChunk;
        const std::int64_t gi = std::int64_t(blockIdx.x) * kRows + r;
        qs[r][c] = gi < p.nq && k0 + c < p.d ? p.queries[gi * p.d + k0 + c] : 0.0;
      }
      for (int e = t; e < kKeys * kChunk; e += kRows) {
        const int r = e / kChunk, c = e % kChunk;
        const std::int64_t gj = j0 + r;
        ks[r][c] = gj < ke && k0 + c < p.d ? p.keys[gj * p.d + k0 + c] : 0.0;
      }
      if (k0 == 0 && t < kKeys) {
        const std::int64_t gj = j0 + t;
        kpot[t] = gj < ke ? double(p.key_pot[gj]) : 0.0;
        kw[t] = gj < ke ? p.key_w[gj] : 0.0;
        klab[t] = p.pair && gj < ke ? p.key_labels[gj] : 0;
      }
      __syncthreads();
#pragma unroll
      for (int c = 0; c < kChunk; ++c) {
        const double xv = qs[t][c];
#pragma unroll
        for (int jj = 0; jj < kKeys; ++jj) {
          const double diff = xv - ks[jj][c];
          sq[jj] += diff * diff;
        }
      }
    }
    if (row_ok) {
#pragma unroll
      for (int jj = 0; jj < kKeys; ++jj)
        // Guard: masked (zero-weight) and padding keys are skipped; their potential may be inf.
        if (kw[jj] > 0)
          certificate_pair(sq[jj], p.cost_scale, pair_row ? pair_row[klab[jj]] : 0.0, inv_eps, pi,
                           kpot[jj], kw[jj], &row);
    }
  }
  }
  CertificateSide s;
  if (row_ok) certificate_row(p.query_w[i], pi, p.rho_inv, row, &s);
  add_side(s, p.out);
}

// ---- The fp32 certificate ----
//
// Same sums as certify_side_kernel, evaluated in float32 where the certificate only has to decide
// "bound <= tolerance" (Oracle::certify(..., target)); the oracle falls back to the float64 kernel
// when this bound does not decide. Each block takes the first point o of its row tile as anchor
// and the potential f_o of its first row of positive weight and finite potential as gauge (0
// when there is none): xi_i = fl32(x_i - o),
// eta_j = fl32(y_j - o) (the differences in double, then rounded), so the coordinates' rounding is
// relative to the tile's extent, not to |x|. The exponent (base 2) of a pair is expanded as
//   z2 = L (f_i + g_j - c |xi_i - eta_j|^2) = alpha_i + beta_j + sum_k xi_ik gamma_jk,
//   alpha_i = L (f_i - f_o - c |xi_i|^2),  beta_j = L (g_j + f_o - c |eta_j|^2),
//   gamma_jk = 2 c L eta_jk,               L = log2(e) / eps,
// alpha, beta and gamma formed in double and rounded once to float (beta and gamma per key tile
// when it is staged), then per pair one add and d FMAs in float: fl(alpha + beta), then
// fma(xi_k, gamma_k, .); term = fl(fl(b_j) 2^z2), summed in float over a key tile (<= 64 terms),
// the tiles' sums in double.
//
// Rounding model (u = 2^-24; lib/core/certificate.hpp, fast_tile_exposure and fast_row_slack with
// K_Z = 0): with s_k = |xi_k| + |eta_k|, S = sum_k s_k^2 = |xi|^2 + |eta|^2 + 2 sum_k |xi_k eta_k|
// and F = |f_i - f_o| + |g_j + f_o|: alpha, beta and gamma are off by <= 1.0001 u of L (|f_i - f_o|
// + c |xi|^2), L (|g_j + f_o| + c |eta|^2) and 2 c L |xi_k eta_k| (the double arithmetic's 2^-50
// inside the 0.0001), so <= 1.0001 u L (F + c S) in all; the add and the d FMAs, each one rounding
// of a partial sum bounded by L (F + c S) (1 + 2u), at most gamma_(d+1) of it; the rounded
// coordinates move c |xi - eta|^2 by <= 2.0001 u c S. In natural units the exponent is off by
//   |dz| <= u ((d + K_S) c S + K_F F) / eps,  K_S = 4.01, K_F = d + 2.01,
// with no part relative to |z| (the direct form's (f + g) - c sq had one). S is bounded per key
// tile by the block's and the tile's largest |coordinate| per axis, F by the row's |f_i - f_o|
// (double) plus the tile's largest |g_j + f_o| (rounded up to float). The gauge f_o keeps F near
// the scale of c S + eps |z| (f_i + g_j is gauge-invariant; |f_i - f_o| is small in a row tile of
// nearby points).
// K_T = 71: 2^z2 by fast_exp2 (lib/cuda/lse_common.cuh: ex2.approx.ftz.f32), which the PTX ISA
// states within 2 ulp of the correctly rounded result for normal results (5 u); fl(b_j) and the
// product 2 u; the float sum of <= 64 terms 63 u; 1 u spare. A result below the normal range flushes to zero: each such term
// b_j 2^z2 < b_j 2^-126 is lost, covered by 2^-125 max(1, m_b) per key (b_j <= m_b). out[8]
// accumulates w_i |R - R^| over the rows. A non-finite sum (an exponent above 128) makes the
// bound non-finite, and the oracle falls back to float64.
//
// Per pair (d = 3): 1 FADD, 3 FFMA, 1 MUFU, 1 FFMA for the sum (and, for the statistics of the
// row side, two FFMAs: sum term g_j and sum term z2; per tile pot = f_i sum term + sum term g_j
// and cost = pot - sum term z2 / L), against 13-17 instructions for the
// direct form (differences, squares, f + g, the product by L, the maximum) it replaced.
constexpr int kFastKeys = 64;

// R rows per thread (kRows / R threads a block): each staged key is read from shared memory once
// for R pairs, and the tile's bookkeeping (three barriers, the staging) is shared by R rows.
// At least 12 blocks an SM (at most 80 registers): no spills at d <= 5 (without the bound the
// compiler spilled 16 bytes in three variants of the staged-words version, and some before it);
// its speed the same on the H100 (twenty-first session, call 8: the multiscale row and column
// sides at 2^20 34.1 / 26.8 ms without, 34.6 / 26.6 ms with).
template <int D, bool kStats, int R, bool kNext>
__global__ void __launch_bounds__(kRows / R, 12)
    certify_side_fast_kernel(const CertifySide<float> p) {
  // kNext: the column side's update with the new pair's side (no statistics); the row side's
  // (kStats) takes p.out_next at run time.
  static_assert(!(kStats && kNext), "kNext is the column side's variant");
  constexpr int kT = kRows / R;  // threads a block; thread t owns rows t, t + kT, ...
  static_assert(kT >= kFastKeys && kT > D, "one staged key a thread at most");
  // A staged key as kW float4 words: beta_j, then gamma_jk = 2 c L eta_jk (k < D), zero-padded;
  // and (b_j, g_j) as a float2: one broadcast load a word (two at D <= 3) for R pairs.
  constexpr int kW = (D + 1 + 3) / 4;
  __shared__ float4 kv[kFastKeys][kW];
  __shared__ float2 kwg[kFastKeys];
  __shared__ unsigned rj[D], ri[D];  // largest |coordinate| per axis, as float bits
  __shared__ unsigned gmax;  // largest |g_j + f_o| of the tile, rounded up to float, as bits
  __shared__ double o[D], fo_s;
  const int t = threadIdx.x;
  const std::int64_t row0 = std::int64_t(blockIdx.x) * kRows;
  if (t < D) {
    o[t] = p.queries[row0 * D + t];
    ri[t] = 0;
  }
  if (t == 0) {
    // The gauge: the potential of the block's first row of positive weight and finite potential
    // (a zero-weight row's may be anything and would only inflate F), else 0.
    double g0 = 0.0;
    for (std::int64_t r = row0; r < min(p.nq, row0 + kRows); ++r) {
      const float fr = p.query_pot[r];
      if (p.query_w[r] > 0 && isfinite(fr)) {
        g0 = double(fr);
        break;
      }
    }
    fo_s = g0;
  }
  __syncthreads();
  const double fo = fo_s;
  const double c = p.cost_scale;
  const double L = 1.4426950408889634 / p.eps;
  const double inv_l = p.eps * 0.6931471805599453;  // 1 / L (the statistics only)
  bool row_ok[R];
  float xi[R][D], fi[R], alpha[R];
  double frow[R], sum[R], cost[R], pot[R], weighted[R], a_max[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const std::int64_t i = row0 + t + r * kT;
    row_ok[r] = i < p.nq && p.query_w[i < p.nq ? i : 0] > 0;
    double x2 = 0;
#pragma unroll
    for (int k = 0; k < D; ++k) {
      xi[r][k] = row_ok[r] ? float(p.queries[i * D + k] - o[k]) : 0.0f;
      x2 += double(xi[r][k]) * double(xi[r][k]);
      if (row_ok[r]) atomicMax(&ri[k], __float_as_uint(fabsf(xi[r][k])));
    }
    fi[r] = row_ok[r] ? p.query_pot[i] : 0.0f;
    alpha[r] = row_ok[r] ? float(L * ((double(fi[r]) - fo) - c * x2)) : 0.0f;
    frow[r] = row_ok[r] ? fabs(double(fi[r]) - fo) : 0.0;
    sum[r] = cost[r] = pot[r] = weighted[r] = a_max[r] = 0;
  }
  constexpr FastCertificateModel kModel = expanded_certificate_model(D);
  const FastExposure exposure(kModel, D, c, p.eps);
  const KeyRanges kr(p, blockIdx.x);
  for (std::int64_t q = kr.q0; q < kr.q1; ++q) {
    std::int64_t kb, ke;
    KeyRanges::range(p, q, &kb, &ke);
    for (std::int64_t j0 = kb; j0 < ke; j0 += kFastKeys) {
      __syncthreads();  // the previous tile's readers are done
      if (t < D) rj[t] = 0;
      if (t == 0) gmax = 0;
      __syncthreads();
      if (t < kFastKeys) {
        const std::int64_t gj = j0 + t;
        const double w = gj < ke ? p.key_w[gj] : 0.0;
        float v[4 * kW];
#pragma unroll
        for (int k = 0; k < 4 * kW; ++k) v[k] = 0.0f;
        if (w > 0) {
          double e2 = 0;
          float e[D];
#pragma unroll
          for (int k = 0; k < D; ++k) {
            e[k] = float(p.keys[gj * D + k] - o[k]);
            e2 += double(e[k]) * double(e[k]);
            atomicMax(&rj[k], __float_as_uint(fabsf(e[k])));
            v[1 + k] = float(2.0 * c * L * double(e[k]));
          }
          const float g = p.key_pot[gj];
          v[0] = float(L * ((double(g) + fo) - c * e2));
          atomicMax(&gmax, __float_as_uint(__double2float_ru(fabs(double(g) + fo))));
          kwg[t] = make_float2(float(w), g);
        } else {
          // Masked or padding key: its term is 0 * 2^-3e38 = 0 (its potential may be inf).
          v[0] = -3.0e38f;
          kwg[t] = make_float2(0.0f, 0.0f);
        }
#pragma unroll
        for (int q = 0; q < kW; ++q)
          kv[t][q] = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
      }
      __syncthreads();
      float ts[R], tg[R], tz[R];
#pragma unroll
      for (int r = 0; r < R; ++r) ts[r] = tg[r] = tz[r] = 0;
#pragma unroll 8
      for (int jj = 0; jj < kFastKeys; ++jj) {
        float kk[4 * kW];
#pragma unroll
        for (int q = 0; q < kW; ++q) {
          const float4 word = kv[jj][q];
          kk[4 * q] = word.x;
          kk[4 * q + 1] = word.y;
          kk[4 * q + 2] = word.z;
          kk[4 * q + 3] = word.w;
        }
        const float2 wg = kwg[jj];
        const float b = kk[0], w = wg.x;
        const float* gm = kk + 1;
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float z2 = alpha[r] + b;
#pragma unroll
          for (int k = 0; k < D; ++k) z2 = fmaf(xi[r][k], gm[k], z2);
          const float term = w * fast_exp2(z2);
          ts[r] += term;
          if (kStats) {
            tg[r] = fmaf(term, wg.y, tg[r]);
            tz[r] = fmaf(term, z2, tz[r]);
          }
        }
      }
      double st = 0;
#pragma unroll
      for (int k = 0; k < D; ++k) {
        const double rr = double(__uint_as_float(ri[k])) + double(__uint_as_float(rj[k]));
        st += rr * rr;
      }
      const double gm_tile = double(__uint_as_float(gmax));
#pragma unroll
      for (int r = 0; r < R; ++r) {
        sum[r] += double(ts[r]);
        if (kStats) {
          // The tile's sum_j term (f_i + g_j) and sum_j term c sq = sum_j term (f_i + g_j -
          // z2 / L): two FMAs per pair (were four: s, its product, c sq and its product).
          const double tile_pot = double(fi[r]) * double(ts[r]) + double(tg[r]);
          pot[r] += tile_pot;
          cost[r] += tile_pot - double(tz[r]) * inv_l;
        }
        const double at = exposure(st, frow[r] + gm_tile);
        weighted[r] += double(ts[r]) * at;
        a_max[r] = fmax(a_max[r], at);
      }
    }
  }
  CertificateSide s, s_next;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (!row_ok[r]) continue;
    const double wi = p.query_w[row0 + t + r * kT];
    CertificateRow row;
    row.sum = sum[r];
    row.cost = cost[r];
    row.pot = pot[r];
    certificate_row(wi, double(fi[r]), p.rho_inv, row, &s);
    const double slack = fast_row_slack(kModel, wi, sum[r], weighted[r], a_max[r], 0.0,
                                        p.key_mass, double(p.nk));
    s.extra += slack;
    // The updates: the row side's (which runs with statistics: certify_kept_next, and
    // update_f_certified with the new pair's side and its statistics when out_next is set),
    // update_g_certified's with the new pair's side on the column side (kNext).
    if (kStats && p.next)
      s.extra += next_update(double(fi[r]), sum[r], p.eps, p.relax, wi, slack,
                             p.next + row0 + t + r * kT, p.out_next ? &s_next : nullptr,
                             cost[r], pot[r]);
    if (kNext)
      s.extra += next_update(double(fi[r]), sum[r], p.eps, p.relax, wi, slack,
                             p.next + row0 + t + r * kT, &s_next);
  }
  add_side(s, p.out);
  if (kNext || (kStats && p.next && p.out_next)) add_side(s_next, p.out_next);
}

// Rows per thread of the fp32 certificate: 2 (two rows share each staged key's reads and the
// tile's barriers).
constexpr int kFastRowsPerThread = 2;

template <int D>
void launch_fast_dim(const CertifySide<float>& p, unsigned blocks, cudaStream_t stream) {
  constexpr int R = kFastRowsPerThread;
  if (p.stats)
    certify_side_fast_kernel<D, true, R, false><<<blocks, kRows / R, 0, stream>>>(p);
  else if (p.out_next && p.next)
    certify_side_fast_kernel<D, false, R, true><<<blocks, kRows / R, 0, stream>>>(p);
  else
    certify_side_fast_kernel<D, false, R, false><<<blocks, kRows / R, 0, stream>>>(p);
}

void launch_fast(const CertifySide<float>& p, unsigned blocks, cudaStream_t stream) {
  switch (p.d) {
    case 1: launch_fast_dim<1>(p, blocks, stream); break;
    case 2: launch_fast_dim<2>(p, blocks, stream); break;
    case 3: launch_fast_dim<3>(p, blocks, stream); break;
    case 4: launch_fast_dim<4>(p, blocks, stream); break;
    case 5: launch_fast_dim<5>(p, blocks, stream); break;
    default: launch_fast_dim<6>(p, blocks, stream); break;
  }
  static_assert(kFastCertificateMaxDim == 6, "launch_fast covers d = 1..6");
}

void launch_fast(const CertifySide<double>&, unsigned, cudaStream_t) {}

template <class T>
void launch(const CertifySide<T>& p, void* stream) {
  if (p.nq <= 0) return;
  const unsigned blocks = unsigned((p.nq + kRows - 1) / kRows);
  if (p.fast && certify_fast_applies(p)) {
    launch_fast(p, blocks, static_cast<cudaStream_t>(stream));
  } else {
    certify_side_kernel<T><<<blocks, kRows, 0, static_cast<cudaStream_t>(stream)>>>(p);
  }
  KANTOR_CUDA_CHECK_LAUNCH();
}

// ---- The GEMM certificate (CertifyGemm) ----

/// o[k] = the mean of column k of the n x d rows (summed in row order).
__global__ void column_means(const double* __restrict__ x, std::int64_t n, int d,
                             double* __restrict__ o) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= d) return;
  double s = 0;
  for (std::int64_t i = 0; i < n; ++i) s += x[i * d + k];
  o[k] = s / double(n > 0 ? n : 1);
}

/// out = x - o per row; norm2[i] = |out_i|^2, norm[i] = its square root (a warp per row).
__global__ void anchor_rows(const double* __restrict__ x, std::int64_t n, int d,
                            const double* __restrict__ o, double* __restrict__ out,
                            double* __restrict__ norm2, double* __restrict__ norm) {
  const std::int64_t w = (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (w >= n) return;  // warp-uniform
  double s = 0;
  for (int k = lane; k < d; k += 32) {
    const double v = x[w * d + k] - o[k];
    out[w * d + k] = v;
    s += v * v;
  }
  for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
  if (lane == 0) {
    norm2[w] = s;
    norm[w] = sqrt(s);
  }
}

/// The rows' side of one chunk (rows i0 .. i0 + rows): a warp per row, lanes over the keys;
/// warps stride over the chunk's rows and add their side's sums once.
template <class T>
__global__ void gemm_rows_kernel(const CertifySide<T> p, const double* __restrict__ S,
                                 std::int64_t i0, std::int64_t rows, const double* __restrict__ xn,
                                 const double* __restrict__ xr, const double* __restrict__ yn,
                                 const double* __restrict__ yr) {
  const std::int64_t warps = std::int64_t(gridDim.x) * blockDim.x / 32;
  const int lane = threadIdx.x & 31;
  const double inv_eps = 1.0 / p.eps;
  CertificateSide side;
  for (std::int64_t r = (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; r < rows;
       r += warps) {
    const std::int64_t i = i0 + r;
    const double wi = p.query_w[i];
    if (!(wi > 0)) continue;  // warp-uniform
    const double pi = double(p.query_pot[i]), xni = xn[i], xri = xr[i];
    const double* pair_row = p.pair ? p.pair + std::int64_t(p.query_labels[i]) * p.classes : nullptr;
    const double* Sr = S + r * p.nk;
    CertificateRow row;
    for (std::int64_t j = lane; j < p.nk; j += 32) {
      const double v = p.key_w[j];
      // Guard: masked (zero-weight) keys are skipped; their potential may be inf.
      if (!(v > 0)) continue;
      const double rn = (xri + yr[j]) * (xri + yr[j]);
      certificate_pair_expanded(xni + yn[j] - 2 * Sr[j], rn, p.cost_scale,
                                pair_row ? pair_row[p.key_labels[j]] : 0.0, inv_eps, pi,
                                double(p.key_pot[j]), v, &row);
    }
    for (int off = 16; off > 0; off >>= 1) {
      row.sum += __shfl_down_sync(0xffffffffu, row.sum, off);
      row.t += __shfl_down_sync(0xffffffffu, row.t, off);
      row.cost += __shfl_down_sync(0xffffffffu, row.cost, off);
      row.pot += __shfl_down_sync(0xffffffffu, row.pot, off);
      row.max_t = fmax(row.max_t, __shfl_down_sync(0xffffffffu, row.max_t, off));
    }
    if (lane == 0) certificate_row(wi, pi, p.rho_inv, row, &side);
  }
  add_side(side, p.out);
}

/// The columns' running sums over one chunk: a thread per key j and row segment (blockIdx.y of
/// gridDim.y: a few thousand columns alone would leave most of the GPU idle), the segment's rows
/// in order, accumulated into its own slice of acc (segment s: 5 m doubles at acc + 5 m s: sum,
/// t, max_t, cost, pot) across chunks; gemm_cols_fold merges the slices in order.
template <class T>
__global__ void gemm_cols_kernel(const CertifySide<T> p, const double* __restrict__ S,
                                 std::int64_t i0, std::int64_t rows, const double* __restrict__ xn,
                                 const double* __restrict__ xr, const double* __restrict__ yn,
                                 const double* __restrict__ yr, double* __restrict__ acc,
                                 bool first) {
  const std::int64_t j = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t m = p.nk;
  if (j >= m || !(p.key_w[j] > 0)) return;
  const std::int64_t per = (rows + gridDim.y - 1) / gridDim.y;
  const std::int64_t r0 = std::int64_t(blockIdx.y) * per;
  const std::int64_t r1 = r0 + per < rows ? r0 + per : rows;
  double* a = acc + 5 * m * std::int64_t(blockIdx.y);
  CertificateRow row;
  if (!first) {
    row.sum = a[j];
    row.t = a[m + j];
    row.max_t = a[2 * m + j];
    row.cost = a[3 * m + j];
    row.pot = a[4 * m + j];
  }
  const double inv_eps = 1.0 / p.eps;
  const double gj = double(p.key_pot[j]), ynj = yn[j], yrj = yr[j];
  const int lj = p.pair ? p.key_labels[j] : 0;
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::int64_t i = i0 + r;
    const double wi = p.query_w[i];
    if (!(wi > 0)) continue;  // a masked row's potential may be inf
    const double rn = (xr[i] + yrj) * (xr[i] + yrj);
    certificate_pair_expanded(xn[i] + ynj - 2 * S[r * m + j], rn, p.cost_scale,
                              p.pair ? p.pair[std::int64_t(p.query_labels[i]) * p.classes + lj]
                                     : 0.0,
                              inv_eps, gj, double(p.query_pot[i]), wi, &row);
  }
  a[j] = row.sum;
  a[m + j] = row.t;
  a[2 * m + j] = row.max_t;
  a[3 * m + j] = row.cost;
  a[4 * m + j] = row.pot;
}

/// Folds the columns' sums (cols: the column side, its queries the keys of the rows' side): the
/// segments' slices merged in order, then the row fold.
template <class T>
__global__ void gemm_cols_fold(const CertifySide<T> cols, const double* __restrict__ acc,
                               int segments) {
  const std::int64_t j = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t m = cols.nq;
  CertificateSide side;
  if (j < m && cols.query_w[j] > 0) {
    CertificateRow row;
    for (int s = 0; s < segments; ++s) {
      const double* a = acc + 5 * m * std::int64_t(s);
      row.sum += a[j];
      row.t += a[m + j];
      row.max_t = fmax(row.max_t, a[2 * m + j]);
      row.cost += a[3 * m + j];
      row.pot += a[4 * m + j];
    }
    certificate_row(cols.query_w[j], double(cols.query_pot[j]), cols.rho_inv, row, &side);
  }
  add_side(side, cols.out);  // every thread of the block: the shuffles need full warps
}

/// Score block budget: 512 MiB of doubles per chunk (the DGEMM stays efficient well below).
constexpr std::int64_t kCertifyScoreBytes = std::int64_t(512) << 20;

}  // namespace

void launch_certify_side(const CertifySide<float>& p, void* stream) { launch(p, stream); }
void launch_certify_side(const CertifySide<double>& p, void* stream) { launch(p, stream); }

CertifyGemm::CertifyGemm(void* stream, const double* x, const double* y, std::int64_t n,
                         std::int64_t m, int d)
    : stream_(stream), n_(n), m_(m), d_(d) {
  const auto st = static_cast<cudaStream_t>(stream);
  chunk_ = std::clamp<std::int64_t>(kCertifyScoreBytes / 8 / std::max<std::int64_t>(1, m), 1,
                                    std::max<std::int64_t>(1, n));
  // Guard: a failure part-way releases what was acquired (the destructor does not run).
  try {
    cublasHandle_t h;
    cublas_check(cublasCreate(&h), "CertifyGemm: cublasCreate");
    handle_ = h;
    cublas_check(cublasSetStream(h, st), "CertifyGemm: cublasSetStream");
    // Plain IEEE float64 products and sums (the rounding model's assumption): no emulation.
    cublas_check(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "CertifyGemm: cublasSetMathMode");
    auto alloc = [](double** p, std::int64_t count) {
      void* q = nullptr;
      KANTOR_CUDA_TRY(
          cudaMalloc(&q, sizeof(double) * std::size_t(std::max<std::int64_t>(1, count))));
      *p = static_cast<double*>(q);
    };
    const bool same = x == y;
    alloc(&xs_, n * d);
    alloc(&xn_, 2 * n);  // |x'|^2, then |x'|
    if (!same) {
      alloc(&ys_, m * d);
      alloc(&yn_, 2 * m);
    }
    alloc(&s_, chunk_ * m);
    // Column segments: about 2^18 threads for the column sums (16 at m = 10^4, 1 from 2^18 up).
    segments_ = int(std::clamp<std::int64_t>((std::int64_t(1) << 18) / std::max<std::int64_t>(1, m), 1, 32));
    alloc(&cacc_, 5 * m * segments_ + d);  // and the anchor o at the end
    double* o = cacc_ + 5 * m * segments_;
    column_means<<<unsigned((d + 127) / 128), 128, 0, st>>>(x, n, d, o);
    KANTOR_CUDA_CHECK_LAUNCH();
    anchor_rows<<<unsigned((n * 32 + 255) / 256), 256, 0, st>>>(x, n, d, o, xs_, xn_, xn_ + n);
    KANTOR_CUDA_CHECK_LAUNCH();
    if (!same) {
      anchor_rows<<<unsigned((m * 32 + 255) / 256), 256, 0, st>>>(y, m, d, o, ys_, yn_, yn_ + m);
      KANTOR_CUDA_CHECK_LAUNCH();
    }
  } catch (...) {
    release();
    throw;
  }
}

CertifyGemm::~CertifyGemm() { release(); }

void CertifyGemm::release() noexcept {
  if (xs_ || s_) cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  for (double** p : {&xs_, &ys_, &xn_, &yn_, &s_, &cacc_}) {
    cudaFree(*p);
    *p = nullptr;
  }
  if (handle_) cublasDestroy(static_cast<cublasHandle_t>(handle_));
  handle_ = nullptr;
}

template <class T>
void CertifyGemm::run_impl(const CertifySide<T>& rows, const CertifySide<T>& cols) {
  if (rows.nq != n_ || rows.nk != m_ || rows.d != d_)
    throw InvalidArgument("CertifyGemm: a side of " + std::to_string(rows.nq) + " x " +
                          std::to_string(rows.nk) + " (d = " + std::to_string(rows.d) +
                          ") for data of " + std::to_string(n_) + " x " + std::to_string(m_) +
                          " (d = " + std::to_string(d_) + ")");
  if (n_ <= 0 || m_ <= 0) return;
  const auto st = static_cast<cudaStream_t>(stream_);
  auto h = static_cast<cublasHandle_t>(handle_);
  const double* ys = ys_ ? ys_ : xs_;
  const double* yn = yn_ ? yn_ : xn_;
  const std::int64_t m = m_;
  const double one = 1.0, zero = 0.0;
  for (std::int64_t i0 = 0; i0 < n_; i0 += chunk_) {
    const std::int64_t rc = std::min(chunk_, n_ - i0);
    // S (column-major m x rc) = Y'^T X'_chunk: S[j + r m] = <y'_j, x'_(i0 + r)>.
    cublas_check(cublasDgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, int(m), int(rc), d_, &one, ys, d_,
                             xs_ + i0 * d_, d_, &zero, s_, int(m)),
                 "CertifyGemm: cublasDgemm (certificate scores)");
    const unsigned row_blocks = unsigned(std::min<std::int64_t>((rc + 7) / 8, 1024));
    gemm_rows_kernel<T><<<row_blocks, 256, 0, st>>>(rows, s_, i0, rc, xn_, xn_ + n_, yn, yn + m);
    KANTOR_CUDA_CHECK_LAUNCH();
    // Every segment of every chunk writes its slice (a segment may be empty in a short chunk:
    // it then stores what it loaded, or zeros on the first chunk).
    gemm_cols_kernel<T><<<dim3(unsigned((m + 255) / 256), unsigned(segments_)), 256, 0, st>>>(
        rows, s_, i0, rc, xn_, xn_ + n_, yn, yn + m, cacc_, i0 == 0);
    KANTOR_CUDA_CHECK_LAUNCH();
  }
  gemm_cols_fold<T><<<unsigned((m + 255) / 256), 256, 0, st>>>(cols, cacc_, segments_);
  KANTOR_CUDA_CHECK_LAUNCH();
}

void CertifyGemm::run(const CertifySide<float>& rows, const CertifySide<float>& cols) {
  run_impl(rows, cols);
}
void CertifyGemm::run(const CertifySide<double>& rows, const CertifySide<double>& cols) {
  run_impl(rows, cols);
}

}  // namespace kantor::cuda
