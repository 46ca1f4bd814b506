// Stable radix sort of uint64 keys on the device (CUB), returning the permutation, for
// detail::device_sort_order (lib/runtime/buffer.cpp): the multiscale solver's Morton order; the
// keys formed on the device and the rows gathered in that order (detail::device_morton_gather).
#include <cuda_runtime.h>

#include <cub/cub.cuh>
#include <cstdint>

#include "lib/cuda/check.hpp"
#include "lib/cuda/runtime.hpp"

namespace kantor::cuda {
namespace {

__global__ void iota_kernel(std::int64_t* out, std::int64_t count) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) out[i] = i;
}

// One thread a point: the key of morton_order (solvers/multiscale_screen.cpp, key_of) bit by bit
// instead of its byte tables (the same bits: axis k's bit b at bit b axes + axes - 1 - k), from
// the same double arithmetic (a subtraction and a product, no contraction possible).
template <class T>
__global__ void morton_keys_kernel(const T* __restrict__ x, std::int64_t rows, int d, int axes,
                                   int bits, double top, const double* __restrict__ lo,
                                   const double* __restrict__ scale,
                                   std::uint64_t* __restrict__ keys) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows) return;
  std::uint64_t key = 0;
  for (int k = 0; k < axes; ++k) {
    const double v = (double(x[i * d + k]) - lo[k]) * scale[k];
    // std::min(top, std::max(0.0, floor(v))) on the host: a NaN gives 0 there and here.
    const double f = floor(v);
    const double c = 0.0 < f ? f : 0.0;
    const std::uint64_t q = std::uint64_t(c < top ? c : top);
    for (int b = 0; b < bits; ++b)
      key |= ((q >> b) & 1u) << (b * axes + (axes - 1 - k));
  }
  keys[i] = key;
}

template <class T>
__global__ void gather_rows_kernel(const T* __restrict__ x, const double* __restrict__ w,
                                   const std::int64_t* __restrict__ order, std::int64_t rows,
                                   int d, T* __restrict__ out, double* __restrict__ wout) {
  const std::int64_t k = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= rows) return;
  const std::int64_t i = order[k];
  for (int a = 0; a < d; ++a) out[k * d + a] = x[i * d + a];
  if (w) wout[k] = w[i];
}

template <class T>
__global__ void scatter_rows_kernel(const T* __restrict__ in,
                                    const std::int64_t* __restrict__ order, std::int64_t rows,
                                    T* __restrict__ out) {
  const std::int64_t k = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k < rows) out[order[k]] = in[k];
}

template <class T>
void scatter_rows_t(const T* in, const std::int64_t* order, std::int64_t rows, T* out,
                    void* stream) {
  if (rows <= 0) return;
  const auto st = static_cast<cudaStream_t>(stream);
  scatter_rows_kernel<T><<<unsigned((rows + 255) / 256), 256, 0, st>>>(in, order, rows, out);
  KANTOR_CUDA_CHECK_LAUNCH();
}

template <class T>
void morton_keys_t(const T* x, std::int64_t rows, int d, int axes, int bits, double top,
                   const double* lo, const double* scale, std::uint64_t* keys, void* stream) {
  if (rows <= 0) return;
  const auto st = static_cast<cudaStream_t>(stream);
  morton_keys_kernel<T><<<unsigned((rows + 255) / 256), 256, 0, st>>>(
      x, rows, d, axes, bits, top, lo, scale, keys);
  KANTOR_CUDA_CHECK_LAUNCH();
}

template <class T>
void gather_rows_t(const T* x, const double* w, const std::int64_t* order, std::int64_t rows,
                   int d, T* out, double* wout, void* stream) {
  if (rows <= 0) return;
  const auto st = static_cast<cudaStream_t>(stream);
  gather_rows_kernel<T><<<unsigned((rows + 255) / 256), 256, 0, st>>>(
      x, w, order, rows, d, out, wout);
  KANTOR_CUDA_CHECK_LAUNCH();
}

}  // namespace

void morton_keys(const float* x, std::int64_t rows, int d, int axes, int bits, double top,
                 const double* lo, const double* scale, std::uint64_t* keys, void* stream) {
  morton_keys_t(x, rows, d, axes, bits, top, lo, scale, keys, stream);
}
void morton_keys(const double* x, std::int64_t rows, int d, int axes, int bits, double top,
                 const double* lo, const double* scale, std::uint64_t* keys, void* stream) {
  morton_keys_t(x, rows, d, axes, bits, top, lo, scale, keys, stream);
}
void gather_rows(const float* x, const double* w, const std::int64_t* order, std::int64_t rows,
                 int d, float* out, double* wout, void* stream) {
  gather_rows_t(x, w, order, rows, d, out, wout, stream);
}
void gather_rows(const double* x, const double* w, const std::int64_t* order, std::int64_t rows,
                 int d, double* out, double* wout, void* stream) {
  gather_rows_t(x, w, order, rows, d, out, wout, stream);
}

void scatter_rows(const float* in, const std::int64_t* order, std::int64_t rows, float* out,
                  void* stream) {
  scatter_rows_t(in, order, rows, out, stream);
}
void scatter_rows(const double* in, const std::int64_t* order, std::int64_t rows, double* out,
                  void* stream) {
  scatter_rows_t(in, order, rows, out, stream);
}

std::size_t sort_order_temp_bytes(std::int64_t count, int bits) {
  std::size_t bytes = 0;
  KANTOR_CUDA_TRY(cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, static_cast<const std::uint64_t*>(nullptr),
      static_cast<std::uint64_t*>(nullptr), static_cast<const std::int64_t*>(nullptr),
      static_cast<std::int64_t*>(nullptr), count, 0, bits));
  return bytes;
}

void sort_order(void* temp, std::size_t temp_bytes, const std::uint64_t* keys_in,
                std::uint64_t* keys_out, std::int64_t* scratch, std::int64_t* order,
                std::int64_t count, int bits, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  if (count <= 0) return;
  // The identity on the device: nothing to upload beside the keys.
  iota_kernel<<<unsigned((count + 255) / 256), 256, 0, st>>>(scratch, count);
  KANTOR_CUDA_CHECK_LAUNCH();
  KANTOR_CUDA_TRY(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, scratch,
                                                  order, count, 0, bits, st));
}

}  // namespace kantor::cuda
