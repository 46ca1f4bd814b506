// Tensor-core value pass (TF32): for every query row i one streaming pass computes the row's LSE
// state and the transport applied to a matrix of values,
//   out_ik = (P V)_ik = sum_j P_ij V_jk,   P_ij = a_i b_j exp((f_i + g_j - C~_ij) / eps),
// with the scores on the tensor cores (the shifted form of lib/cuda/lse_params.hpp, exp2 domain,
// TF32 mma.sync m16n8k8) and the second product P V on the tensor cores too (mma.sync m16n8k16
// in fp16, which has TF32's 11-bit significand, with exact power-of-two scales for its range;
// fp32 accumulation, FlashAttention-2 style). Kernel: lib/cuda/lse_mma_values.cuh; launchers: lse_values_tf32.cu.
// Plain C++: no CUDA types here, streams are opaque cudaStream_t pointers.
//
// Served: padded widths ld in {8, 16, 32, 64} (tf32 d <= 64; one kernel each) and any number of
// value columns vcols >= 1, in one launch: blocks of 64 value columns (blockIdx.z), each padded to
// 8, 16, 32 or 64 columns on the tensor cores. Wider clouds are refused (InvalidArgument).
//
// Accuracy (relative to sum_j |P_ij| |V_jk|, not to |out_ik|, which may cancel): P and V are
// rounded to fp16 (round to nearest even, relative 2^-11 each, as TF32) with absolute floors far
// below that (P: 2^-32 of the row's largest term per key; V: 2^-38 of the column's largest
// magnitude), the scores carry the fp32 error of the LSE pass (alpha * du, du ~ 2^-23 |u|), and
// the sum over keys is an fp32 accumulation (~(keys / 8) 2^-24); the prefactors and the split-K
// merge are in double.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lib/cuda/lse_params.hpp"

namespace kantor::cuda {

/// A value pass over the rows of `side`. Layout and conventions as the tf32 LSE pass
/// (lib/cuda/lse_params.hpp, oracles/cuda/cuda_oracle.cpp):
///   side.queries, side.keys: rows x ld and nkeys x ld, TF32-rounded centred coordinates, zero
///     padded to ld, 16-byte aligned (the kernel reads them as 8- and 16-byte vectors);
///   side.key_pot (the key potential: g on the f side), side.key_norm (c|y~|^2),
///   side.key_logw (log b, -inf = zero weight: the key is masked), side.query_norm (c|x~|^2),
///   side.pot (the row potential f, read only), side.rows, side.nkeys.
///   side.query_w, part_max, part_sum are not used (the partials live in `workspace`).
/// The g side swaps the clouds, exactly as for the LSE pass.
struct MmaValuePass {
  LseSide<float> side;
  const float* query_logw = nullptr;  ///< log a_i of the rows; -inf (zero weight): out row = 0
  int ld = 0;                         ///< padded width of queries and keys: 8, 16, 32 or 64
  /// nkeys x vcols values at row stride vstride (any finite float values, any alignment; the
  /// launcher converts them to fp16 in the workspace with a power-of-two scale per column).
  const float* values = nullptr;
  std::int64_t vstride = 0;
  int vcols = 0;         ///< number of value columns K (>= 1; 0 = nothing to do)
  float* out = nullptr;  ///< rows x vcols at row stride ostride: out = P V
  std::int64_t ostride = 0;
  /// Optional (may be null): rows floats, row_mass_i = (P 1)_i = sum_j P_ij.
  float* row_mass = nullptr;
  float eps = 0;
  float cost_scale = 1;  ///< c
  int splits = 1;        ///< key-range splits (split-K), 1 <= splits <= 65535
  /// Partials of the splits and the fp16 values: at least values_tf32_workspace_floats(rows,
  /// nkeys, vcols, splits) floats (device memory, 16-byte aligned). Written and read within the
  /// pass (stream order).
  float* workspace = nullptr;
};

/// Value columns per block of the value kernel (the blockIdx.z groups).
constexpr int kValueBlockCols = 64;

/// Floats of workspace for a pass of `rows` rows, `nkeys` keys, `vcols` value columns and
/// `splits` splits: the partials, ceil(vcols / 64) * splits * rows * (2 + min(vcols, 64)), then
/// (each part rounded up to 4 floats) 2 kp column words and the fp16 values, nkeys * kp / 2,
/// with kp = vcols rounded up to a multiple of 8. 0 when rows, vcols or splits is 0.
std::size_t values_tf32_workspace_floats(std::int64_t rows, std::int64_t nkeys, int vcols,
                                         int splits);

/// Key-range splits for a value pass: the fewest splits whose grid (row blocks x column blocks x
/// splits) fills whole waves of the current device, within 2% of the best, with >= 512 keys per
/// split, or for a grid under one wave up to one wave with >= 128 keys per split (the rule of
/// choose_splits, wave_splits in lse_pass.cu, on the value kernel's occupancy). Throws
/// InvalidArgument for an unsupported ld.
int values_tf32_splits(int ld, int vcols, std::int64_t rows, std::int64_t nkeys);

/// Rows per block of the value kernel (128, the row blocks of the LSE kernel).
int values_tf32_block_rows();

/// Value kernel + finalize (merge of the split partials, prefactor, out and row_mass).
/// Asynchronous on `stream`, no host synchronization. Throws InvalidArgument on an unsupported ld,
/// missing or misaligned inputs, bad strides, eps <= 0, c <= 0 or splits out of range.
void run_values_tf32(const MmaValuePass& p, void* stream);

}  // namespace kantor::cuda
