// Birkhoff CUDA kernels: the n = 4 register kernels (one thread per matrix, the block's matrices
// staged through shared memory with 16-byte vector loads/stores) and the general-n kernels (one
// thread per matrix, local-memory arrays). Per-matrix math lives in lib/birkhoff/algorithms.hpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "lib/birkhoff/algorithms.hpp"
#include "lib/birkhoff/engine.hpp"

namespace kantor::birkhoff::cuda {

constexpr int kThreads = 128;  // matrices per block in the n = 4 kernels

/// Storage codecs: float, or bfloat16 as raw 16-bit patterns (math in fp32).
struct Bf16 {
  std::uint16_t bits;
};
__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(Bf16 v) { return __uint_as_float(unsigned(v.bits) << 16); }
template <class S>
__device__ __forceinline__ S from_f(float v);
template <>
__device__ __forceinline__ float from_f<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ Bf16 from_f<Bf16>(float v) {
  const unsigned u = __float_as_uint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {std::uint16_t((u >> 16) | 0x40u)};  // NaN
  return {std::uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};  // round to nearest even
}
/// Value after a round trip through the storage type (what the caller will read back).
template <class S>
__device__ __forceinline__ float rounded(float v) {
  return to_f(from_f<S>(v));
}

/// Parameters of every kernel (POD, by value).
struct KernelParams {
  const void* in0 = nullptr;  // forward: logits; backward: P (implicit) or logits (unrolled)
  const void* in1 = nullptr;  // backward: grad_P
  void* out = nullptr;
  std::int64_t batch = 0;
  int n = 4;
  int method = 0;  // BirkhoffMethod as int
  TruncatedMap map{false, true, 20};
  float tol_stop = 1e-6f, tol_accept = 5e-6f, tolerance = 1e-5f;
  int max_iter = 30;
  bool implicit = true;
  // [max bits, not converged, invalid, ~first invalid key, hist[kHistBins]]; the key of an
  // invalid matrix b is b * 8 + status: its complement's atomicMax (from the zeroed buffer) keeps
  // the smallest index and its reason.
  unsigned long long* stats = nullptr;
};

/// Block-level reduction of the error statistics, then one global atomic per non-empty bin.
/// Called by every thread of the block (active = the thread owns matrix b).
__device__ __forceinline__ void reduce_stats(const KernelParams& p, bool active, float err,
                                             int status, std::int64_t b) {
  __shared__ unsigned s_hist[kHistBins];
  __shared__ unsigned s_max, s_fail, s_invalid;
  __shared__ unsigned long long s_first;
  for (int k = threadIdx.x; k < kHistBins; k += blockDim.x) s_hist[k] = 0;
  if (threadIdx.x == 0) {
    s_max = s_fail = s_invalid = 0;
    s_first = 0;
  }
  __syncthreads();
  if (active) {
    // Non-finite (or no projection) counts as +inf: largest error, last bin, not converged.
    const float e = (status == kOk && err <= 3.0e38f) ? err : __int_as_float(0x7f800000);
    int bin = 0;
    if (e > 0.f) {
      const float x = (log10f(e) - float(kHistLo)) * float(1.0 / kHistWidth);
      bin = x >= float(kHistBins - 1) ? kHistBins - 1 : (x < 0.f ? 0 : int(x));
    }
    atomicAdd(&s_hist[bin], 1u);
    atomicMax(&s_max, __float_as_uint(e));  // e >= 0: float order = unsigned order
    if (!(e <= p.tolerance)) atomicAdd(&s_fail, 1u);
    if (is_invalid_status(status)) {
      atomicAdd(&s_invalid, 1u);
      atomicMax(&s_first, ~((unsigned long long)b * 8ull + (unsigned long long)status));
    }
  }
  __syncthreads();
  for (int k = threadIdx.x; k < kHistBins; k += blockDim.x)
    if (s_hist[k]) atomicAdd(&p.stats[4 + k], (unsigned long long)s_hist[k]);
  if (threadIdx.x == 0) {
    atomicMax(&p.stats[0], (unsigned long long)s_max);
    if (s_fail) atomicAdd(&p.stats[1], (unsigned long long)s_fail);
    if (s_invalid) {
      atomicAdd(&p.stats[2], (unsigned long long)s_invalid);
      atomicMax(&p.stats[3], s_first);
    }
  }
}

/// 16-byte chunk slot of (matrix m, chunk k) in the staging buffer, C chunks per matrix. The
/// rotation by m / (8 / C) makes the 8 chunks of one shared-memory wavefront hit distinct banks.
template <int C>
__device__ __forceinline__ int slot(int m, int k) {
  return m * C + ((k + m / (8 / C)) % C);
}

/// Global -> shared: the block's matrices as coalesced uint4 loads (valid = matrices in block).
template <int C>
__device__ __forceinline__ void stage_in(uint4* sm, const uint4* g, int valid) {
#pragma unroll
  for (int r = 0; r < C; ++r) {
    const int q = threadIdx.x + r * kThreads;
    const int m = q / C, k = q % C;
    if (m < valid) sm[slot<C>(m, k)] = __ldcs(g + q);  // streamed once: evict-first
  }
}
template <int C>
__device__ __forceinline__ void stage_out(const uint4* sm, uint4* g, int valid) {
#pragma unroll
  for (int r = 0; r < C; ++r) {
    const int q = threadIdx.x + r * kThreads;
    const int m = q / C, k = q % C;
    if (m < valid) __stcs(g + q, sm[slot<C>(m, k)]);
  }
}

/// Unpack / pack one 4x4 matrix of storage type S from its C staged chunks.
template <class S>
__device__ __forceinline__ void unpack4(const uint4* sm, int m, float* x) {
  constexpr int C = int(sizeof(S));
  const S* v;
#pragma unroll
  for (int k = 0; k < C; ++k) {
    const uint4 u = sm[slot<C>(m, k)];
    v = reinterpret_cast<const S*>(&u);
#pragma unroll
    for (int e = 0; e < 16 / C; ++e) x[k * (16 / C) + e] = to_f(v[e]);
  }
}
template <class S>
__device__ __forceinline__ void pack4(uint4* sm, int m, const float* x) {
  constexpr int C = int(sizeof(S));
#pragma unroll
  for (int k = 0; k < C; ++k) {
    uint4 u;
    S* v = reinterpret_cast<S*>(&u);
#pragma unroll
    for (int e = 0; e < 16 / C; ++e) v[e] = from_f<S>(x[k * (16 / C) + e]);
    sm[slot<C>(m, k)] = u;
  }
}

/// Forward, n = 4, one thread per matrix. kNewton selects the converged map at compile time
/// (the truncated maps share the other instantiation). Bytes: 16 * sizeof(S) in, same out.
template <class S, bool kNewton>
__global__ void __launch_bounds__(kThreads) forward4_kernel(KernelParams p) {
  constexpr int C = int(sizeof(S));
  __shared__ uint4 sm[kThreads * C];
  const std::int64_t m0 = std::int64_t(blockIdx.x) * kThreads;
  const std::int64_t rest = p.batch - m0;
  const int valid = rest < kThreads ? int(rest) : kThreads;
  const uint4* gin = static_cast<const uint4*>(p.in0) + m0 * C;
  stage_in<C>(sm, gin, valid);
  __syncthreads();
  const bool active = threadIdx.x < valid;
  float x[16];
  int status = kOk;
  if (active) {
    unpack4<S>(sm, threadIdx.x, x);
    if (kNewton) {
      status = newton_project<4>(x, 4, p.tol_stop, p.tol_accept, p.max_iter).status;
      // Guard: no total support / invalid input leaves logits (or NaN) behind: write zeros.
      if (status != kOk) {
#pragma unroll
        for (int k = 0; k < 16; ++k) x[k] = 0.f;
      }
    } else {
      status = truncated_forward<4>(x, 4, p.map);
      if (status != kOk) {
#pragma unroll
        for (int k = 0; k < 16; ++k) x[k] = 0.f;
      }
    }
    pack4<S>(sm, threadIdx.x, x);
  }
  if (p.stats) {
    float err = 0.f;
    if (active) {
      float r[16];
#pragma unroll
      for (int k = 0; k < 16; ++k) r[k] = rounded<S>(x[k]);
      err = __double2float_ru(marginal_error<4>(r, 4));  // rounded up: never below
    }
    reduce_stats(p, active, err, status, m0 + threadIdx.x);  // contains __syncthreads
  } else {
    __syncthreads();
  }
  stage_out<C>(sm, static_cast<uint4*>(p.out) + m0 * C, valid);
}

/// Backward, n = 4: reads in0 (P or logits) and grad_P, writes grad_logits (3 * 16 * sizeof(S)).
/// kImplicit is a template argument: the unrolled gradient's dynamic step loop would otherwise
/// put the implicit kernel's arrays on the stack (local memory) too.
template <class S, bool kImplicit>
__global__ void __launch_bounds__(kThreads, kImplicit ? 7 : 1) backward4_kernel(KernelParams p) {
  constexpr int C = int(sizeof(S));
  __shared__ uint4 sa[kThreads * C];
  __shared__ uint4 sg[kThreads * C];
  const std::int64_t m0 = std::int64_t(blockIdx.x) * kThreads;
  const std::int64_t rest = p.batch - m0;
  const int valid = rest < kThreads ? int(rest) : kThreads;
  stage_in<C>(sa, static_cast<const uint4*>(p.in0) + m0 * C, valid);
  stage_in<C>(sg, static_cast<const uint4*>(p.in1) + m0 * C, valid);
  __syncthreads();
  if (threadIdx.x < valid) {
    float a[16], g[16];
    unpack4<S>(sa, threadIdx.x, a);
    unpack4<S>(sg, threadIdx.x, g);
    if (kImplicit)
      implicit_backward<4>(a, g, 4);
    else
      truncated_backward<4>(a, g, 4, p.map);
#pragma unroll
    for (int k = 0; k < 16; ++k) g[k] = isfinite(g[k]) ? g[k] : 0.f;  // never NaN out
    pack4<S>(sa, threadIdx.x, g);
  }
  __syncthreads();
  stage_out<C>(sa, static_cast<uint4*>(p.out) + m0 * C, valid);
}

/// General n (2..16), one thread per matrix, scalar loads; arrays in local memory.
template <class S>
__global__ void __launch_bounds__(kThreads) forward_general_kernel(KernelParams p) {
  const std::int64_t b = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool active = b < p.batch;
  const int n = p.n;
  float x[kMaxN * kMaxN];
  int status = kOk;
  float err = 0.f;
  if (active) {
    const S* in = static_cast<const S*>(p.in0) + b * n * n;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) x[i * kMaxN + j] = to_f(in[i * n + j]);
    if (p.method == int(BirkhoffMethod::kNewton)) {
      status = newton_project<kMaxN>(x, n, p.tol_stop, p.tol_accept, p.max_iter).status;
      if (status != kOk)
        for (int k = 0; k < kMaxN * kMaxN; ++k) x[k] = 0.f;  // guard: never NaN / -inf out
    } else {
      status = truncated_forward<kMaxN>(x, n, p.map);
      if (status != kOk)
        for (int k = 0; k < kMaxN * kMaxN; ++k) x[k] = 0.f;
    }
    S* out = static_cast<S*>(p.out) + b * n * n;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        out[i * n + j] = from_f<S>(x[i * kMaxN + j]);
        x[i * kMaxN + j] = rounded<S>(x[i * kMaxN + j]);
      }
    if (p.stats) err = __double2float_ru(marginal_error<kMaxN>(x, n));
  }
  if (p.stats) reduce_stats(p, active, err, status, b);
}

template <class S>
__global__ void __launch_bounds__(kThreads) backward_general_kernel(KernelParams p) {
  const std::int64_t b = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= p.batch) return;
  const int n = p.n;
  float a[kMaxN * kMaxN], g[kMaxN * kMaxN];
  const S* ia = static_cast<const S*>(p.in0) + b * n * n;
  const S* ig = static_cast<const S*>(p.in1) + b * n * n;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      a[i * kMaxN + j] = to_f(ia[i * n + j]);
      g[i * kMaxN + j] = to_f(ig[i * n + j]);
    }
  if (p.implicit)
    implicit_backward<kMaxN>(a, g, n);
  else
    truncated_backward<kMaxN>(a, g, n, p.map);
  S* out = static_cast<S*>(p.out) + b * n * n;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      const float v = g[i * kMaxN + j];
      out[i * n + j] = from_f<S>(isfinite(v) ? v : 0.f);  // never NaN out
    }
}

}  // namespace kantor::birkhoff::cuda
