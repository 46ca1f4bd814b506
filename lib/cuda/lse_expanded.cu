// CUDA-core LSE kernel for float data of small width (d <= 8) in the norm expansion: the
// "expanded" family (lib/cuda/dispatch.cpp). Same conventions and outputs as the exact kernel
// (lib/cuda/lse_simt.cuh: u units, alpha = log2(e) c / eps, partial (max, sum) per split and
// row), but the score of a pair is one FMA chain instead of differences and squares:
//
//   u_ij + |x_i|^2 = beta'_j + <x_i, 2 y_j>,   beta'_j = (g_j + eps log b_j) / c - |y_j|^2,
//
// so a thread holds x_i and the running state in the row's shifted units (u + |x_i|^2, the same
// shift for every key of the row: the exponents alpha (u - m) are unchanged) and returns
// m - |x_i|^2. Per pair: d FMAs, a max, an FMA, ex2 and an add (8 instructions at d = 3 against
// 15 for the differences). Rounding: the clouds are centred on their joint bounding box, so
// |x|^2 and |y|^2 are at most the squared half-diagonal D^2 / 4; the chain adds a few float ulps
// of D^2 / 4 + |beta| to u (against one ulp of |beta| and of |x - y|^2 for the differences), the
// order of the fp32 rounding of the stored potentials themselves (g ~ c D^2).
//
// Staging: each thread stages one key per round of 128 (2 y_j and beta'_j as float4 words in
// shared memory, one broadcast load per key and word); rows scan the staged keys in steps of
// 32 (tile max, one rescale, 32 exponentials). A step whose keys are all below its rows' running
// maxima by more than 64 in the exponent (2^-64 of the largest term each, so at most 2^-24 of
// the sum for 2^40 keys) is skipped by the whole warp: its exponentials would round into nothing.
#include <cuda_runtime.h>

#include <string>

#include "kantor/error.hpp"
#include "lib/cuda/check.hpp"
#include "lib/cuda/lse_common.cuh"
#include "lib/cuda/lse_launch.hpp"
#include "lib/cuda/lse_simt.cuh"

namespace kantor::cuda {
namespace {

constexpr int kThreads = 128;   // query rows per block (one per thread) = kBlockRows
constexpr int kStage = 128;     // keys staged per round (one per thread)
constexpr int kStep = 32;       // keys per online-max step
constexpr float kSkipBits = 64.0f;
static_assert(kThreads == kBlockRows, "the block lists' row tiles are the kernel's row blocks");

/// Words (float4) per staged key: kD coordinates and the bias.
template <int kD>
constexpr int words() {
  return (kD + 1 + 3) / 4;
}

/// Adds keys [kbeg, kend) to the calling thread's state (m, s) in shifted units. All threads of
/// the block call it together (block-uniform ranges).
template <int kD>
__device__ __forceinline__ void expanded_scan(const LseSide<float>& sd, int ld, float eps,
                                              float inv_c, float alpha, const float (&xr)[kD],
                                              std::int64_t kbeg, std::int64_t kend, float& m,
                                              float& s) {
  constexpr int kW = words<kD>();
  __shared__ float4 ks[kStage][kW];
  const int tid = threadIdx.x;
  for (std::int64_t t0 = kbeg; t0 < kend; t0 += kStage) {
    __syncthreads();  // the previous round's keys are no longer read
    {
      float v[4 * kW];
#pragma unroll
      for (int k = 0; k < 4 * kW; ++k) v[k] = 0.0f;
      const std::int64_t j = t0 + tid;
      if (j < kend) {
        // The stored rows are zero-padded to ld >= kD floats (a multiple of 4, 16-byte aligned).
        const float4* row = reinterpret_cast<const float4*>(sd.keys + j * ld);
        float y[4 * ((kD + 3) / 4)];
#pragma unroll
        for (int w = 0; w < (kD + 3) / 4; ++w) {
          const float4 q = row[w];
          y[4 * w] = q.x, y[4 * w + 1] = q.y, y[4 * w + 2] = q.z, y[4 * w + 3] = q.w;
        }
        float n2 = 0.0f;
#pragma unroll
        for (int k = 0; k < kD; ++k) {
          v[k] = 2.0f * y[k];
          n2 = fmaf(y[k], y[k], n2);
        }
        // Guard: a zero-weight key has log b_j = -inf and stays masked (-inf bias).
        v[kD] = (sd.key_pot[j] + eps * sd.key_logw[j]) * inv_c - n2;
      } else {
        v[kD] = neg_inf<float>();  // past the range: masked
      }
#pragma unroll
      for (int w = 0; w < kW; ++w)
        ks[tid][w] = make_float4(v[4 * w], v[4 * w + 1], v[4 * w + 2], v[4 * w + 3]);
    }
    __syncthreads();
    const int count = int(kend - t0 < kStage ? kend - t0 : kStage);
    for (int b = 0; b < count; b += kStep) {  // block-uniform
      float u[kStep];
      float tmax = neg_inf<float>();
#pragma unroll
      for (int jj = 0; jj < kStep; ++jj) {
        float key[4 * kW];
#pragma unroll
        for (int w = 0; w < kW; ++w) {
          const float4 q = ks[b + jj][w];
          key[4 * w] = q.x, key[4 * w + 1] = q.y, key[4 * w + 2] = q.z, key[4 * w + 3] = q.w;
        }
        float acc = key[kD];
#pragma unroll
        for (int k = kD - 1; k >= 0; --k) acc = fmaf(xr[k], key[k], acc);
        u[jj] = acc;
        tmax = fmaxf(tmax, acc);
      }
      const float scale = online_raise(m, tmax, alpha, FastExp2{});
      s *= scale;
      // Skip test: every row of the warp has a finite maximum that this step's keys stay 2^64
      // below (or has seen only masked keys, and this step adds none either).
      const bool negligible = m == neg_inf<float>() || alpha * (tmax - m) < -kSkipBits;
      if (__all_sync(0xffffffffu, negligible)) continue;
      if (m != neg_inf<float>()) {
        const float nam = -alpha * m;
        float ts = 0.0f;
#pragma unroll
        for (int jj = 0; jj < kStep; ++jj) ts += fast_exp2(fmaf(alpha, u[jj], nam));
        s += ts;
      }
    }
  }
}

template <int kD>
__global__ void __launch_bounds__(kThreads) lse_expanded_kernel(LsePass<float> p,
                                                                int blocks_side0) {
  const int side = int(blockIdx.x) < blocks_side0 ? 0 : 1;
  const LseSide<float> sd = side ? p.side[1] : p.side[0];
  const std::int64_t rb = std::int64_t(blockIdx.x) - (side ? blocks_side0 : 0);
  const std::int64_t row = rb * kThreads + threadIdx.x;
  const bool row_ok = row < sd.rows;
  float xr[kD];
  float xn = 0.0f;
#pragma unroll
  for (int k = 0; k < kD; ++k) {
    xr[k] = row_ok ? sd.queries[row * p.ld + k] : 0.0f;
    xn = fmaf(xr[k], xr[k], xn);
  }
  const float inv_c = 1.0f / p.cost_scale;
  float m = neg_inf<float>(), s = 0.0f;
  for_each_key_range(sd, rb, p.splits, int(blockIdx.y), kStep,
                     [&](std::int64_t kbeg, std::int64_t kend) {
                       expanded_scan<kD>(sd, p.ld, p.eps, inv_c, p.alpha, xr, kbeg, kend, m, s);
                     });
  if (row_ok) {
    const std::int64_t at = std::int64_t(blockIdx.y) * sd.rows + row;
    sd.part_max[at] = m == neg_inf<float>() ? m : m - xn;  // back to u units
    sd.part_sum[at] = s;
  }
}

template <int kD>
int blocks_per_sm() {
  int nb = 0;
  KANTOR_CUDA_TRY(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, lse_expanded_kernel<kD>, kThreads, 0));
  return nb;
}

/// The kernel's width for dimension d: 3, 4 or 8 coordinates (zero-padded ones are exact).
int expanded_width(int d) { return d <= 3 ? 3 : d <= 4 ? 4 : 8; }

}  // namespace

int expanded_blocks_per_sm(int ld) { return ld == 4 ? blocks_per_sm<4>() : blocks_per_sm<8>(); }

void launch_lse_expanded(const LsePass<float>& p, void* stream) {
  const int d = p.dim;
  if (d < 1 || d > kExpandedMaxDim || p.ld < expanded_width(d) || p.ld % 4 != 0)
    throw InvalidArgument("the expanded LSE kernel serves d <= " +
                          std::to_string(kExpandedMaxDim) + " on rows of a multiple of 4 floats");
  const int b0 = int((p.side[0].rows + kThreads - 1) / kThreads);
  const int b1 = p.nsides > 1 ? int((p.side[1].rows + kThreads - 1) / kThreads) : 0;
  const dim3 grid(unsigned(b0 + b1), unsigned(p.splits));
  auto st = static_cast<cudaStream_t>(stream);
  switch (expanded_width(d)) {
    case 3: lse_expanded_kernel<3><<<grid, kThreads, 0, st>>>(p, b0); break;
    case 4: lse_expanded_kernel<4><<<grid, kThreads, 0, st>>>(p, b0); break;
    default: lse_expanded_kernel<8><<<grid, kThreads, 0, st>>>(p, b0); break;
  }
  KANTOR_CUDA_CHECK_LAUNCH();
}

}  // namespace kantor::cuda
