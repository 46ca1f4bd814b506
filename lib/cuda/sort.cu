// Stable radix sort of (uint64 key, int64 value) pairs on the device (CUB), for
// detail::device_sort_pairs (lib/runtime/buffer.cpp): the multiscale solver's Morton order.
#include <cuda_runtime.h>

#include <cub/cub.cuh>
#include <cstdint>

#include "lib/cuda/check.hpp"
#include "lib/cuda/runtime.hpp"

namespace kantor::cuda {

std::size_t sort_pairs_temp_bytes(std::int64_t count, int bits) {
  std::size_t bytes = 0;
  KANTOR_CUDA_TRY(cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, static_cast<const std::uint64_t*>(nullptr),
      static_cast<std::uint64_t*>(nullptr), static_cast<const std::int64_t*>(nullptr),
      static_cast<std::int64_t*>(nullptr), count, 0, bits));
  return bytes;
}

void sort_pairs(void* temp, std::size_t temp_bytes, const std::uint64_t* keys_in,
                std::uint64_t* keys_out, const std::int64_t* values_in, std::int64_t* values_out,
                std::int64_t count, int bits, void* stream) {
  KANTOR_CUDA_TRY(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, values_in,
                                                  values_out, count, 0, bits,
                                                  static_cast<cudaStream_t>(stream)));
}

}  // namespace kantor::cuda
