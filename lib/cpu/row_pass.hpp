// The CPU engine's one streaming primitive: a blocked, online log-sum-exp over biased dot-product
// scores, optionally carrying value columns. For every query row i it computes
//
//   s_ij = scale * <q_i, k_j> + bias_j                       (scores, never stored beyond a tile)
//   M_i  = max_j s_ij,  S_i = sum_j exp(s_ij - M_i),  A_ik = sum_j exp(s_ij - M_i) V_jk
//
// so LSE_j s_ij = M_i + log S_i and sum_j exp(s_ij) V_jk = exp(M_i) A_ik. Memory: one tile per
// thread; nothing of size rows x keys exists.
//
// Without values (the Sinkhorn updates) the pass runs in the exp2 domain (docs/numerics.md
// section 2): log2(e) is folded into the query scale and the bias, scores of a chunk of keys are
// produced and max-reduced in one sweep (explicit FMA loops over transposed keys for d <= 8, an
// Eigen GEMM tile above), then exponentiated with exp2_nonpos and summed in a second sweep over
// the L1-resident chunk. With values, scores come from a GEMM tile and A from a second GEMM.
//
// Row blocks are the parallel tasks; each row's reduction runs over the key chunks in a fixed
// order with a fixed lane layout, so results are bitwise identical for any thread count and from
// run to run.
#pragma once

#include <Eigen/Dense>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "lib/cpu/thread_pool.hpp"

namespace kantor::cpu {

template <class T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;

/// Tile shapes (query rows x keys per chunk), measured on the 2-core AMD EPYC (Zen 4, AVX-512)
/// dev machine, n = m = 20,000, one thread, CPU time per pass:
///   LSE, d <= 8 (direct FMA scores): 32 x 512 (d = 3: 313 ms fp64, 122-136 ms fp32; 32 x 256
///     and 64 x 1024 within noise, 16 x 2048 slower);
///   LSE, d > 8 (GEMM scores): 256 x 512 (d = 64: 1610-1680 ms fp64, 780 ms fp32, against
///     1750 / 830 for 128 x 512 and 1890 / 930 for 64 x 256);
///   value pass (costs, P v): 64 x 256, unchanged.
struct RowPassTile {
  static constexpr std::int64_t kDirectRowBlock = 32;
  static constexpr std::int64_t kDirectColBlock = 512;
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
  std::vector<double> max;    // M_i in natural-log units (-inf when every key is masked)
  std::vector<double> sum;    // S_i
  std::vector<double> accum;  // A, rows x K row-major, K = values.cols
  std::int64_t K = 0;
  double acc(std::int64_t i, std::int64_t k) const { return accum[std::size_t(i * K + k)]; }
};

/// Runs the pass. `queries` is rows x d, `keys` nk x d, `bias` nk (entries may be -inf: masked
/// keys, which contribute exactly 0), `values` nk x K (K may be 0). Blocks of rows run on `pool`.
/// Instantiated for float and double in row_pass.cpp.
template <class T>
void row_pass(ThreadPool& pool, MatrixRef<T> queries, MatrixRef<T> keys, const T* bias, T scale,
              MatrixRef<T> values, RowPassResult* out);

/// out[i] = 2^t[i] for t[i] <= 0 with the vectorized exp2 the LSE pass uses (same semantics as
/// exp2_nonpos below; for tests). Instantiated for float and double in row_pass.cpp.
template <class T>
void exp2_nonpos_simd(const T* t, std::int64_t count, T* out);

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
