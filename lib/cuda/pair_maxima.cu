// The kernel of lib/cuda/pair_maxima.hpp: one block per atom pair, its rows x keys pairs strided
// over the threads, float64 with the cost scale shrunk by maxima_cost_scale so that the only
// rounding left is that of f_i + g_j (lib/core/certificate.hpp); a warp-shuffle and then a
// shared-memory max of the value and of |f_i| + |g_j|.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "lib/core/certificate.hpp"
#include "lib/cuda/check.hpp"
#include "lib/cuda/pair_maxima.cuh"
#include "lib/cuda/pair_maxima.hpp"

namespace kantor::cuda {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void __launch_bounds__(kThreads) atom_pair_maxima_kernel(PairMaxima<T> p, double cs) {
  __shared__ double s_best[kThreads / 32], s_mag[kThreads / 32];
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  for (std::int64_t k = blockIdx.x; k < p.count; k += gridDim.x) {
    const std::int64_t i0 = std::int64_t(p.pairs[2 * k]) * p.atom;
    const std::int64_t j0 = std::int64_t(p.pairs[2 * k + 1]) * p.atom;
    const int rows = int(min(p.n, i0 + p.atom) - i0), keys = int(min(p.m, j0 + p.atom) - j0);
    double best = -HUGE_VAL, mag = 0;
    for (int t = int(threadIdx.x); t < rows * keys; t += kThreads) {
      const std::int64_t i = i0 + t / keys, j = j0 + t % keys;
      if (!(p.a[i] > 0) || !(p.b[j] > 0)) continue;
      maxima_pair<0>(p.x + i * p.d, p.y + j * p.d, p.d, double(p.f[i]), double(p.g[j]), cs, &best,
                     &mag);
    }
    for (int o = 16; o > 0; o >>= 1) {
      best = fmax(best, __shfl_xor_sync(0xffffffffu, best, o));
      mag = fmax(mag, __shfl_xor_sync(0xffffffffu, mag, o));
    }
    if (lane == 0) {
      s_best[warp] = best;
      s_mag[warp] = mag;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      double b = -HUGE_VAL, mg = 0;
      for (int w = 0; w < kThreads / 32; ++w) {
        b = fmax(b, s_best[w]);
        mg = fmax(mg, s_mag[w]);
      }
      p.out[k] = b == -HUGE_VAL ? b : b + maxima_allowance(mg);
    }
    __syncthreads();
  }
}

}  // namespace

template <class T>
void launch_atom_pair_maxima(const PairMaxima<T>& p, void* stream) {
  if (p.count <= 0) return;
  const int grid = int(std::min<std::int64_t>(p.count, 65535));
  atom_pair_maxima_kernel<T><<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      p, maxima_cost_scale(p.cost_scale, p.d));
  KANTOR_CUDA_CHECK_LAUNCH();
}

template void launch_atom_pair_maxima<float>(const PairMaxima<float>&, void*);
template void launch_atom_pair_maxima<double>(const PairMaxima<double>&, void*);

}  // namespace kantor::cuda
