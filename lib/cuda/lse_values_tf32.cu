// Launchers of the tensor-core value pass (lib/cuda/lse_values.hpp): the fp16 staging of the
// values (a column maximum, then the scaled conversion), the value kernel of
// lib/cuda/lse_mma_values.cuh for padded widths 8, 16, 32, 64 (4 kernels) and one finalize kernel
// that merges the split-K partials in double, applies the row prefactor and the column scale and
// writes out = P V (and optionally P 1). All asynchronous on the given stream.
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

constexpr int kConvertThreads = 256;

__host__ __device__ constexpr int column_blocks(int vcols) {
  return (vcols + kValueBlockCols - 1) / kValueBlockCols;
}

/// Columns of the fp16 value copy: vcols rounded up to whole 16-byte chunks.
__host__ __device__ constexpr std::int64_t padded_cols(int vcols) { return (vcols + 7) / 8 * 8; }

/// Workspace layout (floats): the kernel's partials, then (from a 4-float boundary) the column
/// scales 1 / s_c (kp floats), the column maxima (kp words), then the fp16 values (nkeys x kp
/// halves, 16-byte aligned when the workspace is).
struct Workspace {
  std::int64_t partials, inv_scale, colmax, values, total;
  Workspace(std::int64_t rows, std::int64_t nkeys, int vcols, int splits) {
    const std::int64_t kp = padded_cols(vcols);
    auto up4 = [](std::int64_t x) { return (x + 3) / 4 * 4; };
    partials =
        std::int64_t(column_blocks(vcols)) * splits * rows * (2 + std::min(vcols, kValueBlockCols));
    inv_scale = up4(partials);
    colmax = inv_scale + up4(kp);
    values = colmax + up4(kp);
    total = values + up4(nkeys * kp / 2);
  }
};

/// colmax[c] = max_j |V_jc| as the bits of a non-negative float (integer order = float order),
/// colmax zeroed by the caller. Block (32 columns x 8 rows): each thread keeps its maximum over a
/// stride of rows, the block reduces over its 8 rows, one atomic per column and block.
__global__ void __launch_bounds__(kConvertThreads)
    value_colmax_kernel(const float* __restrict__ V, std::int64_t vstride, std::int64_t nkeys,
                        int vcols, unsigned* colmax) {
  __shared__ unsigned red[8][32];
  const int cx = threadIdx.x & 31, ry = threadIdx.x >> 5;
  const int c = int(blockIdx.x) * 32 + cx;
  unsigned mx = 0;
  if (c < vcols)
    for (std::int64_t j = std::int64_t(blockIdx.y) * 8 + ry; j < nkeys;
         j += std::int64_t(gridDim.y) * 8)
      mx = max(mx, __float_as_uint(fabsf(V[j * vstride + c])));
  red[ry][cx] = mx;
  __syncthreads();
  if (ry == 0 && c < vcols) {
    for (int r = 1; r < 8; ++r) mx = max(mx, red[r][cx]);
    atomicMax(colmax + c, mx);
  }
}

/// The power-of-two scale s = 2^e of a column with largest magnitude `mx`: mx s in [2^13, 2^14)
/// (e clamped to [-100, 100]; s = 1 for an all-zero column). Exact in both directions.
__device__ __forceinline__ int column_exponent(float mx) {
  if (!(mx > 0.f) || !(mx < INFINITY)) return 0;
  int ex;
  (void)frexpf(mx, &ex);  // mx = f 2^ex, f in [0.5, 1)
  return max(-100, min(100, 14 - ex));
}

/// vh[j kp + c] = fp16(V_jc s_c) (round to nearest; 0 for c >= vcols), one 16-byte chunk (8
/// halves) per thread; row 0's threads also write inv_scale[c] = 1 / s_c.
__global__ void __launch_bounds__(kConvertThreads)
    value_convert_kernel(const float* __restrict__ V, std::int64_t vstride, std::int64_t nkeys,
                         int vcols, std::int64_t kp, const unsigned* colmax, float* inv_scale,
                         uint4* vh) {
  const std::int64_t chunks = kp / 8;
  const std::int64_t idx = std::int64_t(blockIdx.x) * kConvertThreads + threadIdx.x;
  if (idx >= nkeys * chunks) return;
  const std::int64_t j = idx / chunks;
  const int c0 = int(idx - j * chunks) * 8;
  std::uint32_t w[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    float v[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int c = c0 + 2 * e + h;
      const int ex = c < vcols ? column_exponent(__uint_as_float(colmax[c])) : 0;
      v[h] = c < vcols ? ldexpf(V[j * vstride + c], ex) : 0.f;
      if (j == 0 && c < vcols) inv_scale[c] = ldexpf(1.f, -ex);
    }
    w[e] = pack_f16x2(v[0], v[1]);
  }
  vh[idx] = make_uint4(w[0], w[1], w[2], w[3]);
}

/// One thread per (row i, value column k), k fastest (coalesced out rows and A partials). With
/// the partials of block z = k / 64 (lse_mma_values_kernel): the kernel's probabilities of split
/// s are exp2(alpha u + nam_s), nam_s = -alpha M_s as the fp32 product, so
///   out_ik = exp(log a_i + (f_i - q_i) / eps) sum_s A_sk 2^(-nam_s)
///          = pref_i sum_s A_sk 2^(-nam_s - top),  top = max_s (-nam_s),
///   pref_i = exp(log a_i + (f_i - q_i) / eps + ln2 top),
/// in double (-nam_s recomputed as the same fp32 product, so it cancels exactly against the
/// kernel's offset), and out_ik times the column's 1 / s_k (the fp16 values' scale, exact). Guards:
/// splits that saw only masked keys (M_s = -inf, A_s = S_s = 0) are skipped, never -inf - -inf;
/// rows whose keys are all masked, and zero-weight rows (log a_i = -inf), get out = 0 and row_mass
/// = 0.
__global__ void __launch_bounds__(kValuesFinalizeThreads)
    lse_mma_values_finalize_kernel(MmaValuePass p, float alpha, const float* inv_scale) {
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
    o *= pref * double(inv_scale[k]);
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

std::size_t values_tf32_workspace_floats(std::int64_t rows, std::int64_t nkeys, int vcols,
                                         int splits) {
  if (rows <= 0 || vcols <= 0 || splits <= 0 || nkeys < 0) return 0;
  return std::size_t(Workspace(rows, nkeys, vcols, splits).total);
}

int values_tf32_block_rows() { return MmaValueTile<8>::Pipe::kRows; }

int values_tf32_splits(int ld, int vcols, std::int64_t rows, std::int64_t nkeys) {
  check_width(ld);
  // The wave rule of choose_splits (lse_pass.cu) on the value kernel's occupancy.
  int per_sm = 0;
  with_mma_values_kernel(ld, [&](auto kernel, std::size_t smem) {
    KANTOR_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 128, smem));
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
  require(aligned16(p.workspace), "workspace must be 16-byte aligned");
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
  // The fp16 values (lib/cuda/lse_mma_values.cuh): column maxima, then the scaled conversion.
  const Workspace ws(sd.rows, sd.nkeys, p.vcols, p.splits);
  const std::int64_t kp = padded_cols(p.vcols);
  float* inv_scale = p.workspace + ws.inv_scale;
  auto* colmax = reinterpret_cast<unsigned*>(p.workspace + ws.colmax);
  auto* vh = reinterpret_cast<std::uint16_t*>(p.workspace + ws.values);
  KANTOR_CUDA_TRY(cudaMemsetAsync(colmax, 0, sizeof(unsigned) * std::size_t(kp), st));
  KANTOR_CUDA_TRY(cudaMemsetAsync(inv_scale, 0, sizeof(float) * std::size_t(kp), st));
  if (sd.nkeys > 0) {
    const dim3 cgrid(unsigned((p.vcols + 31) / 32),
                     unsigned(std::min<std::int64_t>(1024, (sd.nkeys + 7) / 8)));
    value_colmax_kernel<<<cgrid, kConvertThreads, 0, st>>>(p.values, p.vstride, sd.nkeys, p.vcols,
                                                           colmax);
    KANTOR_CUDA_CHECK_LAUNCH();
    const std::int64_t chunks = sd.nkeys * (kp / 8);
    value_convert_kernel<<<unsigned((chunks + kConvertThreads - 1) / kConvertThreads),
                           kConvertThreads, 0, st>>>(p.values, p.vstride, sd.nkeys, p.vcols, kp,
                                                     colmax, inv_scale,
                                                     reinterpret_cast<uint4*>(vh));
    KANTOR_CUDA_CHECK_LAUNCH();
  }
  // alpha of the shifted form (as run_lse_pass): 2 log2(e) c / eps, rounded once to float.
  const float alpha = float(2.0 * kLog2e * double(p.cost_scale) / double(p.eps));
  const bool raw16 = aligned16(sd.key_pot) && aligned16(sd.key_norm) && aligned16(sd.key_logw);
  const dim3 grid(unsigned(rb), unsigned(p.splits), unsigned(nz));
  with_mma_values_kernel(p.ld, [&](auto kernel, std::size_t smem) {
    kernel<<<grid, 128, smem, st>>>(p, alpha, raw16, vh, kp);
  });
  KANTOR_CUDA_CHECK_LAUNCH();
  lse_mma_values_finalize_kernel<<<unsigned(blocks), kValuesFinalizeThreads, 0, st>>>(p, alpha,
                                                                                      inv_scale);
  KANTOR_CUDA_CHECK_LAUNCH();
}

}  // namespace kantor::cuda
