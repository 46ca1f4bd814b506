// Launcher of the bf16 tensor-core LSE kernel: the software-pipelined kernel of
// lib/cuda/lse_mma_pipe.cuh with the m16n8k16 bf16 MMA, padded widths 16, 32, 64, 128 (8 to 64
// packed words per row, 4 kernels). Wider d is refused by the oracle (InvalidArgument):
// docs/cuda-engine.md, "bf16".
#include "lib/cuda/check.hpp"
#include "lib/cuda/lse_launch.hpp"
#include "lib/cuda/lse_mma_pipe.cuh"

namespace kantor::cuda {

int bf16_padded_dim(int d) {
  if (d <= 16) return 16;
  if (d <= 32) return 32;
  if (d <= 64) return 64;
  if (d <= 128) return 128;
  return -1;  // not served (the oracle refuses d > kBf16MaxDim)
}
int bf16_block_rows(int) { return 128; }

int bf16_blocks_per_sm(int ld) { return mma_pipe_blocks_per_sm<MmaBf16>(ld / 2); }

void launch_lse_bf16(const LsePass<float>& p, void* stream) {
  // Guard: only the instantiated widths exist; any other ld would read the packed rows with the
  // wrong stride.
  if (p.ld != 16 && p.ld != 32 && p.ld != 64 && p.ld != 128)
    throw InvalidArgument("bf16 LSE kernel: padded width must be 16, 32, 64 or 128");
  launch_mma_pipe<MmaBf16>(p, p.ld / 2, static_cast<cudaStream_t>(stream));
}

}  // namespace kantor::cuda
