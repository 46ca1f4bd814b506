// The multiscale screen's descent on the GPU (lib/cuda/screen_descent.hpp), in the host descent's
// two stages (solvers/multiscale_screen.cpp). Down to the block levels, level-synchronous: one
// thread per candidate pair of cells evaluates the bound (kantor/screen_bound.hpp, IEEE
// operations without contraction, as on the host), a dropped pair adds mass_I mass_J e^(b / eps)
// to its slot and a kept one counts its active children; an exclusive scan of the counts places
// the children (the next level's candidates). From the block levels (blocks of at most 8 atoms a
// side), one thread per candidate block pair finishes the descent depth-first in registers (at
// most 85 bounds) into a 64-bit mask of its kept atom pairs, so the up to 10^9 kept atom pairs of
// 2^23 points never exist one by one; the non-empty masks are compacted and sorted by block key.
// Sums of the dropped mass: fixed chunks per stage, added in order on the host (the same value
// from run to run).
#include <cuda_runtime.h>

#include <algorithm>
#include <cub/cub.cuh>
#include <string>
#include <type_traits>

#include "kantor/error.hpp"
#include "kantor/screen_bound.hpp"
#include "lib/core/certificate.hpp"
#include "lib/cuda/check.hpp"
#include "lib/cuda/lse_common.cuh"
#include "lib/cuda/pair_maxima.cuh"
#include "lib/cuda/screen_descent.hpp"

namespace kantor::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kSumChunk = 4096;  // dropped-mass terms per partial sum

/// The active cells of level C below cell I of the level above (down) or I itself (not down).
__device__ __forceinline__ int children(const DescentLevel& C, bool down, std::int64_t I,
                                        std::int32_t (&out)[2]) {
  int k = 0;
  for (int u = 0; u <= (down ? 1 : 0); ++u) {
    const std::int64_t I2 = down ? 2 * I + u : I;
    if (I2 < C.count && C.active[I2]) out[k++] = std::int32_t(I2);
  }
  return k;
}

struct LevelPass {
  const std::int32_t* ci;
  const std::int32_t* cj;
  std::int64_t count;
  DescentLevel X, Y, Xc, Yc;  // this level's cells and the next level's
  bool dx, dy;
  int d;
  double c, keep_at, eps;
  std::uint64_t* nchild;  // active children of a kept pair, 0 for a dropped one
  double* contrib;        // a dropped pair's mass bound, 0 for a kept one
};

template <int D>
__global__ void __launch_bounds__(kThreads) bound_kernel(LevelPass p) {
  const std::int64_t k = std::int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (k >= p.count) return;
  const std::int64_t I = p.ci[k], J = p.cj[k];
  const std::int64_t st = 3 * std::int64_t(p.d) + 3;
  const double b = detail::screen_pair_bound<D>(p.X.packed + I * st, p.Y.packed + J * st, p.d, p.c);
  if (!(b < p.keep_at)) {  // kept (NaN too)
    p.contrib[k] = 0;
    std::int32_t a[2], bb[2];
    p.nchild[k] = std::uint64_t(children(p.Xc, p.dx, I, a) * children(p.Yc, p.dy, J, bb));
  } else {
    p.contrib[k] = p.X.mass[I] * p.Y.mass[J] * exp(b / p.eps);
    p.nchild[k] = 0;
  }
}

__global__ void __launch_bounds__(kThreads) expand_kernel(LevelPass p, const std::uint64_t* offset,
                                                          std::int32_t* ni, std::int32_t* nj) {
  const std::int64_t k = std::int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (k >= p.count || p.nchild[k] == 0) return;
  std::int32_t a[2], b[2];
  const int na = children(p.Xc, p.dx, p.ci[k], a), nb = children(p.Yc, p.dy, p.cj[k], b);
  std::uint64_t at = offset[k];
  for (int u = 0; u < na; ++u)
    for (int v = 0; v < nb; ++v, ++at) {
      ni[at] = a[u];
      nj[at] = b[v];
    }
}

constexpr int kBlockLevels = 3;  // the host descent's: blocks of at most 2^3 atoms a side

struct BlockPass {
  const std::int32_t* ci;
  const std::int32_t* cj;
  std::int64_t count;
  DescentLevel X[kBlockLevels + 1], Y[kBlockLevels + 1];  // levels 0 .. block level
  int bx, by, d;
  double c, keep_at, eps;
  std::uint64_t* mask;            // the block pair's kept atom pairs, bit 8 a + b
  std::uint64_t* nonempty;        // mask != 0
  double* contrib;                // its dropped cells' mass bounds, summed in depth-first order
  unsigned long long* tested;     // bounds evaluated (one counter)
};

/// One thread per candidate block pair (levels bx, by): the rest of the descent depth-first, in
/// the host's order (children (u, v) with u outer), with an explicit stack.
template <int D>
__global__ void __launch_bounds__(kThreads) block_kernel(BlockPass p) {
  const std::int64_t k = std::int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (k >= p.count) return;
  struct Node {
    std::int32_t I, J;
    std::int8_t lx, ly, a, b;
  };
  Node stack[16];  // depth <= 3 with <= 3 siblings pending per level: <= 10 entries
  int top = 0;
  stack[top++] = {p.ci[k], p.cj[k], std::int8_t(p.bx), std::int8_t(p.by), 0, 0};
  const std::int64_t st = 3 * std::int64_t(p.d) + 3;
  std::uint64_t mask = 0;
  unsigned long long tested = 0;
  double lost = 0;
  while (top > 0) {
    const Node nd = stack[--top];
    ++tested;
    const DescentLevel& X = p.X[nd.lx];
    const DescentLevel& Y = p.Y[nd.ly];
    const double b = detail::screen_pair_bound<D>(X.packed + std::int64_t(nd.I) * st,
                                                  Y.packed + std::int64_t(nd.J) * st, p.d, p.c);
    if (b < p.keep_at) {
      lost += X.mass[nd.I] * Y.mass[nd.J] * exp(b / p.eps);
      continue;
    }
    if (nd.lx == 0 && nd.ly == 0) {
      mask |= std::uint64_t(1) << (8 * nd.a + nd.b);
      continue;
    }
    const bool dx = nd.lx > 0, dy = nd.ly > 0;
    const int cx = dx ? nd.lx - 1 : nd.lx, cy = dy ? nd.ly - 1 : nd.ly;
    std::int32_t xs[2], ys[2];
    std::int8_t as[2], bs[2];
    int na = 0, nb = 0;
    for (int u = 0; u <= (dx ? 1 : 0); ++u) {
      const std::int64_t I2 = dx ? 2 * std::int64_t(nd.I) + u : nd.I;
      if (I2 < p.X[cx].count && p.X[cx].active[I2]) {
        xs[na] = std::int32_t(I2);
        as[na++] = std::int8_t(dx ? nd.a + (u << cx) : nd.a);
      }
    }
    for (int v = 0; v <= (dy ? 1 : 0); ++v) {
      const std::int64_t J2 = dy ? 2 * std::int64_t(nd.J) + v : nd.J;
      if (J2 < p.Y[cy].count && p.Y[cy].active[J2]) {
        ys[nb] = std::int32_t(J2);
        bs[nb++] = std::int8_t(dy ? nd.b + (v << cy) : nd.b);
      }
    }
    // Pushed in reverse: popped as the host visits them.
    for (int u = na - 1; u >= 0; --u)
      for (int v = nb - 1; v >= 0; --v)
        stack[top++] = {xs[u], ys[v], std::int8_t(cx), std::int8_t(cy), as[u], bs[v]};
  }
  p.mask[k] = mask;
  p.nonempty[k] = mask != 0;
  p.contrib[k] = lost;
  atomicAdd(p.tested, tested);
}

__global__ void __launch_bounds__(kThreads) emit_kernel(BlockPass p, const std::uint64_t* offset,
                                                        std::uint64_t* keys, std::uint64_t* masks) {
  const std::int64_t k = std::int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (k >= p.count || p.mask[k] == 0) return;
  const std::uint64_t at = offset[k];
  keys[at] = (std::uint64_t(p.ci[k]) << 32) | std::uint64_t(p.cj[k]);
  masks[at] = p.mask[k];
}

// ---- the points stage (DescentPoints) ----

constexpr int kRefineWarps = 4;

template <class T>
struct RefinePass {
  const double *x, *y, *a, *b;
  const T *f, *g;
  std::int64_t n, m, atom;
  int d;
  double cs;  // maxima_cost_scale(c, d)
  const std::uint64_t* keys;
  std::uint64_t* masks;  // in: the box stage's; out: the kept atom pairs
  std::int64_t count;
  int bx, by;
  const double *mass_x, *mass_y;  // the atoms' masses
  double keep_at, eps;
  double* contrib;                // per block pair: its dropped atom pairs' mass, in bit order
  unsigned long long* counts;     // [0] atom pairs evaluated, [1] dropped
  // The fp32 pre-scan's operands (d <= 3; fast_operands): per row (alpha, xi), per key (beta,
  // gamma), and its error bound and the float64 scan's magnitude (fast_error).
  const float4 *rows4, *keys4;
  const double* fast;  // [0] E, [1] mag, [2] the gauge f_o
};

/// One block per block pair (grid-stride), its set bits dealt to the warps in turn; a warp takes
/// its atom pair's rows 32 at a time (a lane a row) against every key, each pair by maxima_pair
/// (lib/cuda/pair_maxima.cuh: the atom_pair_maxima kernel's arithmetic, the same maximum), and
/// leaves as soon as the running maximum plus its allowance reaches keep_at (kept whatever the
/// rest holds; checked every 8 keys). A pair evaluated to its end and still below keep_at is
/// dropped. For d <= 3 and atoms of at most kStageKeys keys the warp first stages its atom's keys
/// (coordinates and g; NaN for a key of zero weight, and f = NaN for a row of zero weight: fmax
/// ignores a NaN operand, so such pairs leave best and mag as the skipped pairs did) in shared
/// memory, read by broadcast in the pair loop (was: three global loads per key and lane); the
/// launcher takes D = 0 (any d, keys read from global memory) for larger atoms. For d <= 3 the
/// fp32 pre-scan (fast_scan) runs first and decides nearly every atom pair; the float64 scan runs
/// only for the pairs it leaves undecided.
constexpr int kStageKeys = 64;

/// The fp32 pre-scan (D <= 3, atoms of at most 64 points; twenty-second session): every pair
/// of an atom pair in the fp32 certificate's expanded form (lib/cuda/certify.cu), each score
/// s_ij = f_i + g_j - c' |x_i - y_j|^2 as alpha_i + beta_j + sum_k xi_ik gamma_jk in float, from
/// operands formed once per point (fast_operands: xi = fl(x - o), eta = fl(y - o) with o the
/// engine's centre, alpha = fl((f_i - f_o) - c' |xi|^2), beta = fl((g_j + f_o) - c' |eta|^2),
/// gamma = fl(2 c' eta), formed in double and rounded once; f_o the middle of f's range): 16 bytes
/// a point to read instead of 36, 5 float operations a pair instead of 9 float64 ones. That
/// evaluation's error (docs/numerics.md section 7, the expanded certificate's model in potential
/// units) is at most E = 2^-24 ((d + 4.01) c' S + (d + 2.01) F) (1 + 1e-5) for every pair, with S
/// = sum_k (max |xi_k| + max |eta_k|)^2 and F = max |f_i - f_o| + max |g_j + f_o| over all weighted
/// points (fast_error), so the largest computed score M bounds the true largest within E.
/// Verdicts, each the one the float64 scan (and Oracle::atom_pair_maxima) reaches: kept when
/// some computed score less E reaches keep_at plus the float64 scan's rounding margin (2^-46 (2
/// mag + |keep_at|), mag = max |f| + max |g|: a true score does, and the float64 scan's value
/// with its allowance); dropped when M + E is below keep_at by more than the float64 scan's
/// allowance and that margin, with *top = M + E: an upper bound of the true largest score, above
/// the float64 scan's value by at most about 2 E (the dropped mass a little larger, never
/// smaller; drops only while 2 E <= kFastMaxSlack eps); undecided otherwise (the float64 scan
/// decides: also every pair without a finite score, and every pair when E or mag is not finite).
enum class FastVerdict { kKept, kDropped, kUndecided };

/// The pre-scan drops pairs only while 2 E <= kFastMaxSlack eps: its bound of a dropped pair then
/// exceeds the float64 maximum by at most that much, so the dropped mass grows by at most
/// e^0.01 - 1 (about 1%) over the float64 stage's.
constexpr double kFastMaxSlack = 0.01;

/// The pre-scan's first key of lane l: kScanStride (l mod 8), modulo kStageKeys.
constexpr int kScanStride = 9;
static_assert((kStageKeys & (kStageKeys - 1)) == 0, "the scan wraps by a mask");

/// rows: the x atom's 64 row operands as the block staged them (alpha = -inf past the atom's
/// end), keys: the y atom's kStageKeys key operands (beta = -inf past the atom's end).
template <int D, class T>
__device__ FastVerdict fast_scan(const RefinePass<T>& p, const float4* rows, const float4* keys,
                                 double* top) {
  static_assert(D >= 1 && D <= 3, "beta and D gammas in one float4");
  const int lane = int(threadIdx.x) & 31;
  // Rows: two a lane (alpha = -inf for a row of zero weight or past the atom).
  float xi[2][D], al[2];
  for (int r = 0; r < 2; ++r) {
    const float4 v = rows[32 * r + lane];
    al[r] = v.x;
    const float c[3] = {v.y, v.z, v.w};
    for (int e = 0; e < D; ++e) xi[r][e] = c[e];
  }
  const double E = p.fast[0], mag = p.fast[1];
  // A potential or operand out of range (E or mag not finite): the float64 scan decides.
  if (!(E < HUGE_VAL && mag < HUGE_VAL)) return FastVerdict::kUndecided;
  // The float64 scan's rounding beside its allowance: a kept verdict needs its value to reach
  // keep_at with this margin (then the float64 scan keeps the pair too), a drop its allowance
  // and this margin below.
  const double margin = 0x1.0p-46 * (2 * mag + fabs(p.keep_at));
  const double keep_from = p.keep_at + margin + E;
  float best = -HUGE_VALF;
  // Each lane starts at its own key, 9 (lane mod 8) on, and wraps (kScanStride): after 8 steps
  // the warp has met every key, not the first 8 only, and it asks after 4 steps, then every 8,
  // so a kept pair stops sooner (the issue's data at 2^17 points: a kept atom pair's steps 15.3
  // -> 6.4, its warp votes 1.9 -> 1.4; scripts/analysis/kept_granularity.cpp). A stride of 9 keys
  // (144 bytes) puts the 8 lanes of a quarter-warp's 16-byte loads on distinct banks. Every
  // lane still reads all kStageKeys slots once (an atom of fewer keys is padded with keys of
  // score -inf), so a dropped pair's maximum is the same.
  const int first = kScanStride * (lane & 7);
  for (int jj = 0; jj < kStageKeys; ++jj) {
    const float4 k = keys[(first + jj) & (kStageKeys - 1)];
    const float gam[3] = {k.y, k.z, k.w};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float z = al[r] + k.x;
#pragma unroll
      for (int e = 0; e < D; ++e) z = fmaf(xi[r][e], gam[e], z);
      best = fmaxf(best, z);
    }
    if ((jj == 3 || (jj & 7) == 7) && __any_sync(0xffffffffu, double(best) >= keep_from))
      return FastVerdict::kKept;
  }
  for (int o = 16; o > 0; o >>= 1) best = fmaxf(best, __shfl_xor_sync(0xffffffffu, best, o));
  const double M = double(best);
  if (M >= keep_from) return FastVerdict::kKept;
  // No finite score (no pair of positive weight, or operands that overflowed), or a bound whose
  // slack would grow the dropped mass by more than e^(2 E / eps) > 1.01 (small eps): the float64
  // scan decides.
  if (M == -HUGE_VAL || !(2 * E <= kFastMaxSlack * p.eps)) return FastVerdict::kUndecided;
  if (M + E < p.keep_at - 2 * maxima_allowance(mag) - margin) {
    *top = M + E;
    return FastVerdict::kDropped;
  }
  return FastVerdict::kUndecided;
}

/// A float's bits as an unsigned int in the float's order (negative values flipped).
__device__ __forceinline__ unsigned ordered_bits(float v) {
  const unsigned u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float from_ordered_bits(unsigned u) {
  return __uint_as_float((u & 0x80000000u) ? (u & 0x7fffffffu) : ~u);
}

/// The pre-scan's extents over the weighted points (one thread a point, x side then y side):
/// ext[k] = max |fl(x_k - o_k)|, ext[3 + k] the same for y, as float bits; ext[6], ext[7] the
/// largest f and the largest -f (rounded up to float), ext[8], ext[9] those of g, as ordered bits.
/// Every value is an unsigned whose order is the float order, 0 below all of them (ordered bits
/// of any float are positive): the block takes the maxima of its points (warp shuffles, then
/// shared memory) and adds them with one atomicMax per slot. (Five atomicMax per point on ten
/// addresses serialized: 7.6 ms at 2^20 points a side, H100, where fast_operands, which reads
/// the same points, stayed under ncu's 0.05 ms cut.)
constexpr int kExtentSlots = 10;
template <int D, class T>
__global__ void __launch_bounds__(kThreads) fast_extents(RefinePass<T> p, double3 o,
                                                         unsigned* ext) {
  __shared__ unsigned s_max[kThreads / 32][kExtentSlots];
  const std::int64_t t = std::int64_t(blockIdx.x) * kThreads + threadIdx.x;
  unsigned v[kExtentSlots];
#pragma unroll
  for (int k = 0; k < kExtentSlots; ++k) v[k] = 0;
  if (t < p.n + p.m) {
    const bool side = t >= p.n;
    const std::int64_t i = side ? t - p.n : t;
    if ((side ? p.b : p.a)[i] > 0) {
      const double* pt = (side ? p.y : p.x) + i * D;
      const double oc[3] = {o.x, o.y, o.z};
#pragma unroll
      for (int e = 0; e < D; ++e) {
        const unsigned u = __float_as_uint(fabsf(float(pt[e] - oc[e])));
        if (side)
          v[3 + e] = u;
        else
          v[e] = u;
      }
      // Rounded outward (a double potential): the extents hold the range.
      const double pot = double((side ? p.g : p.f)[i]);
      const unsigned hi = ordered_bits(__double2float_ru(pot));
      const unsigned lo = ordered_bits(__double2float_ru(-pot));
      if (side) {
        v[8] = hi;
        v[9] = lo;
      } else {
        v[6] = hi;
        v[7] = lo;
      }
    }
  }
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
#pragma unroll
  for (int k = 0; k < kExtentSlots; ++k) {
    const unsigned w = __reduce_max_sync(0xffffffffu, v[k]);
    if (lane == 0) s_max[warp][k] = w;
  }
  __syncthreads();
  if (threadIdx.x < kExtentSlots) {
    unsigned m = 0;
    for (int w = 0; w < kThreads / 32; ++w) m = max(m, s_max[w][threadIdx.x]);
    if (m) atomicMax(&ext[threadIdx.x], m);
  }
}

/// The gauge f_o = the middle of f's range, E and mag (RefinePass::fast) from the extents.
template <int D>
__global__ void fast_error(const unsigned* ext, double cs, double* fast) {
  const double fmx = from_ordered_bits(ext[6]), fmn = -double(from_ordered_bits(ext[7]));
  const double gmx = from_ordered_bits(ext[8]), gmn = -double(from_ordered_bits(ext[9]));
  const double fo = 0.5 * (fmx + fmn);
  double S = 0;
  for (int e = 0; e < D; ++e) {
    const double w = double(__uint_as_float(ext[e])) + double(__uint_as_float(ext[3 + e]));
    S += w * w;
  }
  const double F = fmax(fabs(fmx - fo), fabs(fmn - fo)) + fmax(fabs(gmx + fo), fabs(gmn + fo));
  constexpr FastCertificateModel kModel = expanded_certificate_model(D);  // its K_S, K_F
  fast[0] = 0x1.0p-24 * ((D + kModel.k_s) * cs * S + kModel.k_f * F) * (1 + 1e-5);
  fast[1] = fmax(fabs(fmx), fabs(fmn)) + fmax(fabs(gmx), fabs(gmn));
  fast[2] = fo;
}

/// The pre-scan's operands, one thread a point: rows4[i] = (alpha_i, xi_i), keys4[j] = (beta_j,
/// gamma_j); alpha, beta = -inf for a point of zero weight.
template <int D, class T>
__global__ void __launch_bounds__(kThreads) fast_operands(RefinePass<T> p, double3 o,
                                                          const double* fast, float4* rows4,
                                                          float4* keys4) {
  const std::int64_t t = std::int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (t >= p.n + p.m) return;
  const bool side = t >= p.n;
  const std::int64_t i = side ? t - p.n : t;
  const double fo = fast[2], cs = p.cs;
  const double oc[3] = {o.x, o.y, o.z};
  float v[4] = {-HUGE_VALF, 0.0f, 0.0f, 0.0f};
  if ((side ? p.b : p.a)[i] > 0) {
    const double* pt = (side ? p.y : p.x) + i * D;
    double q2 = 0;
    for (int e = 0; e < D; ++e) {
      const float c = float(pt[e] - oc[e]);
      q2 += double(c) * double(c);
      v[1 + e] = side ? float(2.0 * cs * double(c)) : c;
    }
    const double pot = double((side ? p.g : p.f)[i]);
    v[0] = float((side ? pot + fo : pot - fo) - cs * q2);
  }
  (side ? keys4 : rows4)[i] = make_float4(v[0], v[1], v[2], v[3]);
}

template <int D, class T>
__global__ void __launch_bounds__(kRefineWarps * 32) refine_kernel(RefinePass<T> p) {
  __shared__ double s_term[64];
  __shared__ unsigned long long s_clear;
  // A staged key: its D coordinates, then g, padded to an even count and read as double2 words
  // (two 16-byte loads a pair at d = 3 instead of four 8-byte ones).
  constexpr int kW = D > 0 ? (D + 2) / 2 * 2 : 2;
  __shared__ __align__(16) double s_keys[kRefineWarps][D > 0 ? kStageKeys : 1][kW];
  // The fp32 pre-scan's operands of the block pair's atoms (up to 8 a side), staged once for the
  // block: each x atom's rows and y atom's keys serve every kept pair they are in (was: each
  // warp read its atom pair's rows and keys from global memory, 2 KB an atom pair; 18.2 ms for
  // 19.8M atom pairs at 2^20 points a side, H100).
  constexpr int kSide = D > 0 ? 8 : 1;
  __shared__ float4 s_rows4[kSide][D > 0 ? kStageKeys : 1];
  __shared__ float4 s_keys4[kSide][D > 0 ? kStageKeys : 1];
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  for (std::int64_t k = blockIdx.x; k < p.count; k += gridDim.x) {
    const std::uint64_t mask = p.masks[k];
    if (threadIdx.x == 0) s_clear = 0;
    const std::int64_t I0 = std::int64_t(p.keys[k] >> 32);
    const std::int64_t J0 = std::int64_t(p.keys[k] & 0xffffffffu);
    if constexpr (D > 0) {
      // The atoms some kept bit names: x atom a when byte a of the mask is set, y atom b when
      // bit b of some byte is.
      std::uint64_t cols = mask;
      cols |= cols >> 32;
      cols |= cols >> 16;
      cols |= cols >> 8;
      for (int e = int(threadIdx.x); e < 2 * kSide * kStageKeys; e += kRefineWarps * 32) {
        const bool key = e >= kSide * kStageKeys;
        const int a = (key ? e - kSide * kStageKeys : e) / kStageKeys, r = e % kStageKeys;
        if (!(key ? (cols >> a) & 1u : (mask >> (8 * a)) & 0xFFu)) continue;
        const std::int64_t atom0 = ((key ? J0 << p.by : I0 << p.bx) + a) * p.atom;
        const std::int64_t end = min(key ? p.m : p.n, atom0 + p.atom);
        if (key) {
          s_keys4[a][r] = atom0 + r < end ? p.keys4[atom0 + r]
                                          : make_float4(-HUGE_VALF, 0.0f, 0.0f, 0.0f);
        } else {
          s_rows4[a][r] = atom0 + r < end ? p.rows4[atom0 + r]
                                          : make_float4(-HUGE_VALF, 0.0f, 0.0f, 0.0f);
        }
      }
    }
    __syncthreads();
    int idx = 0;
    for (std::uint64_t v = mask; v; v &= v - 1, ++idx) {
      if (idx % kRefineWarps != warp) continue;
      const int bit = __ffsll(static_cast<long long>(v)) - 1;
      const std::int64_t I = (I0 << p.bx) + (bit >> 3), J = (J0 << p.by) + (bit & 7);
      const std::int64_t i0 = I * p.atom, j0 = J * p.atom;
      const std::int64_t i1 = min(p.n, i0 + p.atom), j1 = min(p.m, j0 + p.atom);
      double best = -HUGE_VAL, mag = 0;
      bool kept = false, decided = false;
      double top = -HUGE_VAL;
      if constexpr (D > 0) {
        const FastVerdict verdict =
            fast_scan<D>(p, s_rows4[bit >> 3], s_keys4[bit & 7], &top);
        kept = verdict == FastVerdict::kKept;
        decided = verdict != FastVerdict::kUndecided;
      }
      if (decided) {
        // the fp32 pre-scan's verdict
      } else if constexpr (D > 0) {
        // The largest |g_j| of the atom's keys of positive weight (fmax skips the NaNs): a row's
        // mag is then max_j fl(|f_i| + |g_j|) = fl(|f_i| + max_j |g_j|) (rounding is monotone),
        // taken once per row instead of two float64 operations per pair; the same values, so the
        // same decisions and dropped mass as maxima_pair's running mag (an early keep can only
        // come sooner, when the unhoisted test would have kept the pair by its end anyway).
        double gabs = -HUGE_VAL;
        __syncwarp();  // the warp's previous float64 scan has read s_keys[warp]
        for (std::int64_t j = j0 + lane; j < j1; j += 32) {
          double* sk = s_keys[warp][j - j0];
          for (int e = 0; e < D; ++e) sk[e] = p.y[j * D + e];
          sk[D] = p.b[j] > 0 ? double(p.g[j]) : __longlong_as_double(0x7ff8000000000000ll);
          gabs = fmax(gabs, fabs(sk[D]));
        }
        for (int o = 16; o > 0; o >>= 1) gabs = fmax(gabs, __shfl_xor_sync(0xffffffffu, gabs, o));
        __syncwarp();
        const int nk = int(j1 - j0);
        for (std::int64_t ib = i0; ib < i1 && !kept; ib += 32) {
          const std::int64_t i = ib + lane;
          const bool row = i < i1 && p.a[i] > 0;
          double xi[D] = {};
          const double fi = row ? double(p.f[i]) : __longlong_as_double(0x7ff8000000000000ll);
          if (row)
            for (int e = 0; e < D; ++e) xi[e] = p.x[i * D + e];
          mag = fmax(mag, fabs(fi) + gabs);
          for (int jj = 0; jj < nk; ++jj) {
            double sk[kW];
#pragma unroll
            for (int w = 0; w < kW / 2; ++w) {
              const double2 q = reinterpret_cast<const double2*>(s_keys[warp][jj])[w];
              sk[2 * w] = q.x;
              sk[2 * w + 1] = q.y;
            }
            maxima_pair_best<D>(xi, sk, D, fi, sk[D], p.cs, &best);
            if ((jj & 7) == 7 &&
                __any_sync(0xffffffffu, best + maxima_allowance(mag) >= p.keep_at)) {
              kept = true;
              break;
            }
          }
        }
      } else {
        for (std::int64_t ib = i0; ib < i1 && !kept; ib += 32) {
          const std::int64_t i = ib + lane;
          const bool row = i < i1 && p.a[i] > 0;
          const double fi = row ? double(p.f[i]) : 0.0;
          for (std::int64_t j = j0; j < j1; ++j) {
            if (p.b[j] > 0 && row)
              maxima_pair<0>(p.x + i * p.d, p.y + j * p.d, p.d, fi, double(p.g[j]), p.cs, &best,
                             &mag);
            if (((j - j0) & 7) == 7 &&
                __any_sync(0xffffffffu, best + maxima_allowance(mag) >= p.keep_at)) {
              kept = true;
              break;
            }
          }
        }
      }
      if (kept) continue;
      if (!decided) {
        for (int o = 16; o > 0; o >>= 1) {
          best = fmax(best, __shfl_xor_sync(0xffffffffu, best, o));
          mag = fmax(mag, __shfl_xor_sync(0xffffffffu, mag, o));
        }
        top = best == -HUGE_VAL ? best : best + maxima_allowance(mag);
      }
      if (lane == 0 && top < p.keep_at) {
        s_term[bit] = p.mass_x[I] * p.mass_y[J] * exp(top / p.eps);
        atomicOr(&s_clear, 1ull << bit);
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      const unsigned long long clear = s_clear;
      double lost = 0;
      for (unsigned long long v = clear; v; v &= v - 1)
        lost += s_term[__ffsll(static_cast<long long>(v)) - 1];
      p.masks[k] = mask & ~clear;
      p.contrib[k] = lost;
      atomicAdd(&p.counts[0], static_cast<unsigned long long>(__popcll(mask)));
      atomicAdd(&p.counts[1], static_cast<unsigned long long>(__popcll(clear)));
    }
    __syncthreads();
  }
}

/// out[b] = the sum of v[b kSumChunk, (b + 1) kSumChunk) in a fixed order (each thread's strided
/// sum, then block_sum's fixed reduction).
__global__ void __launch_bounds__(kThreads) chunk_sums(const double* v, std::int64_t count,
                                                       double* out) {
  __shared__ double red[32];
  const std::int64_t base = std::int64_t(blockIdx.x) * kSumChunk;
  double acc = 0;
  for (int i = threadIdx.x; i < kSumChunk; i += kThreads)
    if (base + i < count) acc += v[base + i];
  const double r = block_sum(acc, red);
  if (threadIdx.x == 0) out[blockIdx.x] = r;
}

unsigned grid(std::int64_t count) { return unsigned((count + kThreads - 1) / kThreads); }

template <class T>
T* as(const std::shared_ptr<void>& p) {
  return static_cast<T*>(p.get());
}

}  // namespace

namespace {

/// f(std::integral_constant<int, D>) for the kernels' width: D = d for d <= 3 (unrolled), else 0.
template <class F>
void by_dim(int d, F&& f) {
  switch (d) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    default: f(std::integral_constant<int, 0>{}); break;
  }
}

/// The sum of `count` doubles at `v` (device): fixed chunks on the device, the chunks in order
/// on the host. Synchronizes.
double ordered_sum(const double* v, std::int64_t count, const DeviceAlloc& alloc, cudaStream_t st) {
  if (count <= 0) return 0;
  const std::int64_t chunks = (count + kSumChunk - 1) / kSumChunk;
  const auto part = alloc(sizeof(double) * std::size_t(chunks));
  chunk_sums<<<unsigned(chunks), kThreads, 0, st>>>(v, count, as<double>(part));
  KANTOR_CUDA_CHECK_LAUNCH();
  std::vector<double> h(static_cast<std::size_t>(chunks));
  KANTOR_CUDA_TRY(cudaMemcpyAsync(h.data(), part.get(), sizeof(double) * h.size(),
                                  cudaMemcpyDeviceToHost, st));
  KANTOR_CUDA_TRY(cudaStreamSynchronize(st));
  double sum = 0;
  for (const double x : h) sum += x;
  return sum;
}

/// offset = the exclusive scan of flags (count entries); returns the total. Synchronizes.
std::int64_t exclusive_scan(const std::uint64_t* flags, std::uint64_t* offset, std::int64_t count,
                            const DeviceAlloc& alloc, cudaStream_t st) {
  std::size_t temp_bytes = 0;
  KANTOR_CUDA_TRY(cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, flags, offset, count, st));
  {
    const auto temp = alloc(std::max<std::size_t>(temp_bytes, 1));
    KANTOR_CUDA_TRY(cub::DeviceScan::ExclusiveSum(temp.get(), temp_bytes, flags, offset, count, st));
  }
  std::uint64_t tail[2] = {0, 0};
  KANTOR_CUDA_TRY(cudaMemcpyAsync(&tail[0], offset + (count - 1), sizeof(std::uint64_t),
                                  cudaMemcpyDeviceToHost, st));
  KANTOR_CUDA_TRY(cudaMemcpyAsync(&tail[1], flags + (count - 1), sizeof(std::uint64_t),
                                  cudaMemcpyDeviceToHost, st));
  KANTOR_CUDA_TRY(cudaStreamSynchronize(st));
  return std::int64_t(tail[0] + tail[1]);
}

}  // namespace

void screen_descent(const DescentInput& in, const DeviceAlloc& alloc, void* stream,
                    DescentOutput* out) {
  auto st = static_cast<cudaStream_t>(stream);
  if (in.d < 1) throw InvalidArgument("screen descent: d must be >= 1");
  if (in.x.empty() || in.y.empty()) throw InvalidArgument("screen descent: empty hierarchy");
  for (const auto* side : {&in.x, &in.y})
    for (const DescentLevel& L : *side)
      if (L.count >= (std::int64_t(1) << 31))
        throw InvalidArgument("screen descent: more than 2^31 cells on a level");
  const int tx = int(in.x.size()) - 1, ty = int(in.y.size()) - 1;
  // The host descent's stages: level-synchronous for `steps` levels, then blocks.
  const int steps = std::max(0, std::max(tx, ty) - kBlockLevels);
  const int bx = std::max(0, tx - steps), by = std::max(0, ty - steps);
  if (in.block_x != bx || in.block_y != by)
    throw InvalidArgument("screen descent: block levels (" + std::to_string(in.block_x) + ", " +
                          std::to_string(in.block_y) + ") are not the hierarchies' (" +
                          std::to_string(bx) + ", " + std::to_string(by) + ")");
  out->keys.clear();
  out->masks.clear();
  out->tested = 0;
  out->dropped = 0;
  out->box_masks.clear();
  out->point_tests = out->point_drops = 0;
  out->point_dropped = 0;
  out->kept = KeptPairs();
  out->kept.bx = bx;
  out->kept.by = by;
  if (in.points) {
    const DescentPoints& q = *in.points;
    if (!q.x || !q.y || !q.a || !q.b || !((q.f32 && q.g32) || (q.f64 && q.g64)) || q.atom <= 0)
      throw InvalidArgument("screen descent: the points stage lacks its points or potentials");
    if ((q.n + q.atom - 1) / q.atom != in.x[0].count ||
        (q.m + q.atom - 1) / q.atom != in.y[0].count)
      throw InvalidArgument("screen descent: atoms of " + std::to_string(q.atom) + " points over " +
                            std::to_string(q.n) + " x " + std::to_string(q.m) +
                            " points are not the hierarchies' " + std::to_string(in.x[0].count) +
                            " x " + std::to_string(in.y[0].count));
  }
  out->points_done = in.points != nullptr;  // nothing kept: nothing to evaluate
  std::int64_t count = std::int64_t(in.top.size() / 2);
  std::shared_ptr<void> ci_mem, cj_mem;
  {
    std::vector<std::int32_t> hi(static_cast<std::size_t>(count)), hj(hi.size());
    for (std::int64_t k = 0; k < count; ++k) {
      hi[std::size_t(k)] = in.top[std::size_t(2 * k)];
      hj[std::size_t(k)] = in.top[std::size_t(2 * k + 1)];
    }
    ci_mem = alloc(sizeof(std::int32_t) * std::size_t(std::max<std::int64_t>(count, 1)));
    cj_mem = alloc(sizeof(std::int32_t) * std::size_t(std::max<std::int64_t>(count, 1)));
    if (count > 0) {
      KANTOR_CUDA_TRY(cudaMemcpyAsync(ci_mem.get(), hi.data(), sizeof(std::int32_t) * hi.size(),
                                      cudaMemcpyHostToDevice, st));
      KANTOR_CUDA_TRY(cudaMemcpyAsync(cj_mem.get(), hj.data(), sizeof(std::int32_t) * hj.size(),
                                      cudaMemcpyHostToDevice, st));
      KANTOR_CUDA_TRY(cudaStreamSynchronize(st));  // the host vectors go out of scope
    }
  }
  // ---- down to the block levels ----
  for (int s = 0; s < steps && count > 0; ++s) {
    const int lx = std::max(0, tx - s), ly = std::max(0, ty - s);
    LevelPass p;
    p.ci = as<std::int32_t>(ci_mem);
    p.cj = as<std::int32_t>(cj_mem);
    p.count = count;
    p.dx = lx > 0;
    p.dy = ly > 0;
    p.X = in.x[std::size_t(lx)];
    p.Y = in.y[std::size_t(ly)];
    p.Xc = in.x[std::size_t(p.dx ? lx - 1 : lx)];
    p.Yc = in.y[std::size_t(p.dy ? ly - 1 : ly)];
    p.d = in.d;
    p.c = in.c;
    p.keep_at = in.keep_at;
    p.eps = in.eps;
    const auto nchild_mem = alloc(sizeof(std::uint64_t) * std::size_t(count));
    const auto contrib_mem = alloc(sizeof(double) * std::size_t(count));
    p.nchild = as<std::uint64_t>(nchild_mem);
    p.contrib = as<double>(contrib_mem);
    by_dim(in.d, [&](auto D) { bound_kernel<D.value><<<grid(count), kThreads, 0, st>>>(p); });
    KANTOR_CUDA_CHECK_LAUNCH();
    out->tested += count;
    const auto offset_mem = alloc(sizeof(std::uint64_t) * std::size_t(count));
    const std::int64_t next = exclusive_scan(p.nchild, as<std::uint64_t>(offset_mem), count, alloc, st);
    out->dropped += ordered_sum(p.contrib, count, alloc, st);
    auto ni_mem = alloc(sizeof(std::int32_t) * std::size_t(std::max<std::int64_t>(next, 1)));
    auto nj_mem = alloc(sizeof(std::int32_t) * std::size_t(std::max<std::int64_t>(next, 1)));
    if (next > 0) {
      expand_kernel<<<grid(count), kThreads, 0, st>>>(p, as<std::uint64_t>(offset_mem),
                                                      as<std::int32_t>(ni_mem),
                                                      as<std::int32_t>(nj_mem));
      KANTOR_CUDA_CHECK_LAUNCH();
    }
    ci_mem = std::move(ni_mem);  // the level's arrays are released here (stream-ordered)
    cj_mem = std::move(nj_mem);
    count = next;
  }
  if (count == 0) return;
  // ---- the block pairs: depth-first to the atoms, one thread each ----
  BlockPass b;
  b.ci = as<std::int32_t>(ci_mem);
  b.cj = as<std::int32_t>(cj_mem);
  b.count = count;
  for (int l = 0; l <= kBlockLevels; ++l) {
    b.X[l] = l <= bx ? in.x[std::size_t(l)] : DescentLevel{};
    b.Y[l] = l <= by ? in.y[std::size_t(l)] : DescentLevel{};
  }
  b.bx = bx;
  b.by = by;
  b.d = in.d;
  b.c = in.c;
  b.keep_at = in.keep_at;
  b.eps = in.eps;
  const auto mask_mem = alloc(sizeof(std::uint64_t) * std::size_t(count));
  const auto flag_mem = alloc(sizeof(std::uint64_t) * std::size_t(count));
  const auto contrib_mem = alloc(sizeof(double) * std::size_t(count));
  const auto tested_mem = alloc(sizeof(unsigned long long));
  b.mask = as<std::uint64_t>(mask_mem);
  b.nonempty = as<std::uint64_t>(flag_mem);
  b.contrib = as<double>(contrib_mem);
  b.tested = as<unsigned long long>(tested_mem);
  KANTOR_CUDA_TRY(cudaMemsetAsync(b.tested, 0, sizeof(unsigned long long), st));
  by_dim(in.d, [&](auto D) { block_kernel<D.value><<<grid(count), kThreads, 0, st>>>(b); });
  KANTOR_CUDA_CHECK_LAUNCH();
  unsigned long long tested = 0;
  KANTOR_CUDA_TRY(cudaMemcpyAsync(&tested, b.tested, sizeof(tested), cudaMemcpyDeviceToHost, st));
  out->dropped += ordered_sum(b.contrib, count, alloc, st);  // synchronizes
  out->tested += std::int64_t(tested);
  // The non-empty masks, compacted, sorted by block key.
  const auto offset_mem = alloc(sizeof(std::uint64_t) * std::size_t(count));
  const std::int64_t kept = exclusive_scan(b.nonempty, as<std::uint64_t>(offset_mem), count, alloc, st);
  if (kept == 0) return;
  const auto keys_mem = alloc(sizeof(std::uint64_t) * std::size_t(kept));
  const auto masks_mem = alloc(sizeof(std::uint64_t) * std::size_t(kept));
  emit_kernel<<<grid(count), kThreads, 0, st>>>(b, as<std::uint64_t>(offset_mem),
                                                as<std::uint64_t>(keys_mem),
                                                as<std::uint64_t>(masks_mem));
  KANTOR_CUDA_CHECK_LAUNCH();
  const auto skeys_mem = alloc(sizeof(std::uint64_t) * std::size_t(kept));
  const auto smasks_mem = alloc(sizeof(std::uint64_t) * std::size_t(kept));
  std::size_t temp_bytes = 0;
  KANTOR_CUDA_TRY(cub::DeviceRadixSort::SortPairs(
      nullptr, temp_bytes, as<std::uint64_t>(keys_mem), as<std::uint64_t>(skeys_mem),
      as<std::uint64_t>(masks_mem), as<std::uint64_t>(smasks_mem), kept, 0, 64, st));
  {
    const auto temp = alloc(std::max<std::size_t>(temp_bytes, 1));
    KANTOR_CUDA_TRY(cub::DeviceRadixSort::SortPairs(
        temp.get(), temp_bytes, as<std::uint64_t>(keys_mem), as<std::uint64_t>(skeys_mem),
        as<std::uint64_t>(masks_mem), as<std::uint64_t>(smasks_mem), kept, 0, 64, st));
  }
  if (in.points) {
    const DescentPoints& q = *in.points;
    if (q.keep_box_masks) {
      out->box_masks.resize(std::size_t(kept));
      KANTOR_CUDA_TRY(cudaMemcpyAsync(out->box_masks.data(), smasks_mem.get(),
                                      sizeof(std::uint64_t) * kept, cudaMemcpyDeviceToHost, st));
    }
    const auto contrib = alloc(sizeof(double) * std::size_t(kept));
    const auto counts = alloc(2 * sizeof(unsigned long long));
    KANTOR_CUDA_TRY(cudaMemsetAsync(counts.get(), 0, 2 * sizeof(unsigned long long), st));
    auto launch = [&](auto D, const auto* f, const auto* g) {
      using T = std::remove_const_t<std::remove_pointer_t<decltype(f)>>;
      RefinePass<T> r;
      r.x = q.x;
      r.y = q.y;
      r.a = q.a;
      r.b = q.b;
      r.f = f;
      r.g = g;
      r.n = q.n;
      r.m = q.m;
      r.atom = q.atom;
      r.d = in.d;
      r.cs = maxima_cost_scale(in.c, in.d);
      r.keys = as<std::uint64_t>(skeys_mem);
      r.masks = as<std::uint64_t>(smasks_mem);
      r.count = kept;
      r.bx = bx;
      r.by = by;
      r.mass_x = in.x[0].mass;
      r.mass_y = in.y[0].mass;
      r.keep_at = in.keep_at;
      r.eps = in.eps;
      r.contrib = as<double>(contrib);
      r.counts = as<unsigned long long>(counts);
      r.rows4 = r.keys4 = nullptr;
      r.fast = nullptr;
      std::shared_ptr<void> fast_mem;
      if constexpr (decltype(D)::value > 0) {
        // The fp32 pre-scan's operands (fast_scan), about 16 bytes a point.
        constexpr int Dv = decltype(D)::value;
        const double3 o{q.center[0], Dv > 1 ? q.center[1] : 0.0, Dv > 2 ? q.center[2] : 0.0};
        const std::int64_t points = q.n + q.m;
        fast_mem = alloc(sizeof(float4) * std::size_t(points) + 16 * sizeof(unsigned) +
                         4 * sizeof(double));
        float4* ops = static_cast<float4*>(fast_mem.get());
        unsigned* ext = reinterpret_cast<unsigned*>(ops + points);
        double* fast = reinterpret_cast<double*>(ext + 16);
        KANTOR_CUDA_TRY(cudaMemsetAsync(ext, 0, 16 * sizeof(unsigned), st));
        const unsigned grid = unsigned((points + kThreads - 1) / kThreads);
        fast_extents<Dv, T><<<grid, kThreads, 0, st>>>(r, o, ext);
        KANTOR_CUDA_CHECK_LAUNCH();
        fast_error<Dv><<<1, 1, 0, st>>>(ext, r.cs, fast);
        KANTOR_CUDA_CHECK_LAUNCH();
        fast_operands<Dv, T><<<grid, kThreads, 0, st>>>(r, o, fast, ops, ops + q.n);
        KANTOR_CUDA_CHECK_LAUNCH();
        r.rows4 = ops;
        r.keys4 = ops + q.n;
        r.fast = fast;
      }
      const unsigned blocks = unsigned(std::min<std::int64_t>(kept, std::int64_t(1) << 20));
      refine_kernel<decltype(D)::value, T><<<blocks, kRefineWarps * 32, 0, st>>>(r);
      KANTOR_CUDA_CHECK_LAUNCH();
    };
    by_dim(q.atom <= kStageKeys ? in.d : 0, [&](auto D) {
      if (q.f32)
        launch(D, q.f32, q.g32);
      else
        launch(D, q.f64, q.g64);
    });
    unsigned long long c[2] = {0, 0};
    KANTOR_CUDA_TRY(cudaMemcpyAsync(c, counts.get(), sizeof(c), cudaMemcpyDeviceToHost, st));
    out->point_dropped = ordered_sum(as<double>(contrib), kept, alloc, st);  // synchronizes
    out->point_tests = std::int64_t(c[0]);
    out->point_drops = std::int64_t(c[1]);
  }
  if (in.keep_pairs) {
    out->kept.keys = skeys_mem;
    out->kept.masks = smasks_mem;
    out->kept.count = kept;
    KANTOR_CUDA_TRY(cudaStreamSynchronize(st));
    return;
  }
  out->keys.resize(std::size_t(kept));
  out->masks.resize(std::size_t(kept));
  KANTOR_CUDA_TRY(cudaMemcpyAsync(out->keys.data(), skeys_mem.get(), sizeof(std::uint64_t) * kept,
                                  cudaMemcpyDeviceToHost, st));
  KANTOR_CUDA_TRY(cudaMemcpyAsync(out->masks.data(), smasks_mem.get(),
                                  sizeof(std::uint64_t) * kept, cudaMemcpyDeviceToHost, st));
  KANTOR_CUDA_TRY(cudaStreamSynchronize(st));
}

}  // namespace kantor::cuda
