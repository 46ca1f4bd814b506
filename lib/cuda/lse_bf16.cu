// Explicit instantiations and launcher of the bf16 tensor-core LSE kernel
// (lib/cuda/lse_bf16.cuh): padded widths 16, 32, 64 with resident query fragments (3 kernels).
// Wider d is refused by the oracle (InvalidArgument): docs/cuda-engine.md, "bf16".
#include "lib/cuda/check.hpp"
#include "lib/cuda/lse_bf16.cuh"
#include "lib/cuda/lse_launch.hpp"

namespace kantor::cuda {

int bf16_padded_dim(int d) {
  if (d <= 16) return 16;
  if (d <= 32) return 32;
  if (d <= 64) return 64;
  return -1;  // not served (the oracle refuses d > kBf16MaxDim)
}
int bf16_block_rows(int) { return 128; }

int bf16_blocks_per_sm(int ld) {
  int nb = 0;
  switch (ld) {
    case 16:
      KANTOR_CUDA_TRY(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, lse_bf16_kernel<16>, 128, 0));
      break;
    case 32:
      KANTOR_CUDA_TRY(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, lse_bf16_kernel<32>, 128, 0));
      break;
    default:
      KANTOR_CUDA_TRY(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, lse_bf16_kernel<64>, 128, 0));
      break;
  }
  return nb;
}

void launch_lse_bf16(const LsePass<float>& p, void* stream) {
  // Guard: only the three instantiated widths exist; any other ld would read the packed rows
  // with the wrong stride.
  if (p.ld != 16 && p.ld != 32 && p.ld != 64)
    throw InvalidArgument("bf16 LSE kernel: padded width must be 16, 32 or 64");
  const int br = bf16_block_rows(p.ld);
  const int b0 = int((p.side[0].rows + br - 1) / br);
  const int b1 = p.nsides > 1 ? int((p.side[1].rows + br - 1) / br) : 0;
  const dim3 grid(unsigned(b0 + b1), unsigned(p.splits));
  auto st = static_cast<cudaStream_t>(stream);
  switch (p.ld) {
    case 16:
      lse_bf16_kernel<16><<<grid, 128, 0, st>>>(p, b0);
      break;
    case 32:
      lse_bf16_kernel<32><<<grid, 128, 0, st>>>(p, b0);
      break;
    default:
      lse_bf16_kernel<64><<<grid, 128, 0, st>>>(p, b0);
      break;
  }
  KANTOR_CUDA_CHECK_LAUNCH();
}

}  // namespace kantor::cuda
