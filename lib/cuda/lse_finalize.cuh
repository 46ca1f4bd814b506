// Finalize kernels of the LSE passes: merge the split-K partials of each row, form the new
// potential, the marginal-error term and the relaxed update; deterministic reductions of block
// partials into the double scalars the Oracle promises. Conventions: lib/cuda/lse_params.hpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "lib/cuda/lse_common.cuh"
#include "lib/cuda/lse_params.hpp"

namespace kantor::cuda {

constexpr int kFinalizeThreads = 256;

/// One thread per row of side 0 then side 1.
template <class T>
__global__ void __launch_bounds__(kFinalizeThreads) lse_finalize_kernel(LsePass<T> p) {
  __shared__ double red[32];
  const std::int64_t idx = std::int64_t(blockIdx.x) * kFinalizeThreads + threadIdx.x;
  const std::int64_t rows0 = p.side[0].rows;
  const std::int64_t rows_total = rows0 + (p.nsides > 1 ? p.side[1].rows : 0);
  double e = 0;
  if (idx < rows_total) {
    const int side = idx < rows0 ? 0 : 1;
    const LseSide<T> sd = side ? p.side[1] : p.side[0];
    const std::int64_t i = idx - (side ? rows0 : 0);
    const double alpha = double(p.alpha), eps = double(p.eps);
    // The row's state: the split-K partials merged (lib/core/online_lse.hpp; -inf safe: splits
    // that saw only masked keys add nothing, a row with every key masked gets +inf, as the CPU
    // engine).
    // (The merge of all splits at once: the common max first, then one rescale per split.)
    // (Eight splits' loads issued together, then combined in split order: the same sums as
    // one split at a time, without a memory round trip per split; small passes run 16 splits.)
    constexpr int kBatch = 8;
    double mx = -INFINITY, sum = 0;
    int s = 0;
    for (; s + kBatch <= p.splits; s += kBatch) {
      double m[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) m[k] = double(sd.part_max[(s + k) * sd.rows + i]);
#pragma unroll
      for (int k = 0; k < kBatch; ++k) mx = fmax(mx, m[k]);
    }
    for (; s < p.splits; ++s) mx = fmax(mx, double(sd.part_max[s * sd.rows + i]));
    s = 0;
    for (; s + kBatch <= p.splits; s += kBatch) {
      double m[kBatch], v[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        m[k] = double(sd.part_max[(s + k) * sd.rows + i]);
        v[k] = double(sd.part_sum[(s + k) * sd.rows + i]);
      }
#pragma unroll
      for (int k = 0; k < kBatch; ++k) sum += v[k] * online_rescale(m[k], mx, alpha, ExactExp2{});
    }
    for (; s < p.splits; ++s)
      sum += double(sd.part_sum[s * sd.rows + i]) *
             online_rescale(double(sd.part_max[s * sd.rows + i]), mx, alpha, ExactExp2{});
    const double qn = sd.query_norm ? double(sd.query_norm[i]) : 0.0;
    const double fresh =
        damping(sd.rho_inv, eps) * potential_from_lse(qn, eps, online_lse(mx, sum, alpha));
    const double old = double(sd.pot[i]);
    if (p.err) e = residual_term(double(sd.query_w[i]), old, fresh, eps, sd.rho_inv);
    sd.pot[i] = T(relaxed(old, fresh, double(p.relax)));
  }
  if (p.err) {
    const double b = block_sum(e, red);
    if (threadIdx.x == 0) p.err_partials[blockIdx.x] = b;
  }
}

/// out[c] = sum_b partials[ncomp * b + c] for c < ncomp; one block, fixed order.
static __global__ void __launch_bounds__(256)
    reduce_partials_kernel(const double* partials, int count, int ncomp, double* out) {
  __shared__ double red[32];
  for (int c = 0; c < ncomp; ++c) {
    double v = 0;
    for (int b = threadIdx.x; b < count; b += blockDim.x) v += partials[ncomp * b + c];
    const double r = block_sum(v, red);
    if (threadIdx.x == 0) out[c] = r;
  }
}

/// out[0] = <a, phi_a(f)> + <b, phi_b(g)> (dual_term; <a, f> + <b, g> when balanced); one block
/// of 1024 threads, fixed order.
template <class T>
__global__ void __launch_bounds__(1024)
    dual_value_kernel(const T* a, const T* f, std::int64_t n, const T* b, const T* g,
                      std::int64_t m, double rho_inv_a, double rho_inv_b, double* out) {
  __shared__ double red[32];
  double v = 0;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x)
    v += double(a[i]) * dual_term(double(f[i]), rho_inv_a);
  for (std::int64_t j = threadIdx.x; j < m; j += blockDim.x)
    v += double(b[j]) * dual_term(double(g[j]), rho_inv_b);
  const double r = block_sum(v, red);
  if (threadIdx.x == 0) out[0] = r;
}

}  // namespace kantor::cuda
