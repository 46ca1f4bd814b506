// Device helpers shared by the LSE kernels: exp2 per precision, -inf-safe (max, sum) merges,
// deterministic block reductions of doubles. Included only by lib/cuda/lse_*.cu.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "lib/core/online_lse.hpp"

namespace kantor::cuda {

constexpr double kLn2 = 0.69314718055994530942;
constexpr double kLog2e = 1.44269504088896340736;

/// exp2 on the special-function unit for float (ex2.approx.ftz.f32: within 2 ulp of the correctly
/// rounded result for normal results by the PTX ISA, "Floating Point Instructions: ex2", which
/// the fp32 certificate's bound relies on (lib/cuda/certify.cu); results below 2^-126 flush to 0,
/// which only drops terms far below the row maximum; 2^-inf = +0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
/// exp2 in full double precision (the fp64 path).
__device__ __forceinline__ double fast_exp2(double x) { return exp2(x); }

/// fast_exp2 as the Exp2 policy of the online state (lib/core/online_lse.hpp).
struct FastExp2 {
  template <class T>
  __device__ __forceinline__ T operator()(T x) const {
    return fast_exp2(x);
  }
};

template <class T>
__device__ __forceinline__ T neg_inf() {
  return -INFINITY;
}

/// Merge (m2, s2) into the running (m1, s1) of the same row (the online state's merge with the
/// SFU exp2; -inf safe).
template <class T>
__device__ __forceinline__ void merge_max_sum(T& m1, T& s1, T m2, T s2, T alpha) {
  online_merge(m1, s1, m2, s2, alpha, FastExp2{});
}

/// Sum of `v` over the block (blockDim.x a multiple of 32, at most 1024); the result is valid
/// in thread 0. Fixed order: deterministic from run to run.
__device__ __forceinline__ double block_sum(double v, double* shared32) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();  // shared32 may still be read by a previous call
  if (lane == 0) shared32[warp] = v;
  __syncthreads();
  double r = 0;
  if (threadIdx.x == 0)
    for (int w = 0; w < int(blockDim.x >> 5); ++w) r += shared32[w];
  return r;
}

}  // namespace kantor::cuda
