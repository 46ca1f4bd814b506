// Launcher of the TF32 tensor-core LSE kernels: padded widths 8, 16, 32, 64 run the
// software-pipelined kernel with resident query fragments (lib/cuda/lse_mma_pipe.cuh, 4
// kernels); wider clouds run the chunked kernel in 32-wide d-chunks (lib/cuda/lse_tf32.cuh, 1
// kernel). The oracle sends d >= 128 to cuBLAS score blocks instead (lib/cuda/lse_gemm.cu).
#include "lib/cuda/check.hpp"
#include "lib/cuda/lse_launch.hpp"
#include "lib/cuda/lse_mma_pipe.cuh"
#include "lib/cuda/lse_tf32.cuh"

namespace kantor::cuda {

// Tile rule (docs/cuda-engine.md section 3; traits MmaPipeConfig in lse_mma_pipe.cuh): 128 rows
// per block, 2 m-tiles per warp, key stages of 64 keys (32 at width 64). H200, n = m = 50k, 10
// alternating iterations, tf32 (ms): the pipelined kernel at commit c105c5a 19.26 at d = 3, 28.00
// at d = 32, 41.79 at d = 64 (41.00 with 32-key stages at d = 64), against 22.46 / 31.68 / 46.50
// for the earlier single-stage kernel and 22.34 / 33.16 / 46.54 for the earlier cp.async
// double-buffered kernel without the MMA/fold overlap. With the single-stage kernel: 1x8 warp
// tiles 59.57, 2x4 55.53 at d = 64.
int tf32_padded_dim(int d) {
  if (d <= 8) return 8;
  if (d <= 16) return 16;
  if (d <= 32) return 32;
  if (d <= 64) return 64;
  return (d + 31) / 32 * 32;
}
int tf32_block_rows(int) { return 128; }

int tf32_blocks_per_sm(int ld) {
  if (ld <= 64) return mma_pipe_blocks_per_sm<MmaTf32>(ld);
  int nb = 0;
  KANTOR_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, lse_tf32_kernel<32>, 128, 0));
  return nb;
}

void launch_lse_tf32(const LsePass<float>& p, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  if (p.ld <= 64) return launch_mma_pipe<MmaTf32>(p, p.ld, st);
  const int br = tf32_block_rows(p.ld);
  const int b0 = int((p.side[0].rows + br - 1) / br);
  const int b1 = p.nsides > 1 ? int((p.side[1].rows + br - 1) / br) : 0;
  const dim3 grid(unsigned(b0 + b1), unsigned(p.splits));
  lse_tf32_kernel<32><<<grid, 128, 0, st>>>(p, b0);
  KANTOR_CUDA_CHECK_LAUNCH();
}

}  // namespace kantor::cuda
