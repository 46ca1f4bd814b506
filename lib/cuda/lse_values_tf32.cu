// Launchers of the tensor-core value pass (lib/cuda/lse_values.hpp): the value kernel of
// lib/cuda/lse_mma_values.cuh for padded widths 8, 16, 32, 64 (4 kernels) and one finalize kernel
// that merges the split-K partials in double, applies the row prefactor and writes out = P V
// (and optionally P 1). All asynchronous on the given stream.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "kantor/error.hpp"
#include "lib/cuda/check.hpp"
#include "lib/cuda/lse_common.cuh"
#include "lib/cuda/lse_mma_values.cuh"
#include "lib/cuda/lse_params.hpp"
#include "lib/cuda/lse_values.hpp"

namespace kantor::cuda {
namespace {

constexpr int kValuesFinalizeThreads = 256;

__host__ __device__ constexpr int column_blocks(int vcols) {
  return (vcols + kValueBlockCols - 1) / kValueBlockCols;
}

/// One thread per (row i, value column k), k fastest (coalesced out rows and A partials). With
/// the partials of block z = k / 64 (lse_mma_values_kernel): the kernel's probabilities of split
/// s are exp2(alpha u + nam_s), nam_s = -alpha M_s as the fp32 product, so
///   out_ik = exp(log a_i + (f_i - q_i) / eps) sum_s A_sk 2^(-nam_s)
///          = pref_i sum_s A_sk 2^(-nam_s - top),  top = max_s (-nam_s),
///   pref_i = exp(log a_i + (f_i - q_i) / eps + ln2 top),
/// in double (-nam_s recomputed as the same fp32 product, so it cancels exactly against the
/// kernel's offset). Guards: splits that saw only masked keys (M_s = -inf, A_s = S_s = 0) are
/// skipped, never -inf - -inf; rows whose keys are all masked, and zero-weight rows
/// (log a_i = -inf), get out = 0 and row_mass = 0.
__global__ void __launch_bounds__(kValuesFinalizeThreads)
    lse_mma_values_finalize_kernel(MmaValuePass p, float alpha) {
  const std::int64_t idx = std::int64_t(blockIdx.x) * kValuesFinalizeThreads + threadIdx.x;
  const std::int64_t R = p.side.rows;
  const int K = p.vcols;
  if (idx >= R * K) return;
  const std::int64_t i = idx / K;
  const int k = int(idx - i * K);
  const int z = k / kValueBlockCols, c = k - z * kValueBlockCols;
  const std::int64_t S = p.splits, G = column_blocks(K);
  const int astride = min(K, kValueBlockCols);
  const float* wm = p.workspace + std::int64_t(z) * S * R;
  const float* ws = wm + G * S * R;
  const float* wa = p.workspace + 2 * G * S * R + std::int64_t(z) * S * R * astride;
  double top = -INFINITY;
  for (std::int64_t sp = 0; sp < S; ++sp) {
    const float ms = wm[sp * R + i];
    if (ms != -INFINITY) top = fmax(top, double(alpha * ms));
  }
  const double lw = double(p.query_logw[i]);
  double o = 0, mass = 0;
  if (top != -INFINITY && lw != -INFINITY) {
    const bool want_mass = k == 0 && p.row_mass;
    for (std::int64_t sp = 0; sp < S; ++sp) {
      const float ms = wm[sp * R + i];
      if (ms == -INFINITY) continue;
      const double w = exp2(double(alpha * ms) - top);
      o += double(wa[(sp * R + i) * astride + c]) * w;
      if (want_mass) mass += double(ws[sp * R + i]) * w;
    }
    const double eps = double(p.eps);
    const double pref =
        exp(lw + (double(p.side.pot[i]) - double(p.side.query_norm[i])) / eps + kLn2 * top);
    o *= pref;
    mass *= pref;
  }
  p.out[i * p.ostride + k] = float(o);
  if (k == 0 && p.row_mass) p.row_mass[i] = float(mass);
}

bool aligned16(const void* q) { return reinterpret_cast<std::uintptr_t>(q) % 16 == 0; }

void check_width(int ld) {
  if (ld != 8 && ld != 16 && ld != 32 && ld != 64)
    throw InvalidArgument("tensor-core value pass: padded width ld must be 8, 16, 32 or 64 (got " +
                          std::to_string(ld) + ")");
}

void require(bool ok, const char* what) {
  if (!ok) throw InvalidArgument(std::string("tensor-core value pass: ") + what);
}

}  // namespace

std::size_t values_tf32_workspace_floats(std::int64_t rows, int vcols, int splits) {
  if (rows <= 0 || vcols <= 0 || splits <= 0) return 0;
  return std::size_t(column_blocks(vcols)) * std::size_t(splits) * std::size_t(rows) *
         std::size_t(2 + std::min(vcols, kValueBlockCols));
}

int values_tf32_block_rows() { return MmaValueTile<8>::Pipe::kRows; }

int values_tf32_splits(int ld, int vcols, std::int64_t rows, std::int64_t nkeys) {
  check_width(ld);
  // The wave rule of choose_splits (lse_pass.cu) on the value kernel's occupancy.
  int per_sm = 0;
  with_mma_values_kernel(ld, [&](auto kernel) {
    KANTOR_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 128, 0));
  });
  const std::int64_t br = values_tf32_block_rows();
  const std::int64_t rb =
      std::max<std::int64_t>(1, (rows + br - 1) / br) * column_blocks(std::max(vcols, 1));
  return wave_splits(per_sm, rb, nkeys);
}

void run_values_tf32(const MmaValuePass& p, void* stream) {
  const LseSide<float>& sd = p.side;
  check_width(p.ld);
  require(sd.rows >= 0 && sd.nkeys >= 0, "rows and nkeys must be >= 0");
  require(p.vcols >= 0, "vcols must be >= 0");
  if (sd.rows == 0 || p.vcols == 0) return;  // nothing to write (an empty grid cannot launch)
  require(p.splits >= 1 && p.splits <= 65535, "splits must be in [1, 65535]");
  require(std::isfinite(p.eps) && p.eps > 0, "eps must be finite and > 0");
  require(std::isfinite(p.cost_scale) && p.cost_scale > 0, "cost_scale must be finite and > 0");
  require(sd.queries && sd.query_norm && sd.pot && p.query_logw,
          "queries, query_norm, pot (the row potential) and query_logw are required");
  require(p.out && p.workspace, "out and workspace are required");
  require(p.ostride >= p.vcols, "ostride must be >= vcols");
  require(aligned16(sd.queries), "queries must be 16-byte aligned");
  if (sd.nkeys > 0) {
    require(sd.keys && sd.key_pot && sd.key_norm && sd.key_logw && p.values,
            "keys, key_pot, key_norm, key_logw and values are required when nkeys > 0");
    require(aligned16(sd.keys), "keys must be 16-byte aligned");
    require(p.vstride >= p.vcols, "vstride must be >= vcols");
  }
  const std::int64_t br = values_tf32_block_rows();
  const std::int64_t rb = (sd.rows + br - 1) / br;
  const int nz = column_blocks(p.vcols);
  require(rb <= 0x7fffffff && nz <= 65535, "too many rows or value columns for one grid");
  const std::int64_t total = sd.rows * p.vcols;
  const std::int64_t blocks = (total + kValuesFinalizeThreads - 1) / kValuesFinalizeThreads;
  require(blocks <= 0x7fffffff, "too many outputs for one finalize grid");

  auto st = static_cast<cudaStream_t>(stream);
  // alpha of the shifted form (as run_lse_pass): 2 log2(e) c / eps, rounded once to float.
  const float alpha = float(2.0 * kLog2e * double(p.cost_scale) / double(p.eps));
  const bool raw16 = aligned16(sd.key_pot) && aligned16(sd.key_norm) && aligned16(sd.key_logw);
  const bool v16 = aligned16(p.values) && p.vstride % 4 == 0;
  const dim3 grid(unsigned(rb), unsigned(p.splits), unsigned(nz));
  with_mma_values_kernel(p.ld,
                         [&](auto kernel) { kernel<<<grid, 128, 0, st>>>(p, alpha, raw16, v16); });
  KANTOR_CUDA_CHECK_LAUNCH();
  lse_mma_values_finalize_kernel<<<unsigned(blocks), kValuesFinalizeThreads, 0, st>>>(p, alpha);
  KANTOR_CUDA_CHECK_LAUNCH();
}

}  // namespace kantor::cuda
