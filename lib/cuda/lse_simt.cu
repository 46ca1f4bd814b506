// Explicit instantiations and launchers of the CUDA-core LSE kernels (lib/cuda/lse_simt.cuh):
// T in {float, double} x d-chunk in {4, 16}, LSE partials and value passes.
#include <type_traits>

#include "kantor/error.hpp"
#include "lib/cuda/check.hpp"
#include "lib/cuda/lse_finalize.cuh"
#include "lib/cuda/lse_launch.hpp"
#include "lib/cuda/lse_simt.cuh"

namespace kantor::cuda {

int simt_padded_dim(int d) { return d <= 4 ? 4 : (d + 15) / 16 * 16; }
int simt_block_rows() { return 128; }

int simt_blocks_per_sm(int ld, bool is_double) {
  int nb = 0;
  if (is_double) {
    if (ld == 4)
      KANTOR_CUDA_TRY(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, lse_simt_kernel<double, 4>, 128, 0));
    else
      KANTOR_CUDA_TRY(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, lse_simt_kernel<double, 16>, 128, 0));
  } else {
    if (ld == 4)
      KANTOR_CUDA_TRY(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, lse_simt_kernel<float, 4>, 128, 0));
    else
      KANTOR_CUDA_TRY(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, lse_simt_kernel<float, 16>, 128, 0));
  }
  return nb;
}
int value_pass_blocks(std::int64_t rows) { return int((rows + 127) / 128); }

namespace {

template <class T>
void launch_simt(const LsePass<T>& p, void* stream) {
  const int b0 = int((p.side[0].rows + 127) / 128);
  const int b1 = p.nsides > 1 ? int((p.side[1].rows + 127) / 128) : 0;
  const dim3 grid(unsigned(b0 + b1), unsigned(p.splits));
  auto st = static_cast<cudaStream_t>(stream);
  if (p.ld == 4)
    lse_simt_kernel<T, 4><<<grid, 128, 0, st>>>(p, b0);
  else
    lse_simt_kernel<T, 16><<<grid, 128, 0, st>>>(p, b0);
  KANTOR_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_value(const LseValuePass<T>& p, void* stream) {
  if (p.side.rows == 0) return;
  const int blocks = value_pass_blocks(p.side.rows);
  auto st = static_cast<cudaStream_t>(stream);
  const bool split_k = p.mode == ValueMode::kApply && p.splits > 1;
  if (split_k && !p.partials)
    throw InvalidArgument("value pass: splits > 1 needs the partials workspace");
  const dim3 grid(unsigned(blocks), unsigned(split_k ? p.splits : 1));
  bool launched = false;
  if constexpr (std::is_same<T, float>::value) {
    if (p.float_arithmetic && p.mode == ValueMode::kApply) {
      if (p.ld == 4)
        value_simt_kernel<T, 4, float><<<grid, 128, 0, st>>>(p);
      else
        value_simt_kernel<T, 16, float><<<grid, 128, 0, st>>>(p);
      launched = true;
    }
  }
  if (!launched) {
    if (p.ld == 4)
      value_simt_kernel<T, 4><<<grid, 128, 0, st>>>(p);
    else
      value_simt_kernel<T, 16><<<grid, 128, 0, st>>>(p);
  }
  KANTOR_CUDA_CHECK_LAUNCH();
  if (split_k) {
    value_merge_kernel<T><<<unsigned((p.side.rows + 255) / 256), 256, 0, st>>>(p);
    KANTOR_CUDA_CHECK_LAUNCH();
  }
  if (p.mode == ValueMode::kStats) {
    reduce_partials_kernel<<<1, 256, 0, st>>>(p.stat_partials, blocks, 3, p.stats);
    KANTOR_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void launch_lse_simt(const LsePass<float>& p, void* stream) { launch_simt(p, stream); }
void launch_lse_simt(const LsePass<double>& p, void* stream) { launch_simt(p, stream); }
void run_value_pass(const LseValuePass<float>& p, void* stream) { launch_value(p, stream); }
void run_value_pass(const LseValuePass<double>& p, void* stream) { launch_value(p, stream); }

}  // namespace kantor::cuda
