// The CPU row pass (declared in row_pass.hpp), compiled once with the library's CPU flags
// (KANTOR_MARCH) and instantiated for float and double.
//
// LSE pass (no values), per task = block of query rows, per chunk of keys, per row:
//   sweep 1: s_j = <q'_i, k_j> + b'_j with q' = scale log2(e) q, b' = log2(e) bias, stored in an
//            L1-resident buffer while a lane-wise max runs alongside;
//   sweep 2: sum_j exp2_nonpos(s_j - M'), lane-wise, then reduced in double into the row's
//            running (M', S) with the rescale exp2(M'_old - M'_new).
// Scores come from explicit FMA loops over keys stored transposed (one contiguous array per
// coordinate) for d <= 8, from an Eigen GEMM tile above. Lanes are a fixed-size array the
// compiler maps onto SIMD registers; the lane assignment depends only on the key index, so the
// summation order is fixed.
//
// The value pass (K > 0) keeps the Eigen-expression implementation: it serves costs, P v and
// the barycentric map, not the iterations.
#include "lib/cpu/row_pass.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

namespace kantor::cpu {
namespace {

constexpr double kLn2 = 0.69314718055994530942;
constexpr double kLog2e = 1.44269504088896340736;

// ---- a minimal SIMD layer over GCC/Clang vector extensions ------------------------------------
// V holds W lanes of T, VI the same bits as integers. FMA through the ISA's intrinsic when the
// build enables it (ISO C++ mode does not contract a * b + c), else a multiply and an add.
#if defined(__AVX512F__)
constexpr int kVectorBytes = 64;
#elif defined(__AVX__)
constexpr int kVectorBytes = 32;
#else
constexpr int kVectorBytes = 16;  // SSE2, NEON, or plain scalar code from the compiler
#endif

template <class T>
struct Simd;

template <>
struct Simd<float> {
  typedef float V __attribute__((vector_size(kVectorBytes)));
  typedef std::int32_t VI __attribute__((vector_size(kVectorBytes)));
  static constexpr int W = kVectorBytes / 4;
  static V fma(V a, V b, V c) {
#if defined(__AVX512F__)
    return _mm512_fmadd_ps(a, b, c);
#elif defined(__AVX__) && defined(__FMA__)
    return _mm256_fmadd_ps(a, b, c);
#else
    return a * b + c;
#endif
  }
};

template <>
struct Simd<double> {
  typedef double V __attribute__((vector_size(kVectorBytes)));
  typedef std::int64_t VI __attribute__((vector_size(kVectorBytes)));
  static constexpr int W = kVectorBytes / 8;
  static V fma(V a, V b, V c) {
#if defined(__AVX512F__)
    return _mm512_fmadd_pd(a, b, c);
#elif defined(__AVX__) && defined(__FMA__)
    return _mm256_fmadd_pd(a, b, c);
#else
    return a * b + c;
#endif
  }
};

template <class T>
using VecT = typename Simd<T>::V;

template <class T>
inline VecT<T> splat(T x) {
  return VecT<T>{} + x;
}
template <class T>
inline VecT<T> load(const T* p) {
  VecT<T> v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <class T>
inline void store(T* p, VecT<T> v) {
  std::memcpy(p, &v, sizeof(v));
}
template <class T>
inline VecT<T> vmax(VecT<T> a, VecT<T> b) {
  return a < b ? b : a;
}

// exp2_nonpos (row_pass.hpp) on W lanes: the same operations, so the same results lane by lane
// when the scalar version is compiled with FMA.
template <class T>
inline VecT<T> exp2_nonpos_v(VecT<T> t) {
  using B = detail::Exp2Bits<T>;
  using VI = typename Simd<T>::VI;
  using S = Simd<T>;
  t = vmax<T>(t, splat<T>(B::kLow));
  const VecT<T> magic = splat<T>(B::kMagic);
  const VecT<T> shifted = t + magic;
  const VecT<T> n = shifted - magic;
  const VecT<T> f = t - n;
  VecT<T> p;
  if constexpr (sizeof(T) == 4) {
    p = splat<T>(T(1.5252733804059841e-05));
    p = S::fma(p, f, splat<T>(T(0.0001540353039338161)));
    p = S::fma(p, f, splat<T>(T(0.0013333558146428443)));
    p = S::fma(p, f, splat<T>(T(0.009618129107628477)));
    p = S::fma(p, f, splat<T>(T(0.05550410866482158)));
    p = S::fma(p, f, splat<T>(T(0.24022650695910072)));
    p = S::fma(p, f, splat<T>(T(0.6931471805599453)));
    p = S::fma(p, f, splat<T>(T(1.0)));
  } else {
    p = splat<T>(T(1.3691488853904128e-12));
    p = S::fma(p, f, splat<T>(T(2.5678435993488206e-11)));
    p = S::fma(p, f, splat<T>(T(4.4455382718708116e-10)));
    p = S::fma(p, f, splat<T>(T(7.054911620801123e-09)));
    p = S::fma(p, f, splat<T>(T(1.01780860092397e-07)));
    p = S::fma(p, f, splat<T>(T(1.321548679014431e-06)));
    p = S::fma(p, f, splat<T>(T(1.5252733804059841e-05)));
    p = S::fma(p, f, splat<T>(T(0.0001540353039338161)));
    p = S::fma(p, f, splat<T>(T(0.0013333558146428443)));
    p = S::fma(p, f, splat<T>(T(0.009618129107628477)));
    p = S::fma(p, f, splat<T>(T(0.05550410866482158)));
    p = S::fma(p, f, splat<T>(T(0.24022650695910072)));
    p = S::fma(p, f, splat<T>(T(0.6931471805599453)));
    p = S::fma(p, f, splat<T>(T(1.0)));
  }
  // 2^n from the bits of `shifted`: bits(shifted) - bits(magic) = n.
  typename B::Bits mb;
  const T m = B::kMagic;
  std::memcpy(&mb, &m, sizeof(T));
  using IS = typename std::remove_reference<decltype(VI{}[0])>::type;
  const VI e = ((VI)shifted + IS(B::kBias - mb)) << B::kMantissa;
  return p * (VecT<T>)e;
}

template <class T>
inline T hmax(VecT<T> v) {
  T r = v[0];
  for (int l = 1; l < Simd<T>::W; ++l) r = r < v[l] ? v[l] : r;
  return r;
}

// Fixed-order pairwise reduction of the lanes, in double.
template <class T>
inline double hsum(VecT<T> v) {
  double tmp[Simd<T>::W];
  for (int l = 0; l < Simd<T>::W; ++l) tmp[l] = double(v[l]);
  for (int w = Simd<T>::W / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) tmp[l] += tmp[l + w];
  return tmp[0];
}

inline std::int64_t round_up(std::int64_t x, std::int64_t w) { return (x + w - 1) / w * w; }

// Sweep 1, direct scores: s[j] = b[j] + sum_k q[k] kt[k][j] for j in [0, bc), bc a multiple of
// W (padded keys have b = -inf), kt the transposed keys (row k = coordinate k of every key,
// leading dimension ld) offset to the chunk. Returns max_j s[j].
template <class T, int D>
T direct_scores(const T* q, const T* kt, std::int64_t ld, const T* b, std::int64_t bc, int d,
                T* s) {
  using S = Simd<T>;
  constexpr int W = S::W;
  const int dd = D > 0 ? D : d;
  VecT<T> qv[D > 0 ? D : 1];
  if constexpr (D > 0)
    for (int k = 0; k < D; ++k) qv[k] = splat<T>(q[k]);
  VecT<T> m = splat<T>(-std::numeric_limits<T>::infinity());
  for (std::int64_t j = 0; j < bc; j += W) {
    VecT<T> acc = load<T>(b + j);
    for (int k = 0; k < dd; ++k)
      acc = S::fma(D > 0 ? qv[k] : splat<T>(q[k]), load<T>(kt + k * ld + j), acc);
    store<T>(s + j, acc);
    m = vmax<T>(m, acc);
  }
  return hmax<T>(m);
}

// Sweep 1, GEMM scores: s[j] = tile[j] + b[j] in place (bc a multiple of W). Returns the max.
template <class T>
T biased_max(T* s, const T* b, std::int64_t bc) {
  constexpr int W = Simd<T>::W;
  VecT<T> m = splat<T>(-std::numeric_limits<T>::infinity());
  for (std::int64_t j = 0; j < bc; j += W) {
    const VecT<T> v = load<T>(s + j) + load<T>(b + j);
    store<T>(s + j, v);
    m = vmax<T>(m, v);
  }
  return hmax<T>(m);
}

// Sweep 2: sum_j 2^(s[j] - mx), lane-wise in T (two accumulators), reduced in double.
template <class T>
double exp2_sum(const T* s, std::int64_t bc, T mx) {
  constexpr int W = Simd<T>::W;
  const VecT<T> mv = splat<T>(mx);
  VecT<T> acc0 = splat<T>(T(0)), acc1 = splat<T>(T(0));
  std::int64_t j = 0;
  for (; j + 2 * W <= bc; j += 2 * W) {
    acc0 += exp2_nonpos_v<T>(load<T>(s + j) - mv);
    acc1 += exp2_nonpos_v<T>(load<T>(s + j + W) - mv);
  }
  if (j < bc) acc0 += exp2_nonpos_v<T>(load<T>(s + j) - mv);
  return hsum<T>(acc0) + hsum<T>(acc1);
}

// Folds one chunk (scores s[0, bc), chunk max cm) into a row's running (M', S), exp2 units.
template <class T>
void fold_chunk(const T* s, std::int64_t bc, T cm, T* row_max, double* row_sum) {
  const T new_max = *row_max < cm ? cm : *row_max;
  // Guard: while every key seen so far is masked the max is -inf; exp2(-inf - -inf) would be
  // NaN, so such chunks contribute nothing.
  if (new_max == -std::numeric_limits<T>::infinity()) return;
  if (new_max > *row_max) {
    *row_sum *= std::exp2(double(*row_max) - double(new_max));  // 0 when the old max is -inf
    *row_max = new_max;
  }
  *row_sum += exp2_sum<T>(s, bc, new_max);
}

template <class T>
using DirectFn = T (*)(const T*, const T*, std::int64_t, const T*, std::int64_t, int, T*);

template <class T>
DirectFn<T> direct_kernel(std::int64_t d) {
  switch (d) {
    case 1:
      return &direct_scores<T, 1>;
    case 2:
      return &direct_scores<T, 2>;
    case 3:
      return &direct_scores<T, 3>;
    case 4:
      return &direct_scores<T, 4>;
    case 5:
      return &direct_scores<T, 5>;
    case 6:
      return &direct_scores<T, 6>;
    case 7:
      return &direct_scores<T, 7>;
    case 8:
      return &direct_scores<T, 8>;
    default:
      return &direct_scores<T, 0>;
  }
}

template <class T>
using ConstMap = Eigen::Map<const RowMatrix<T>>;

template <class T>
void lse_pass(ThreadPool& pool, const ConstMap<T>& queries, const ConstMap<T>& keys,
              const Eigen::Map<const Vec<T>>& bias, T scale, RowPassResult* out) {
  constexpr std::int64_t W = Simd<T>::W;
  const std::int64_t rows = queries.rows(), nk = keys.rows(), d = queries.cols();
  out->max.assign(std::size_t(rows), 0.0);
  out->sum.assign(std::size_t(rows), 0.0);
  out->accum.clear();
  out->K = 0;
  // exp2 domain: s' = (scale log2 e) <q, k> + log2(e) bias (-inf stays -inf). Keys are padded
  // to a multiple of W with masked entries (bias -inf), so every sweep runs on whole vectors.
  const std::int64_t nk_pad = round_up(nk, W);
  const RowMatrix<T> q2 = queries * T(double(scale) * kLog2e);
  Vec<T> b2(nk_pad);
  b2.head(nk) = bias * T(kLog2e);
  b2.tail(nk_pad - nk).setConstant(-std::numeric_limits<T>::infinity());
  const bool direct = d <= RowPassTile::kMaxDirectDim;
  const std::int64_t row_block = direct ? RowPassTile::kDirectRowBlock : RowPassTile::kGemmRowBlock;
  const std::int64_t col_block = direct ? RowPassTile::kDirectColBlock : RowPassTile::kGemmColBlock;
  static_assert(RowPassTile::kDirectColBlock % 16 == 0 && RowPassTile::kGemmColBlock % 16 == 0,
                "chunks must hold whole vectors");
  RowMatrix<T> kt;
  if (direct) {  // d x nk_pad: one contiguous array per coordinate, zero padding
    kt.setZero(d, nk_pad);
    kt.leftCols(nk) = keys.transpose();
  }
  const DirectFn<T> kernel = direct_kernel<T>(d);
  const std::int64_t blocks = (rows + row_block - 1) / row_block;
  pool.run(blocks, [&](std::int64_t blk) {
    // Per-thread workspace: grows once, then reused by every pass on this thread.
    thread_local RowMatrix<T> tile;
    const std::int64_t r0 = blk * row_block;
    const std::int64_t br = std::min(row_block, rows - r0);
    T row_max[std::max(RowPassTile::kGemmRowBlock, RowPassTile::kDirectRowBlock)];
    double row_sum[std::max(RowPassTile::kGemmRowBlock, RowPassTile::kDirectRowBlock)];
    for (std::int64_t r = 0; r < br; ++r) {
      row_max[r] = -std::numeric_limits<T>::infinity();
      row_sum[r] = 0;
    }
    constexpr std::int64_t kTileRows =
        std::max(RowPassTile::kGemmRowBlock, RowPassTile::kDirectRowBlock);
    constexpr std::int64_t kTileCols =
        std::max(RowPassTile::kGemmColBlock, RowPassTile::kDirectColBlock);
    if (tile.rows() != kTileRows || tile.cols() != kTileCols) tile.setZero(kTileRows, kTileCols);
    const std::int64_t ld = tile.cols();
    for (std::int64_t c0 = 0; c0 < nk; c0 += col_block) {
      const std::int64_t bc = std::min(col_block, nk - c0);
      const std::int64_t bcp = round_up(bc, W);
      if (direct) {
        T* s = tile.data();
        for (std::int64_t r = 0; r < br; ++r) {
          const T cm =
              kernel(q2.row(r0 + r).data(), kt.data() + c0, nk_pad, b2.data() + c0, bcp, int(d), s);
          fold_chunk<T>(s, bcp, cm, &row_max[r], &row_sum[r]);
        }
      } else {
        Eigen::Map<RowMatrix<T>, 0, Eigen::OuterStride<>> t(tile.data(), br, bc,
                                                            Eigen::OuterStride<>(ld));
        t.noalias() = q2.middleRows(r0, br) * keys.middleRows(c0, bc).transpose();
        for (std::int64_t r = 0; r < br; ++r) {
          T* s = tile.data() + r * ld;
          for (std::int64_t j = bc; j < bcp; ++j) s[j] = T(0);  // padding: bias -inf masks it
          const T cm = biased_max<T>(s, b2.data() + c0, bcp);
          fold_chunk<T>(s, bcp, cm, &row_max[r], &row_sum[r]);
        }
      }
    }
    for (std::int64_t r = 0; r < br; ++r) {
      out->max[std::size_t(r0 + r)] = double(row_max[r]) * kLn2;
      out->sum[std::size_t(r0 + r)] = row_sum[r];
    }
  });
}

// With value columns: scores from a GEMM tile, exp in T, A from a second GEMM.
template <class T>
void value_pass(ThreadPool& pool, const ConstMap<T>& queries, const ConstMap<T>& keys,
                const Eigen::Map<const Vec<T>>& bias, T scale, const ConstMap<T>& values,
                RowPassResult* out) {
  using Tile = RowPassTile;
  const std::int64_t rows = queries.rows(), nk = keys.rows(), K = values.cols();
  out->max.assign(std::size_t(rows), -std::numeric_limits<double>::infinity());
  out->sum.assign(std::size_t(rows), 0.0);
  out->accum.assign(std::size_t(rows * K), 0.0);
  out->K = K;
  Eigen::Map<Vec<double>> omax(out->max.data(), rows), osum(out->sum.data(), rows);
  Eigen::Map<RowMatrix<double>> oacc(out->accum.data(), rows, K);
  const std::int64_t blocks = (rows + Tile::kValueRowBlock - 1) / Tile::kValueRowBlock;
  pool.run(blocks, [&](std::int64_t blk) {
    using Array = Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    thread_local Array s_tile;
    thread_local RowMatrix<T> acc_tile;
    const std::int64_t r0 = blk * Tile::kValueRowBlock;
    const std::int64_t br = std::min(Tile::kValueRowBlock, rows - r0);
    for (std::int64_t c0 = 0; c0 < nk; c0 += Tile::kValueColBlock) {
      const std::int64_t bc = std::min(Tile::kValueColBlock, nk - c0);
      s_tile.resize(br, bc);
      s_tile.matrix().noalias() = queries.middleRows(r0, br) * keys.middleRows(c0, bc).transpose();
      s_tile = s_tile * scale;
      s_tile.rowwise() += bias.segment(c0, bc).transpose().array();
      for (std::int64_t r = 0; r < br; ++r) {
        const T tile_max = s_tile.row(r).maxCoeff();
        const double old_max = omax[r0 + r];
        const double new_max = std::max(old_max, double(tile_max));
        // Guard: a row whose keys are all masked so far has max -inf; exp(-inf - -inf) would be
        // NaN, so such tiles contribute nothing and leave the row untouched.
        if (new_max == -std::numeric_limits<double>::infinity()) {
          s_tile.row(r).setZero();
          continue;
        }
        const double rescale = std::exp(old_max - new_max);  // 0 when old_max = -inf
        // exp(s - M_new) in T; masked keys (s = -inf) give exactly 0.
        s_tile.row(r) = (s_tile.row(r) - T(new_max)).exp();
        for (std::int64_t j = 0; j < bc; ++j)
          if (bias[c0 + j] == -std::numeric_limits<T>::infinity()) s_tile(r, j) = T(0);
        osum[r0 + r] = osum[r0 + r] * rescale + double(s_tile.row(r).sum());
        omax[r0 + r] = new_max;
        oacc.row(r0 + r) *= rescale;
      }
      acc_tile.noalias() = s_tile.matrix() * values.middleRows(c0, bc);
      oacc.middleRows(r0, br) += acc_tile.template cast<double>();
    }
  });
}

}  // namespace

template <class T>
void row_pass(ThreadPool& pool, MatrixRef<T> queries, MatrixRef<T> keys, const T* bias, T scale,
              MatrixRef<T> values, RowPassResult* out) {
  const ConstMap<T> q(queries.data, queries.rows, queries.cols);
  const ConstMap<T> k(keys.data, keys.rows, keys.cols);
  const Eigen::Map<const Vec<T>> b(bias, keys.rows);
  if (values.cols == 0) {
    lse_pass(pool, q, k, b, scale, out);
  } else {
    const ConstMap<T> v(values.data, values.rows, values.cols);
    value_pass(pool, q, k, b, scale, v, out);
  }
}

template <class T>
void exp2_nonpos_simd(const T* t, std::int64_t count, T* out) {
  constexpr std::int64_t W = Simd<T>::W;
  std::int64_t i = 0;
  for (; i + W <= count; i += W) store<T>(out + i, exp2_nonpos_v<T>(load<T>(t + i)));
  if (i < count) {  // the tail through a padded vector, so every element takes the SIMD path
    T buf[W];
    for (std::int64_t l = 0; l < W; ++l) buf[l] = i + l < count ? t[i + l] : T(0);
    store<T>(buf, exp2_nonpos_v<T>(load<T>(buf)));
    for (std::int64_t l = 0; i + l < count; ++l) out[i + l] = buf[l];
  }
}

template void exp2_nonpos_simd(const float*, std::int64_t, float*);
template void exp2_nonpos_simd(const double*, std::int64_t, double*);

template void row_pass(ThreadPool&, MatrixRef<float>, MatrixRef<float>, const float*, float,
                       MatrixRef<float>, RowPassResult*);
template void row_pass(ThreadPool&, MatrixRef<double>, MatrixRef<double>, const double*, double,
                       MatrixRef<double>, RowPassResult*);

}  // namespace kantor::cpu
