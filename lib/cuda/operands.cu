// Operand copies built on the device (lib/cuda/operands.hpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "lib/cuda/check.hpp"
#include "lib/cuda/operands.hpp"

namespace kantor::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxGrid = std::int64_t(1) << 20;  // grid-stride beyond this

unsigned grid_for(std::int64_t total) {
  return unsigned(std::max<std::int64_t>(
      1, std::min<std::int64_t>((total + kThreads - 1) / kThreads, kMaxGrid)));
}
cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

/// float -> TF32, round to nearest with ties away from zero (keep 10 mantissa bits); Inf/NaN pass.
__device__ __forceinline__ float tf32_rna(float x) {
  unsigned u = __float_as_uint(x);
  if ((u & 0x7f800000u) != 0x7f800000u) {
    u += 0x1000u;
    u &= 0xffffe000u;
  }
  return __uint_as_float(u);
}

template <class T, class U>
__global__ void __launch_bounds__(kThreads)
    padded_kernel(const T* __restrict__ src, std::int64_t rows, int d, U* __restrict__ dst, int ld,
                  bool tf32) {
  const std::int64_t total = rows * ld;
  for (std::int64_t idx = std::int64_t(blockIdx.x) * kThreads + threadIdx.x; idx < total;
       idx += std::int64_t(gridDim.x) * kThreads) {
    const std::int64_t i = idx / ld;
    const int k = int(idx - i * ld);
    U v = U(0);
    if (k < d) {
      const T s = src[i * d + k];
      if constexpr (sizeof(T) == 4)
        v = tf32 ? U(tf32_rna(float(s))) : U(s);
      else
        v = U(s);
    }
    dst[idx] = v;
  }
}

__global__ void __launch_bounds__(kThreads)
    split3_kernel(const float* __restrict__ src, std::int64_t rows, int d, float* __restrict__ dst,
                  int ld, bool x_side) {
  const std::int64_t total = rows * ld;
  for (std::int64_t idx = std::int64_t(blockIdx.x) * kThreads + threadIdx.x; idx < total;
       idx += std::int64_t(gridDim.x) * kThreads) {
    const std::int64_t i = idx / ld;
    const int k = int(idx - i * ld);
    float hi = 0, lo = 0;
    if (k < d) {
      const float v = src[i * d + k];
      hi = tf32_rna(v);
      lo = __fsub_rn(v, hi);
    }
    float* o = dst + i * 3 * std::int64_t(ld) + k;
    o[0] = x_side ? lo : hi;
    o[ld] = x_side ? hi : lo;
    o[2 * ld] = hi;
  }
}

/// One warp per row: lane-strided partial sums in double, combined in a fixed tree.
template <class T, class U>
__global__ void __launch_bounds__(kThreads)
    norms_kernel(const T* __restrict__ src, std::int64_t rows, int ld, double c,
                 U* __restrict__ out) {
  const int lane = threadIdx.x & 31;
  const std::int64_t warps = std::int64_t(gridDim.x) * (kThreads / 32);
  for (std::int64_t i = std::int64_t(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32; i < rows;
       i += warps) {
    double s = 0;
    for (int k = lane; k < ld; k += 32) {
      const double v = double(src[i * ld + k]);
      s = __fma_rn(v, v, s);
    }
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) out[i] = U(c * s);
  }
}

template <class T>
__global__ void centre_kernel(const T* __restrict__ src, std::int64_t rows, int d,
                              const double* __restrict__ center, T* __restrict__ centred,
                              double* __restrict__ ref) {
  const std::int64_t total = rows * d;
  for (std::int64_t e = std::int64_t(blockIdx.x) * kThreads + threadIdx.x; e < total;
       e += std::int64_t(gridDim.x) * kThreads) {
    const double v = double(src[e]);
    centred[e] = T(__dsub_rn(v, center[e % d]));
    if (ref) ref[e] = v;
  }
}

template <class T>
__global__ void weights_kernel(const T* __restrict__ src, std::int64_t rows, double total,
                               double* __restrict__ ref, T* __restrict__ w) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * kThreads + threadIdx.x; i < rows;
       i += std::int64_t(gridDim.x) * kThreads) {
    const double r = src ? __ddiv_rn(double(src[i]), total) : __ddiv_rn(1.0, double(rows));
    ref[i] = r;
    w[i] = T(r);
  }
}

template <class T>
__global__ void logs_kernel(const T* __restrict__ w, std::int64_t rows, T* __restrict__ out) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * kThreads + threadIdx.x; i < rows;
       i += std::int64_t(gridDim.x) * kThreads) {
    const T v = w[i];
    out[i] = v > T(0) ? T(log(double(v))) : -T(INFINITY);
  }
}

}  // namespace

template <class T>
void operand_logs(const T* w, std::int64_t rows, T* out, void* stream) {
  if (rows <= 0) return;
  logs_kernel<T><<<grid_for(rows), kThreads, 0, as_stream(stream)>>>(w, rows, out);
  KANTOR_CUDA_CHECK_LAUNCH();
}

template <class T, class U>
void operand_padded(const T* src, std::int64_t rows, int d, U* dst, int ld, OperandRounding r,
                    void* stream) {
  if (rows <= 0 || ld <= 0) return;
  padded_kernel<T, U><<<grid_for(rows * ld), kThreads, 0, as_stream(stream)>>>(
      src, rows, d, dst, ld, r == OperandRounding::kTf32);
  KANTOR_CUDA_CHECK_LAUNCH();
}

void operand_split3(const float* src, std::int64_t rows, int d, float* dst, int ld, bool x_side,
                    void* stream) {
  if (rows <= 0 || ld <= 0) return;
  split3_kernel<<<grid_for(rows * ld), kThreads, 0, as_stream(stream)>>>(src, rows, d, dst, ld,
                                                                          x_side);
  KANTOR_CUDA_CHECK_LAUNCH();
}

template <class T, class U>
void operand_norms(const T* src, std::int64_t rows, int ld, double c, U* out, void* stream) {
  if (rows <= 0) return;
  const std::int64_t blocks = (rows + kThreads / 32 - 1) / (kThreads / 32);
  norms_kernel<T, U><<<unsigned(std::min(blocks, kMaxGrid)), kThreads, 0, as_stream(stream)>>>(
      src, rows, ld, c, out);
  KANTOR_CUDA_CHECK_LAUNCH();
}

template void operand_padded<float, float>(const float*, std::int64_t, int, float*, int,
                                           OperandRounding, void*);
template void operand_padded<float, double>(const float*, std::int64_t, int, double*, int,
                                            OperandRounding, void*);
template void operand_padded<double, double>(const double*, std::int64_t, int, double*, int,
                                             OperandRounding, void*);
template void operand_norms<float, float>(const float*, std::int64_t, int, double, float*, void*);
template void operand_norms<float, double>(const float*, std::int64_t, int, double, double*,
                                           void*);
template void operand_norms<double, double>(const double*, std::int64_t, int, double, double*,
                                            void*);

template <class T>
void operand_centre(const T* src, std::int64_t rows, int d, const double* center, T* centred,
                    double* ref, void* stream) {
  if (rows <= 0 || d <= 0) return;
  centre_kernel<T><<<grid_for(rows * d), kThreads, 0, as_stream(stream)>>>(src, rows, d, center,
                                                                           centred, ref);
  KANTOR_CUDA_CHECK_LAUNCH();
}

template <class T>
void operand_weights(const T* src, std::int64_t rows, double total, double* ref, T* w,
                     void* stream) {
  if (rows <= 0) return;
  weights_kernel<T><<<grid_for(rows), kThreads, 0, as_stream(stream)>>>(src, rows, total, ref, w);
  KANTOR_CUDA_CHECK_LAUNCH();
}

template void operand_centre<float>(const float*, std::int64_t, int, const double*, float*,
                                    double*, void*);
template void operand_centre<double>(const double*, std::int64_t, int, const double*, double*,
                                     double*, void*);
template void operand_logs<float>(const float*, std::int64_t, float*, void*);
template void operand_logs<double>(const double*, std::int64_t, double*, void*);
template void operand_weights<float>(const float*, std::int64_t, double, double*, float*, void*);
template void operand_weights<double>(const double*, std::int64_t, double, double*, double*,
                                      void*);

}  // namespace kantor::cuda
