// Streaming log-sum-exp passes of the CUDA point-cloud engine: parameter structs (PODs passed by
// value to the kernels) and the non-template launchers. Plain C++: no CUDA types here, streams
// are opaque cudaStream_t pointers. Kernels: lib/cuda/lse_simt.cuh (CUDA cores, exact
// differences), lib/cuda/lse_mma_pipe.cuh (mma.sync TF32 and bf16, d <= 64 / 128),
// lib/cuda/lse_tf32.cuh (TF32, wider d), lib/cuda/lse_finalize.cuh (merges, potentials, scalar
// reductions). Design and tile rule: docs/cuda-engine.md.
//
// Conventions (docs/numerics.md section 2, in the exp2 domain). Every pass reduces, for each
// query row i over keys j, scores in "u units" u_ij with exp-argument alpha * u_ij (log2 units):
//   exact path (fp32, fp64):  u_ij = beta_j - |x_i - y_j|^2,      beta_j = (g_j + eps log b_j) / c,
//                             alpha = log2(e) c / eps,           query norm term q_i = 0;
//   tf32 path (shifted form): u_ij = beta_j + <x~_i, y~_j>,      beta_j = (g_j - c|y~_j|^2 +
//                             eps log b_j) / (2c), alpha = 2 log2(e) c / eps, q_i = c |x~_i|^2,
// where x~, y~ are the TF32-rounded centred coordinates (norms from the same rounded values);
//   bf16 path: the tf32 shifted form with x~, y~ rounded to bf16 (round to nearest even).
// Then T_f(g)_i = q_i - eps ln2 (alpha M_i + log2 S_i), M_i = max_j u_ij,
// S_i = sum_j exp2(alpha (u_ij - M_i)). The g side swaps the clouds.
#pragma once

#include <cstdint>

namespace kantor::cuda {

/// One direction of an LSE pass: `rows` queries against `keys` keys.
template <class T>
struct LseSide {
  /// rows x ld, padded with zero columns (TF32-rounded on tf32). bf16: rows x ld/2 32-bit words
  /// of packed bf16 pairs (element 2w in the low half of word w), stored in float-typed memory.
  const T* queries = nullptr;
  const T* keys = nullptr;        ///< keys x ld (bf16: packed like queries)
  const T* key_pot = nullptr;     ///< potential of the keys (g for the f side)
  const T* key_norm = nullptr;    ///< c |y~_j|^2 (tf32, bf16); null on the exact path
  const T* key_logw = nullptr;    ///< log weights of the keys, -inf for a zero weight (masked)
  const T* query_norm = nullptr;  ///< q_i (tf32, bf16); null on the exact path
  const T* query_w = nullptr;     ///< weights of the rows (marginal error)
  /// 1 / rho of the rows' marginal: 0 = strict; else the update is damped by
  /// tau = 1 / (1 + eps rho_inv) and the error is the unbalanced residual (online_lse.hpp).
  double rho_inv = 0;
  T* pot = nullptr;       ///< potential of the rows: old value read, new value written
  T* part_max = nullptr;  ///< splits x rows partial maxima (workspace)
  T* part_sum = nullptr;  ///< splits x rows partial sums (workspace)
  std::int64_t rows = 0;
  std::int64_t nkeys = 0;
  /// Key schedule policy: null run_ptr = dense (every key, split-K ranges); else a block list
  /// (kantor::BlockList with row tiles of kBlockRows rows, device copies): row block r scans the
  /// key tiles of runs [run_ptr[r], run_ptr[r+1]), tiles of key_tile keys; the splits of a row
  /// block share its tiles in list order (heavy rows split like split-K).
  const std::int64_t* run_ptr = nullptr;
  const std::int32_t* runs = nullptr;
  int key_tile = 0;
  /// Cost policy, pair term (LabelAugmented): u_ij -= pair[query_labels[i] * classes +
  /// key_labels[j]], the table c_w W already in the kernel's u units (divided by c on the exact
  /// path, by 2c on the shifted form; the g side gets the transposed table). Null = none.
  const std::int32_t* query_labels = nullptr;
  const std::int32_t* key_labels = nullptr;
  const T* pair = nullptr;
  int classes = 0;
  /// Cost policy, class-aligned row tiles (the mma.sync kernels, a dense schedule, the pair term
  /// set, rows ordered by class): row tile r covers rows [tile_start[r], tile_start[r + 1]), at
  /// most kBlockRows of them, all of one label, whose key potentials with the pair term folded
  /// in, key_pot_j - c_w W[label, key_labels[j]], are row tile_slot[r] of class_pot (slots x
  /// nkeys, class_key_potentials). The plain kernel then serves every tile with its class row as
  /// its key potential: the pair term costs one small pass over the keys per update instead of
  /// the policy variant. Null = the fixed tiling (tiles of kBlockRows rows from row 0).
  const std::int64_t* tile_start = nullptr;  ///< tiles + 1 entries
  const std::int32_t* tile_slot = nullptr;
  std::int64_t tiles = 0;
  const T* class_pot = nullptr;
};

/// out[s * nkeys + j] = key_pot[j] - pair[slot_class[s] * classes + key_labels[j]] for s < nslots
/// (pair: c_w W in cost units, double, the g side's table transposed; out 16-byte aligned when
/// nkeys % 4 == 0): the class potentials of LseSide::class_pot. Asynchronous on `stream`.
void class_key_potentials(const float* key_pot, const std::int32_t* key_labels, const double* pair,
                          int classes, const std::int32_t* slot_class, int nslots,
                          std::int64_t nkeys, float* out, void* stream);

/// Rows per row tile of every CUDA kernel (the block lists' row tile).
constexpr int kBlockRows = 128;
/// Keys per tile of the CUDA block lists (a multiple of every kernel's key stage: 16, 32, 64).
constexpr int kBlockKeys = 64;

/// A potential update of one or two sides (two: the fused symmetric step). Both sides read the
/// old potentials in the LSE kernel; the finalize kernel writes pot <- (1 - w) pot + w T(pot').
template <class T>
struct LsePass {
  LseSide<T> side[2];
  int nsides = 1;
  int ld = 0;      ///< padded dimension (row stride of queries and keys)
  int dim = 0;     ///< the clouds' dimension d (the expanded kernel's width)
  int splits = 1;  ///< key-range splits (split-K)
  T eps = 0;
  T cost_scale = 1;  ///< c
  T relax = 1;       ///< w of the symmetric step (1 for plain updates)
  T alpha = 0;       ///< score scale in log2 units; set by run_lse_pass from the kernel kind
  double* err_partials = nullptr;  ///< one double per finalize block, when err is wanted
  double* err = nullptr;           ///< out: sum of sides' marginal errors; null = not wanted
};

/// What a value pass (CUDA cores, exact differences, one key range) produces per query row.
enum class ValueMode : int {
  kApply = 0,        ///< out_ik = a_i exp(f_i/eps + ln2 alpha M_i) * sum_j e_ij V_jk
  kBarycentric = 1,  ///< out_ik = sum_j e_ij V_jk / S_i + center_k
  kStats = 2,        ///< block partials of (mass, <P,C>, sum P (f_i + g_j)) with V = [g_j]
};

constexpr int kValueChunk = 8;  ///< value columns per value pass (more columns: more passes)

/// A value pass over the rows of `side` (its pot = the query potential, read only).
template <class T>
struct LseValuePass {
  LseSide<T> side;
  int ld = 0;
  ValueMode mode = ValueMode::kApply;
  const T* query_logw = nullptr;  ///< log weights of the rows (prefactor)
  const T* values = nullptr;      ///< keys x vcols, row stride vstride (already offset)
  std::int64_t vstride = 0;
  int vcols = 0;     ///< <= kValueChunk
  T* out = nullptr;  ///< rows x vcols at row stride ostride (already offset)
  std::int64_t ostride = 0;
  double center[kValueChunk] = {};  ///< kBarycentric: added to each column
  double* stat_partials = nullptr;  ///< kStats: 3 doubles per block
  double* stats = nullptr;          ///< kStats: out[0..2]
  T eps = 0;
  T cost_scale = 1;
  /// kApply only: key-range splits (split-K, grid.y). With splits > 1 the kernel writes each
  /// split's (max, sum, values) state to `partials` (splits * rows * (2 + kValueChunk) doubles)
  /// and a merge kernel combines them (online_merge, double) and writes out.
  int splits = 1;
  double* partials = nullptr;
  /// kApply on float data: float arithmetic (exp2 on the SFU) instead of double. Each P_ij then
  /// carries ~2^-24 (|g_j| + C_ij)/eps relative error, the fp32 engine's own accuracy.
  bool float_arithmetic = false;
};

/// Doubles of `partials` for a split-K value pass.
inline std::int64_t value_partials_doubles(std::int64_t rows, int splits) {
  return std::int64_t(splits) * rows * (2 + kValueChunk);
}

/// Which kernel runs the LSE of a pass.
enum class LseKernel : int { kSimt = 0, kTf32 = 1, kBf16 = 2, kExpanded = 3 };

/// Largest d the expanded kernel serves (fp32 data; widths 3, 4 and 8 of the exact path's
/// padded rows: lib/cuda/lse_expanded.cu).
constexpr int kExpandedMaxDim = 8;

/// Largest d the bf16 kernel serves (padded widths 16, 32, 64, 128; wider d is refused).
constexpr int kBf16MaxDim = 128;

/// Padded dimension the CUDA-core kernels need for dimension d (zero columns are exact).
int simt_padded_dim(int d);
/// Padded dimension the TF32 kernels need for dimension d.
int tf32_padded_dim(int d);
/// Padded dimension the bf16 kernel needs for d <= kBf16MaxDim (16, 32, 64 or 128); -1 above.
int bf16_padded_dim(int d);
/// Rows per block of the kernel serving padded width ld (the unit of the split-K decision).
int lse_block_rows(LseKernel kernel, int ld);
/// Key-range splits (split-K) for a pass of `rows_total` rows over `nkeys` keys with the kernel
/// serving padded width ld: the fewest splits whose grid fills whole waves of the current
/// device (rule and evidence in lse_pass.cu).
int choose_splits(LseKernel kernel, int ld, bool is_double, std::int64_t rows_total,
                  std::int64_t nkeys);
/// The wave rule of choose_splits for any kernel: `blocks` equal blocks per split (row blocks x
/// any other grid dimension), `blocks_per_sm` resident, `nkeys` keys to divide.
int wave_splits(int blocks_per_sm, std::int64_t blocks, std::int64_t nkeys);
/// Splits for a pass over class-aligned row tiles (LseSide::tile_start) with the mma.sync kernel
/// `kernel` (kTf32 or kBf16) at padded width ld: `tiles` blocks per split (both sides of a fused
/// pass), `nkeys` keys (the wave rule); 0 when the policy variant on the fixed tiling
/// (`fixed_blocks` row blocks at `fixed_splits` splits) should be faster. Rule and evidence in
/// lse_pass.cu.
int class_tile_splits(LseKernel kernel, int ld, std::int64_t tiles, std::int64_t fixed_blocks,
                      int fixed_splits, std::int64_t nkeys);
/// Number of blocks of the finalize kernel for `rows_total` rows (size of err_partials).
int finalize_blocks(std::int64_t rows_total);
/// Number of blocks of a value pass over `rows` rows (size of stat_partials / 3).
int value_pass_blocks(std::int64_t rows);
/// Multiprocessor count of the current device (cached).
int current_sm_count();

/// LSE kernel + finalize (+ error reduction when p.err). Asynchronous on `stream`.
void run_lse_pass(LseKernel kernel, const LsePass<float>& p, void* stream);
void run_lse_pass(LseKernel kernel, const LsePass<double>& p, void* stream);
/// One value pass (CUDA cores, exact differences, double arithmetic). Asynchronous on `stream`.
void run_value_pass(const LseValuePass<float>& p, void* stream);
void run_value_pass(const LseValuePass<double>& p, void* stream);
/// out[0] = <a, phi_a(f)> + <b, phi_b(g)> in double (one block, deterministic), phi the
/// dual_term of lib/core/online_lse.hpp (the identity for rho_inv = 0). Asynchronous.
void run_dual_value(const float* a, const float* f, std::int64_t n, const float* b, const float* g,
                    std::int64_t m, double rho_inv_a, double rho_inv_b, double* out, void* stream);
void run_dual_value(const double* a, const double* f, std::int64_t n, const double* b,
                    const double* g, std::int64_t m, double rho_inv_a, double rho_inv_b,
                    double* out, void* stream);

}  // namespace kantor::cuda
