// The CPU engine's one streaming primitive: a blocked, online log-sum-exp over biased dot-product
// scores, optionally carrying value columns. For every query row i it computes
//
//   s_ij = scale * <q_i, k_j> + bias_j [+ pair(c_i, l_j)]    (scores, never stored beyond a tile)
//   M_i  = max_j s_ij,  S_i = sum_j exp(s_ij - M_i),  A_ik = sum_j exp(s_ij - M_i) V_jk
//
// over the keys j of row i's schedule (all keys, or the runs of a block list), so
// LSE_j s_ij = M_i + log S_i and sum_j exp(s_ij) V_jk = exp(M_i) A_ik. Memory: one tile per
// thread; nothing of size rows x keys exists.
//
// Without values (the Sinkhorn updates) the pass runs in the exp2 domain (docs/numerics.md
// section 2): log2(e) is folded into the query scale and the bias, scores of a chunk of keys are
// produced and max-reduced in one sweep (explicit FMA loops over transposed keys for d <= 8, a
// register-blocked product over packed key panels above), then exponentiated with exp2_nonpos
// and summed in a second sweep over the L1-resident chunk. With values, scores come from an
// Eigen GEMM tile and A from a second GEMM.
//
// ISA paths. All the loops of the LSE pass (scores, max, exp2, sums) exist three times, compiled
// with GCC/Clang target attributes whatever the build's -march: baseline (16-byte vectors, no
// explicit FMA: SSE2 on x86-64, NEON or scalar elsewhere), AVX2 + FMA (32 bytes) and AVX-512 F/DQ
// (64 bytes). The best path the CPU supports is chosen once at run time (RowPassIsa::kAuto);
// row_pass_tuned can force one (tests, benchmarks). Eigen code (the value pass) stays at the
// build's flags.
//
// Determinism. Row blocks are the parallel tasks; each row's reduction runs over the key chunks
// in a fixed order with a fixed lane layout, so for a given ISA path and build the results are
// bitwise identical for any thread count and from run to run. Different ISA paths have
// different lane counts (and the baseline path no FMA), so their results differ by rounding (a
// few ulp of the LSE); the value pass is the same on every path.
#pragma once

#include <Eigen/Dense>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "lib/core/thread_pool.hpp"

namespace kantor::cpu {

/// The CPU engine's workers: its context's pool (lib/core/thread_pool.hpp).
using ThreadPool = kantor::detail::ThreadPool;

template <class T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;

/// Tile shapes (query rows x keys per chunk), chosen on the 2-core AMD EPYC (AVX-512) dev
/// machine, n = m = 20,000, one thread, per pass:
///   LSE, d <= 8 (direct FMA scores): 32 x 1024 (AVX-512, d = 3: fp32 ~68 ms, fp64 ~182 ms,
///     against 78 / 213 for 32 x 512 and 62 / 248 for 32 x 2048; d = 8 fp32: 86 ms against 98 /
///     147); 256 rows with a pair term (row_pass.cpp);
///   LSE, d > 8 (packed-panel scores, 8 x 32 register blocks on AVX-512): 256 x 512; AVX-512
///     fp32 d = 64: ~380-430 ms (the Eigen GEMM tile it replaced: ~780 ms at -march=native);
///   value pass (costs, P v; Eigen): 64 x 256.
/// With a block list the row blocks are the row tiles, split into blocks of at most these rows,
/// and a chunk gathers the keys of consecutive runs (up to the chunk width).
struct RowPassTile {
  static constexpr std::int64_t kDirectRowBlock = 32;
  static constexpr std::int64_t kDirectColBlock = 1024;
  static constexpr std::int64_t kMaxDirectDim = 8;
  static constexpr std::int64_t kGemmRowBlock = 256;
  static constexpr std::int64_t kGemmColBlock = 512;
  static constexpr std::int64_t kValueRowBlock = 64;
  static constexpr std::int64_t kValueColBlock = 256;
};

/// A contiguous row-major host matrix (rows x cols) passed to row_pass. The pass takes plain
/// pointers and returns std::vectors, never Eigen objects: callers may be compiled with other
/// vector flags than the library (the tests are), and Eigen's allocation and alignment
/// assumptions differ between such translation units.
template <class T>
struct MatrixRef {
  const T* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
};

template <class T>
inline MatrixRef<T> ref(const RowMatrix<T>& m) {
  return {m.data(), m.rows(), m.cols()};
}

/// Outputs of row_pass for rows [0, rows): max and sum always, value accumulators when values
/// has columns. Row-wise accumulation across tiles is in double.
struct RowPassResult {
  std::vector<double> max;    // M_i in natural-log units (-inf when every key is masked/absent)
  std::vector<double> sum;    // S_i (0 when every key is masked/absent)
  std::vector<double> accum;  // A, rows x K row-major, K = values.cols
  std::int64_t K = 0;
  double acc(std::int64_t i, std::int64_t k) const { return accum[std::size_t(i * K + k)]; }
};

/// Optional policies of one row_pass (all-null / zero members: the plain dense pass of today).
template <class T>
struct RowPassPolicy {
  /// Pair term (label-augmented costs): s_ij += pair_table[row_labels[i] * classes + key_labels[j]],
  /// in the same units as the scores s_ij (natural log; the caller has scaled the table), finite.
  const std::int32_t* row_labels = nullptr;  ///< rows entries in [0, classes)
  const std::int32_t* key_labels = nullptr;  ///< nk entries in [0, classes)
  const T* pair_table = nullptr;             ///< classes x classes, row-major
  std::int64_t classes = 0;
  /// Key schedule, block list: row tile r = rows [r row_tile, (r+1) row_tile) scans only the keys
  /// of the key-tile runs p in [run_ptr[r], run_ptr[r+1]): key tiles [runs[2p], runs[2p+1]),
  /// key tile t = keys [t key_tile, (t+1) key_tile) clipped to nk. Keys outside the runs are
  /// absent (as if masked). A row tile with no runs gets max = -inf, sum = 0 (and accumulators 0).
  const std::int64_t* run_ptr = nullptr;  ///< ceil(rows / row_tile) + 1 entries, run_ptr[0] = 0
  const std::int32_t* runs = nullptr;     ///< 2 x run_ptr[last] entries (begin, end) pairs
  std::int64_t row_tile = 0;              ///< > 0 when run_ptr is set (any value: the pass adapts its row blocks)
  std::int64_t key_tile = 0;              ///< > 0 when run_ptr is set
};
// Policy semantics as implemented:
// - The pair term is on when pair_table is set (row_labels, key_labels and classes > 0 then
//   required). Rows of a pass may use any subset of the classes. It adds in every path (LSE
//   direct/GEMM, value pass) before the max: the results equal those of a plain pass with the
//   per-row bias bias_j + pair(c_i, l_j) (bitwise, for a given ISA path).
// - The block list is on when run_ptr is set. Runs are scanned in the order given; empty runs
//   (begin == end), runs past the last key tile (clipped to nk) and row tiles without runs are
//   fine. The runs of one row tile must not overlap (as ranges of the key tiles that exist: runs
//   clipped to nk, empty ones excepted): the pass does not check (an overlap counts the shared
//   keys twice); validate_block_list does.
// - A block list whose every row tile holds the single run [0, ceil(nk / key_tile)) gives
//   bitwise the dense result of the LSE pass (its chunks are the dense chunks, and a row's
//   arithmetic does not depend on its row block), and of the value pass when the row tiles are
//   multiples of 64 rows or hold every row (its Eigen tiles depend on the row block; otherwise
//   equal to rounding). Other run layouts cover the same keys in other chunks: equal to rounding
//   (a few ulp of the LSE).

/// Throws std::invalid_argument naming the first defect of the block list of `policy` for a pass
/// of `rows` queries over `nk` keys: row_tile / key_tile <= 0, runs missing, run_ptr[0] != 0,
/// run_ptr decreasing, begin < 0 or begin > end, overlapping runs of one row tile after clipping
/// to the key tiles of nk keys (naming the row tile and both runs). Runs past the last key tile
/// are fine. Nothing to check without a block list. O(runs log runs).
template <class T>
void validate_block_list(const RowPassPolicy<T>& policy, std::int64_t rows, std::int64_t nk);
/// Throws std::invalid_argument when the pair term of `policy` is malformed: classes <= 0 or a
/// label pointer missing while pair_table is set, a label outside [0, classes) (naming the side
/// and index), a non-finite table entry. O(rows + nk + classes^2).
template <class T>
void validate_pair_term(const RowPassPolicy<T>& policy, std::int64_t rows, std::int64_t nk);

/// Runs the pass. `queries` is rows x d, `keys` nk x d, `bias` nk (entries may be -inf: masked
/// keys, which contribute exactly 0), `values` nk x K (K may be 0). Blocks of rows run on `pool`.
/// Instantiated for float and double in row_pass.cpp. The policy is not validated (see
/// validate_block_list / validate_pair_term; debug builds validate).
template <class T>
void row_pass(ThreadPool& pool, MatrixRef<T> queries, MatrixRef<T> keys, const T* bias, T scale,
              MatrixRef<T> values, RowPassResult* out, const RowPassPolicy<T>& policy = {});

/// The vector code paths of the LSE pass and exp2_nonpos_simd.
enum class RowPassIsa : int {
  kAuto = 0,      ///< the best path this CPU supports (decided once per process)
  kBaseline = 1,  ///< 16-byte vectors, no FMA (the x86-64 baseline: SSE2)
  kAvx2 = 2,      ///< AVX2 + FMA, 32-byte vectors
  kAvx512 = 3,    ///< AVX-512 F/DQ, 64-byte vectors
};
const char* to_string(RowPassIsa isa);
/// Whether `isa` can run here (compiled in, and the CPU and OS support it). kAuto: true.
bool row_pass_isa_supported(RowPassIsa isa);
/// What kAuto resolves to on this machine.
RowPassIsa row_pass_best_isa();
/// Every concrete path that runs here, baseline first.
std::vector<RowPassIsa> row_pass_supported_isas();

/// Knobs of row_pass_tuned, for tests and benchmarks.
struct RowPassTuning {
  /// The LSE pass's vector path; an unsupported one throws std::invalid_argument.
  RowPassIsa isa = RowPassIsa::kAuto;
  /// Pair term: the LSE pass builds one biased key array per class present in the rows
  /// (classes x nk entries) once per pass when it fits in this many bytes, otherwise per row
  /// block and chunk for the classes of the block (same results, bitwise).
  std::int64_t pair_bias_bytes = std::int64_t(64) << 20;
};

/// row_pass with explicit tuning (row_pass = row_pass_tuned with RowPassTuning{}).
template <class T>
void row_pass_tuned(const RowPassTuning& tuning, ThreadPool& pool, MatrixRef<T> queries,
                    MatrixRef<T> keys, const T* bias, T scale, MatrixRef<T> values,
                    RowPassResult* out, const RowPassPolicy<T>& policy = {});

/// out[i] = 2^t[i] for t[i] <= 0 with the vectorized exp2 the LSE pass uses on path `isa` (same
/// semantics as exp2_nonpos below; for tests). Instantiated for float and double.
template <class T>
void exp2_nonpos_simd(const T* t, std::int64_t count, T* out, RowPassIsa isa = RowPassIsa::kAuto);

namespace detail {

template <class T>
struct Exp2Bits;
template <>
struct Exp2Bits<float> {
  using Bits = std::uint32_t;
  static constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  static constexpr int kMantissa = 23;
  static constexpr Bits kBias = 127;
  static constexpr float kLow = -127.0f;  // 2^n with n <= -127 is flushed to exactly 0
};
template <>
struct Exp2Bits<double> {
  using Bits = std::uint64_t;
  static constexpr double kMagic = 6755399441055744.0;  // 1.5 * 2^52
  static constexpr int kMantissa = 52;
  static constexpr Bits kBias = 1023;
  static constexpr double kLow = -1023.0;
};

template <class T>
inline T fma_or_madd(T a, T b, T c) {
#ifdef __FMA__
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

}  // namespace detail

/// 2^t for t <= 0, written so that loops over it vectorize (no calls, no branches): t = n + f
/// with n = round(t) (magic-number rounding), 2^f by its Taylor polynomial on |f| <= 1/2
/// (degree 7 for float, 13 for double: truncation below 1e-8 and 1e-17 relative), 2^n by
/// building the exponent bits. Exactly 0 for t <= -127 (float) / -1023 (double) and for -inf,
/// which is how masked keys vanish; NaN stays NaN. Not for t > 0 (the pass only exponentiates
/// scores minus their running max). Accuracy: a few ulp (tests/sinkhorn/test_row_pass.cpp).
template <class T>
inline T exp2_nonpos(T t) {
  using B = detail::Exp2Bits<T>;
  using Bits = typename B::Bits;
  t = t < B::kLow ? B::kLow : t;
  const T shifted = t + B::kMagic;
  const T n = shifted - B::kMagic;
  const T f = t - n;
  // Taylor coefficients of 2^f = sum_k (ln 2)^k f^k / k!, highest first.
  T p;
  if constexpr (sizeof(T) == 4) {
    p = T(1.5252733804059841e-05);
    p = detail::fma_or_madd(p, f, T(0.0001540353039338161));
    p = detail::fma_or_madd(p, f, T(0.0013333558146428443));
    p = detail::fma_or_madd(p, f, T(0.009618129107628477));
    p = detail::fma_or_madd(p, f, T(0.05550410866482158));
    p = detail::fma_or_madd(p, f, T(0.24022650695910072));
    p = detail::fma_or_madd(p, f, T(0.6931471805599453));
    p = detail::fma_or_madd(p, f, T(1.0));
  } else {
    p = T(1.3691488853904128e-12);
    p = detail::fma_or_madd(p, f, T(2.5678435993488206e-11));
    p = detail::fma_or_madd(p, f, T(4.4455382718708116e-10));
    p = detail::fma_or_madd(p, f, T(7.054911620801123e-09));
    p = detail::fma_or_madd(p, f, T(1.01780860092397e-07));
    p = detail::fma_or_madd(p, f, T(1.321548679014431e-06));
    p = detail::fma_or_madd(p, f, T(1.5252733804059841e-05));
    p = detail::fma_or_madd(p, f, T(0.0001540353039338161));
    p = detail::fma_or_madd(p, f, T(0.0013333558146428443));
    p = detail::fma_or_madd(p, f, T(0.009618129107628477));
    p = detail::fma_or_madd(p, f, T(0.05550410866482158));
    p = detail::fma_or_madd(p, f, T(0.24022650695910072));
    p = detail::fma_or_madd(p, f, T(0.6931471805599453));
    p = detail::fma_or_madd(p, f, T(1.0));
  }
  Bits nb, mb;
  const T magic = B::kMagic;
  std::memcpy(&nb, &shifted, sizeof(T));
  std::memcpy(&mb, &magic, sizeof(T));
  const Bits e = (nb - mb + B::kBias) << B::kMantissa;
  T scale;
  std::memcpy(&scale, &e, sizeof(T));
  return p * scale;
}

}  // namespace kantor::cpu
