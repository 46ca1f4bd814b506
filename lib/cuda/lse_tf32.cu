// Explicit instantiations and launcher of the TF32 tensor-core LSE kernel
// (lib/cuda/lse_tf32.cuh). Padded widths: 8, 16, 32, 64 with resident query fragments, and
// 32-wide d-chunks with the query chunk restaged in shared memory for d > 64 (5 kernels).
#include <cstdlib>

#include "lib/cuda/check.hpp"
#include "lib/cuda/lse_launch.hpp"
#include "lib/cuda/lse_tf32.cuh"

namespace kantor::cuda {

// Tile of the resident kernels: 2 m-tiles x 8 n-tiles per warp (128 rows x 64 keys per block).
// H200, n = m = 50k, d = 64, 10 iterations, commit 1f150e7 (alternating / symmetric ms): 2x8
// 46.60 / 46.47; 1x8 (94 registers, 5 blocks per SM, B fragments shared by one m-tile) 59.57 /
// 58.71; 2x4 (32-key tiles) 55.53 / 55.15. Larger tiles exceed the register budget.
int tf32_padded_dim(int d) {
  if (d <= 8) return 8;
  if (d <= 16) return 16;
  if (d <= 32) return 32;
  if (d <= 64) return 64;
  return (d + 31) / 32 * 32;
}
int tf32_block_rows(int) { return 128; }

namespace {
/// Key tiles double-buffered by cp.async (lse_tf32_pipe_kernel) for padded widths <= 32; the
/// environment variable KANTOR_CUDA_TF32_PIPELINE=0 selects the single-buffered kernel there too
/// (tuning runs and tests of both). H200, n = m = 50k, 10 iterations, commit 0f23b35: d = 3
/// alternating 22.31 ms pipelined vs 22.47 single; d = 64 47.61 vs 46.64 (the 64-wide pipelined
/// kernel holds 166 registers and 37 KB of shared memory per block), so width 64 stays single.
constexpr int kPipelineMaxWidth = 32;
bool use_pipeline() {
  static const bool on = [] {
    const char* e = std::getenv("KANTOR_CUDA_TF32_PIPELINE");
    return !(e && e[0] == '0');
  }();
  return on;
}
}  // namespace

int tf32_blocks_per_sm(int ld) {
  int nb = 0;
  if (use_pipeline() && ld <= kPipelineMaxWidth) {
    switch (ld) {
      case 8:
        KANTOR_CUDA_TRY(
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, lse_tf32_pipe_kernel<8>, 128, 0));
        return nb;
      case 16:
        KANTOR_CUDA_TRY(
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, lse_tf32_pipe_kernel<16>, 128, 0));
        return nb;
      default:
        KANTOR_CUDA_TRY(
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, lse_tf32_pipe_kernel<32>, 128, 0));
        return nb;
    }
  }
  switch (ld) {
    case 8:
      KANTOR_CUDA_TRY(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, lse_tf32_kernel<8, true>, 128, 0));
      break;
    case 16:
      KANTOR_CUDA_TRY(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, lse_tf32_kernel<16, true>, 128, 0));
      break;
    case 32:
      KANTOR_CUDA_TRY(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, lse_tf32_kernel<32, true>, 128, 0));
      break;
    case 64:
      KANTOR_CUDA_TRY(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, lse_tf32_kernel<64, true>, 128, 0));
      break;
    default:
      KANTOR_CUDA_TRY(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, lse_tf32_kernel<32, false>, 128, 0));
      break;
  }
  return nb;
}

void launch_lse_tf32(const LsePass<float>& p, void* stream) {
  const int br = tf32_block_rows(p.ld);
  const int b0 = int((p.side[0].rows + br - 1) / br);
  const int b1 = p.nsides > 1 ? int((p.side[1].rows + br - 1) / br) : 0;
  const dim3 grid(unsigned(b0 + b1), unsigned(p.splits));
  auto st = static_cast<cudaStream_t>(stream);
  if (use_pipeline() && p.ld <= kPipelineMaxWidth) {
    switch (p.ld) {
      case 8:
        lse_tf32_pipe_kernel<8><<<grid, 128, 0, st>>>(p, b0);
        break;
      case 16:
        lse_tf32_pipe_kernel<16><<<grid, 128, 0, st>>>(p, b0);
        break;
      default:
        lse_tf32_pipe_kernel<32><<<grid, 128, 0, st>>>(p, b0);
        break;
    }
    KANTOR_CUDA_CHECK_LAUNCH();
    return;
  }
  switch (p.ld) {
    case 8:
      lse_tf32_kernel<8, true><<<grid, 128, 0, st>>>(p, b0);
      break;
    case 16:
      lse_tf32_kernel<16, true><<<grid, 128, 0, st>>>(p, b0);
      break;
    case 32:
      lse_tf32_kernel<32, true><<<grid, 128, 0, st>>>(p, b0);
      break;
    case 64:
      lse_tf32_kernel<64, true><<<grid, 128, 0, st>>>(p, b0);
      break;
    default:
      lse_tf32_kernel<32, false><<<grid, 128, 0, st>>>(p, b0);
      break;
  }
  KANTOR_CUDA_CHECK_LAUNCH();
}

}  // namespace kantor::cuda
