// Stable radix sort of uint64 keys on the device (CUB), returning the permutation, for
// detail::device_sort_order (lib/runtime/buffer.cpp): the multiscale solver's Morton order; and
// arrays permuted through it on the device (detail::device_permute).
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

template <class T>
__global__ void permute_kernel(const std::int64_t* __restrict__ order, const T* __restrict__ src,
                               T* __restrict__ dst, std::int64_t count, bool scatter) {
  const std::int64_t k = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= count) return;
  if (scatter)
    dst[order[k]] = src[k];
  else
    dst[k] = src[order[k]];
}

}  // namespace

template <class T>
void permute_by_order(const std::int64_t* order, const T* src, T* dst, std::int64_t count,
                      bool scatter, void* stream) {
  if (count <= 0) return;
  permute_kernel<T><<<unsigned((count + 255) / 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      order, src, dst, count, scatter);
  KANTOR_CUDA_CHECK_LAUNCH();
}

template void permute_by_order<float>(const std::int64_t*, const float*, float*, std::int64_t,
                                      bool, void*);
template void permute_by_order<double>(const std::int64_t*, const double*, double*,
                                       std::int64_t, bool, void*);

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
