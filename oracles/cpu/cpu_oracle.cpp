// CPU point-cloud oracle. Every pass is lib/cpu/row_pass over the centred clouds with the
// shifted-potential bias of docs/numerics.md section 2:
//   f-side scores  s_ij = (2c/eps) <x_i, y_j> + (g_j - c|y_j|^2)/eps + log b_j  [- c_w W[l_i, l_j]/eps]
//   T_f(g)_i       = c|x_i|^2 - eps * LSE_j s_ij
//   log P_ij       = log a_i + (f_i - c|x_i|^2)/eps + s_ij
// and the g side with the roles of the clouds swapped (and W transposed). The label term and the
// block lists are row_pass policies (lib/cpu/row_pass.hpp); the per-row dual math is
// lib/core/online_lse.hpp, shared with the CUDA engine.
#include "oracles/cpu/cpu_oracle.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "kantor/error.hpp"
#include "lib/core/certificate.hpp"
#include "lib/core/online_lse.hpp"
#include "lib/runtime/context_impl.hpp"
#include "lib/costs/problem_data.hpp"
#include "lib/cpu/row_pass.hpp"
#include "oracles/cpu/cpu_vector_ops.hpp"
#include "oracles/oracle_base.hpp"

namespace kantor {
namespace {

using cpu::RowMatrix;
using cpu::RowPassResult;
using cpu::Vec;

/// The fp32 certificate's arithmetic for one row against one chunk of kC keys
/// (CpuOracle::certify_side_fast): the terms w_j 2^(z_j) and the row's running maximum of z and
/// its sums of terms, of terms times cost and of terms times potentials. It reads the row's d
/// coordinates x, the chunk's staged keys (the caller's stack arrays) and the row's running
/// maximum *zmax, and writes *zmax and the three sums. Left out of the sanitizers'
/// instrumentation: with -fsanitize=address or undefined GCC 12 vectorizes none of these loops,
/// and this one function took 80-86% of the multiscale tests' time in the sanitizer build
/// (docs/testing.md); its caller, which computes every index into the oracle's arrays, stays
/// instrumented. Without a sanitizer the attribute changes nothing (the function inlines as
/// before).
template <int kC>
__attribute__((no_sanitize("address", "undefined"))) inline void fast_certificate_chunk_row(
    const float* __restrict__ x, int d, float fi, float cf, float lf,
    const float (*__restrict__ ek)[kC], const float* __restrict__ gk,
    const float* __restrict__ wk32, float* zmax, float* ts_out, float* tc_out,
    float* tp_out) {
  alignas(64) float sq[kC], term[kC], ss[kC], zz[kC];
  for (int jj = 0; jj < kC; ++jj) sq[jj] = 0.0f;
  for (int a = 0; a < d; ++a)
    for (int jj = 0; jj < kC; ++jj) {
      const float df = x[a] - ek[a][jj];
      sq[jj] += df * df;
    }
  // Elementwise loops (the compiler vectorizes them), then lane-wise max and sums (no
  // reassociation needed).
  for (int jj = 0; jj < kC; ++jj) {
    const float s2 = fi + gk[jj];
    const float z2 = (s2 - cf * sq[jj]) * lf;
    // std::min(127, std::max(-126, z2)) written out (the std ones would be calls here).
    const float lo = -126.0f < z2 ? z2 : -126.0f;
    const float e = certificate_exp2f(lo < 127.0f ? lo : 127.0f);
    // Below the range 0, above it inf, NaN stays NaN (a non-finite certificate).
    const float ev = z2 < -126.0f ? 0.0f : (z2 > 127.0f ? INFINITY : (z2 == z2 ? e : z2));
    zz[jj] = z2;
    term[jj] = wk32[jj] * ev;
    ss[jj] = s2;
  }
  constexpr int kL = 16;
  float mx[kL], su[kL] = {}, sc[kL] = {}, sp[kL] = {};
  for (int l = 0; l < kL; ++l) mx[l] = zz[l];
  for (int jb = 0; jb < kC; jb += kL)
    for (int l = 0; l < kL; ++l) {
      const int jj = jb + l;
      mx[l] = zz[jj] > mx[l] ? zz[jj] : mx[l];
      su[l] += term[jj];
      sc[l] += term[jj] * (cf * sq[jj]);
      sp[l] += term[jj] * ss[jj];
    }
  float zm = *zmax, ts = 0, tc = 0, tp = 0;
  for (int l = 0; l < kL; ++l) {
    zm = mx[l] > zm ? mx[l] : zm;
    ts += su[l];
    tc += sc[l];
    tp += sp[l];
  }
  *zmax = zm;
  *ts_out = ts;
  *tc_out = tc;
  *tp_out = tp;
}

template <class T>
class CpuOracle final : public OracleBase<T> {
  using Base = OracleBase<T>;
  using Base::dim;
  using Base::m;
  using Base::n;

 public:
  CpuOracle(const Context& ctx, const PreparedProblem<T>& prep, Precision precision)
      : Base(prep, precision, BlockShape{kRowTile, kKeyTile}),
        pool_(*ctx.impl().pool),
        precision_(precision),
        c_(prep.cost_scale) {
    x_ = Eigen::Map<const RowMatrix<T>>(prep.x.data(), prep.n, prep.d);
    y_ = Eigen::Map<const RowMatrix<T>>(prep.y_cloud().data(), prep.m, prep.d);
    center_ = Eigen::Map<const Vec<double>>(prep.center.data(), prep.d);
    a_ = Eigen::Map<const Vec<T>>(prep.a.data(), prep.n);
    b_ = Eigen::Map<const Vec<T>>(prep.b.data(), prep.m);
    const T c = T(c_);
    xn_ = c * x_.rowwise().squaredNorm();
    yn_ = c * y_.rowwise().squaredNorm();
    la_ = Eigen::Map<const Vec<T>>(prep.la.data(), prep.n);
    lb_ = Eigen::Map<const Vec<T>>(prep.lb.data(), prep.m);
    tn_.resize(x_.rows());
    tm_.resize(y_.rows());
    labels_[0] = prep.labels_x;
    labels_[1] = prep.labels_y;
    if (prep.classes > 0) {
      const std::int64_t L = prep.classes;
      pair_[0] = prep.pair;
      pair_[1].resize(prep.pair.size());
      for (std::int64_t r = 0; r < L; ++r)
        for (std::int64_t k = 0; k < L; ++k)
          pair_[1][std::size_t(k * L + r)] = prep.pair[std::size_t(r * L + k)];
    }
    x_ref_.assign(prep.x_ref.begin(), prep.x_ref.end());
    y_ref_.assign(prep.y_reference().begin(), prep.y_reference().end());
    a_ref_.assign(prep.a_ref.begin(), prep.a_ref.end());
    b_ref_.assign(prep.b_ref.begin(), prep.b_ref.end());
  }

  MemorySpace memory_space() const override { return MemorySpace::kHost; }
  std::string description() const override {
    std::ostringstream os;
    using Tile = cpu::RowPassTile;
    const bool direct = this->dim() <= Tile::kMaxDirectDim;
    os << "cpu lse row-pass " << (direct ? "direct-fma " : "gemm ")
       << (direct ? Tile::kDirectRowBlock : Tile::kGemmRowBlock) << "x"
       << (direct ? Tile::kDirectColBlock : Tile::kGemmColBlock) << " exp2 "
       << cpu::to_string(cpu::row_pass_best_isa()) << " " << to_string(precision_) << ", " << this->cost_kind() << " cost"
       << (this->block_list(0) || this->block_list(1) ? ", block-list schedule" : "") << ", "
       << pool_.size() << " threads";
    return os.str();
  }
  const T* a() const override { return a_.data(); }
  const T* b() const override { return b_.data(); }

  void relaxed_update(int side, T eps, T w, const T* other, T* pot, double* err) override {
    this->check_update_side(side);
    Vec<T>& fresh = side == 0 ? tn_ : tm_;
    lse_side(eps, /*f_side=*/side == 0, other, fresh.data());
    finish_update(eps, side, side == 0 ? a_ : b_, fresh, pot, err, w);
  }
  void symmetric_step(T eps, T w, T* f, T* g, double* err) override {
    // (Self-problems from f = g take one pass per step in the solver, for both engines:
    // solvers/sinkhorn.cpp, run_sinkhorn's one_side.)
    lse_side(eps, true, g, tn_.data());   // T_f(g_old)
    lse_side(eps, false, f, tm_.data());  // T_g(f_old)
    if (err) *err = side_error(eps, 0, a_, f, tn_) + side_error(eps, 1, b_, g, tm_);
    for (std::int64_t i = 0; i < n(); ++i) f[i] = (T(1) - w) * f[i] + w * tn_[i];
    for (std::int64_t j = 0; j < m(); ++j) g[j] = (T(1) - w) * g[j] + w * tm_[j];
  }

  void apply(T eps, const T* f, const T* g, const T* v, T* out) override {
    RowMatrix<T> values = Eigen::Map<const Vec<T>>(v, m());
    apply_side(eps, true, f, g, values, out, 1);
  }
  void apply_t(T eps, const T* f, const T* g, const T* u, T* out) override {
    RowMatrix<T> values = Eigen::Map<const Vec<T>>(u, n());
    apply_side(eps, false, f, g, values, out, 1);
  }
  void apply_mat(T eps, const T* f, const T* g, MatrixView<const T> V, MatrixView<T> out,
                 T* row_mass) override {
    if (V.rows != m() || out.rows != n() || out.cols != V.cols)
      throw InvalidArgument("apply_mat: V must be m x k and out n x k");
    RowMatrix<T> values(V.rows, V.cols);
    for (std::int64_t j = 0; j < V.rows; ++j)
      for (std::int64_t k = 0; k < V.cols; ++k) values(j, k) = V(j, k);
    std::vector<T> tmp(std::size_t(n() * V.cols));
    apply_side(eps, true, f, g, values, tmp.data(), V.cols, row_mass);
    for (std::int64_t i = 0; i < n(); ++i)
      for (std::int64_t k = 0; k < V.cols; ++k) out(i, k) = tmp[std::size_t(i * V.cols + k)];
  }
  void apply_mat_t(T eps, const T* f, const T* g, MatrixView<const T> U, MatrixView<T> out,
                   T* col_mass) override {
    if (U.rows != n() || out.rows != m() || out.cols != U.cols)
      throw InvalidArgument("apply_mat_t: U must be n x k and out m x k");
    RowMatrix<T> values(U.rows, U.cols);
    for (std::int64_t i = 0; i < U.rows; ++i)
      for (std::int64_t k = 0; k < U.cols; ++k) values(i, k) = U(i, k);
    std::vector<T> tmp(std::size_t(m() * U.cols));
    apply_side(eps, false, f, g, values, tmp.data(), U.cols, col_mass);
    for (std::int64_t j = 0; j < m(); ++j)
      for (std::int64_t k = 0; k < U.cols; ++k) out(j, k) = tmp[std::size_t(j * U.cols + k)];
  }
  double cost_scale() const override { return c_; }
  MatrixView<const T> points(int side) const override {
    const RowMatrix<T>& p = side == 0 ? x_ : y_;
    return {p.data(), p.rows(), p.cols(), p.cols(), MemorySpace::kHost};
  }
  VectorOps<T>& ops() override { return ops_; }

  void barycentric_map(T eps, const T* f, const T* g, MatrixView<T> out) override {
    this->require_sqeuclidean("barycentric_map");
    (void)f;  // the map is a ratio of sums over j: the row factor exp(f_i/eps) cancels
    const std::int64_t d = dim();
    RowMatrix<T> values(m(), d + 1);
    values.col(0).setOnes();
    values.rightCols(d) = y_;
    RowPassResult r;
    const Vec<T> bias = f_side_bias(eps, g);
    Policy pol;
    const std::vector<T> pt = policy(0, eps, &pol);
    cpu::row_pass(pool_, cpu::ref(x_), cpu::ref(y_), bias.data(), T(2 * c_) / eps, cpu::ref(values),
                  &r, pol);
    for (std::int64_t i = 0; i < n(); ++i)
      for (std::int64_t k = 0; k < d; ++k)
        out(i, k) = T(r.acc(i, 1 + k) / r.acc(i, 0) + center_[k]);
  }

  void dual_value(const T* f, const T* g, double* out) override {
    const double ra = this->rho_inv(0), rb = this->rho_inv(1);
    double s = 0;
    for (std::int64_t i = 0; i < n(); ++i) s += double(a_[i]) * dual_term(double(f[i]), ra);
    for (std::int64_t j = 0; j < m(); ++j) s += double(b_[j]) * dual_term(double(g[j]), rb);
    out[0] = s;
  }

  void plan_statistics(T eps, const T* f, const T* g, double* out) override {
    // Values [1, g_j, c|y_j|^2, y_j (, one-hot l_j)]: sum_j P_ij C_ij = c|x_i|^2 P1_i + (P yn)_i -
    // 2c <x_i, (PY)_i> (+ sum_k (P onehot)_ik c_w W[l_i, k] for a label-augmented cost).
    const std::int64_t d = dim(), L = this->classes_;
    RowMatrix<T> values = RowMatrix<T>::Zero(m(), 3 + d + L);
    values.col(0).setOnes();
    values.col(1) = Eigen::Map<const Vec<T>>(g, m());
    values.col(2) = yn_;
    values.middleCols(3, d) = y_;
    for (std::int64_t j = 0; j < m() && L > 0; ++j) values(j, 3 + d + labels_[1][std::size_t(j)]) = T(1);
    RowPassResult r;
    const Vec<T> bias = f_side_bias(eps, g);
    Policy pol;
    const std::vector<T> pt = policy(0, eps, &pol);
    cpu::row_pass(pool_, cpu::ref(x_), cpu::ref(y_), bias.data(), T(2 * c_) / eps, cpu::ref(values),
                  &r, pol);
    double mass = 0, cost = 0, fg = 0;
    for (std::int64_t i = 0; i < n(); ++i) {
      const double pref = row_prefactor(eps, i, f[i], r.max[i]);
      if (pref == 0) continue;
      const double mi = pref * r.acc(i, 0);
      double xy = 0;
      for (std::int64_t k = 0; k < d; ++k) xy += double(x_(i, k)) * r.acc(i, 3 + k);
      double pair = 0;
      for (std::int64_t k = 0; k < L; ++k)
        pair += pair_[0][std::size_t(labels_[0][std::size_t(i)] * L + k)] * r.acc(i, 3 + d + k);
      mass += mi;
      cost += double(xn_[i]) * mi + pref * r.acc(i, 2) - 2 * c_ * pref * xy + pref * pair;
      fg += double(f[i]) * mi + pref * r.acc(i, 1);
    }
    out[0] = mass;
    out[1] = cost;
    out[2] = fg;
  }

  void marginal_error(T eps, const T* f, const T* g, double* out) override {
    lse_side(eps, true, g, tn_.data());
    lse_side(eps, false, f, tm_.data());
    out[0] = side_error(eps, 0, a_, f, tn_) + side_error(eps, 1, b_, g, tm_);
  }

  void atom_pair_maxima(const T* f, const T* g, std::int64_t atom,
                        const std::vector<std::int32_t>& pairs, double stop_at,
                        std::vector<double>* out) override {
    this->check_atom_pairs(atom, pairs);
    const std::int64_t K = std::int64_t(pairs.size() / 2), d = dim();
    out->assign(std::size_t(K), 0.0);
    const double cs = maxima_cost_scale(c_, int(d));
    const double ninf = -std::numeric_limits<double>::infinity();
    constexpr std::int64_t kChunk = 64;
    pool_.run((K + kChunk - 1) / kChunk, [&](std::int64_t chunk) {
      // The key atom's coordinates by axis (the inner loop runs over keys: it vectorizes).
      std::vector<double> yt(static_cast<std::size_t>(d * atom)), gk(static_cast<std::size_t>(atom)),
          sq(static_cast<std::size_t>(atom));
      for (std::int64_t k = chunk * kChunk; k < std::min(K, (chunk + 1) * kChunk); ++k) {
        const std::int64_t I = pairs[std::size_t(2 * k)], J = pairs[std::size_t(2 * k + 1)];
        const std::int64_t i0 = I * atom, i1 = std::min(n(), i0 + atom);
        const std::int64_t j0 = J * atom, len = std::min(m(), j0 + atom) - j0;
        double G = 0;
        for (std::int64_t jj = 0; jj < len; ++jj) {
          const bool in = b_ref_[std::size_t(j0 + jj)] > 0;
          for (std::int64_t a = 0; a < d; ++a)
            yt[std::size_t(a * atom + jj)] = y_ref_[std::size_t((j0 + jj) * d + a)];
          gk[std::size_t(jj)] = in ? double(g[j0 + jj]) : ninf;
          if (in) G = std::max(G, std::fabs(double(g[j0 + jj])));
        }
        double best = ninf, F = 0;
        for (std::int64_t i = i0; i < i1; ++i) {
          if (!(a_ref_[std::size_t(i)] > 0)) continue;
          const double fi = double(f[i]);
          F = std::max(F, std::fabs(fi));
          for (std::int64_t jj = 0; jj < len; ++jj) sq[std::size_t(jj)] = 0;
          for (std::int64_t a = 0; a < d; ++a) {
            const double xa = x_ref_[std::size_t(i * d + a)];
            const double* ya = yt.data() + a * atom;
            for (std::int64_t jj = 0; jj < len; ++jj) {
              const double t = xa - ya[jj];
              sq[std::size_t(jj)] += t * t;
            }
          }
          double row = ninf;
          for (std::int64_t jj = 0; jj < len; ++jj)
            row = std::max(row, (fi + gk[std::size_t(jj)]) - cs * sq[std::size_t(jj)]);
          best = std::max(best, row);
          if (best + maxima_allowance(F + G) >= stop_at) break;  // decided: at or above stop_at
        }
        (*out)[std::size_t(k)] = best == ninf ? ninf : best + maxima_allowance(F + G);
      }
    });
  }

  Certificate certify_pass(double eps, const T* f, const T* g, bool kept, bool fp32, T* f_next,
                           double rows_stop, const CertificateSide* given) override {
    const BlockList* l0 = kept ? this->block_list(0) : nullptr;
    const BlockList* l1 = kept ? this->block_list(1) : nullptr;
    if (!fp32) f_next = nullptr, given = nullptr;  // the float64 sides write no update
    const CertificateSide rows =
        fp32 ? certify_side_fast(0, eps, x_ref_, y_ref_, a_ref_, b_ref_, f, g, n(), m(), l0, f_next)
             : certify_side(0, eps, x_ref_, y_ref_, a_ref_, b_ref_, f, g, n(), m(), l0);
    const bool next = f_next && this->next_usable(rows);
    if (rows.error > rows_stop) return this->rows_only_certificate(rows, next);
    const CertificateSide cols =
        given  ? *given
        : fp32 ? certify_side_fast(1, eps, y_ref_, x_ref_, b_ref_, a_ref_, g, f, m(), n(), l1)
               : certify_side(1, eps, y_ref_, x_ref_, b_ref_, a_ref_, g, f, m(), n(), l1);
    Certificate c = certificate_bound(rows, cols, n(), m(), dim(), eps);
    c.next_written = next;
    return c;
  }
  void certified_pass(int side, double eps, const T* f, const T* g, double relax, T* next,
                      CertificateSide* old_pair, CertificateSide* new_pair) override {
    *new_pair = CertificateSide();
    // Guard: the fp32 side's domain (the *_certified_applies say it holds).
    if (!this->fp32_certificate_applies()) {
      *old_pair = CertificateSide();
      new_pair->extra = HUGE_VAL;
      return;
    }
    *old_pair = side == 0 ? certify_side_fast(0, eps, x_ref_, y_ref_, a_ref_, b_ref_, f, g, n(),
                                              m(), this->block_list(0), next, relax, new_pair)
                          : certify_side_fast(1, eps, y_ref_, x_ref_, b_ref_, a_ref_, g, f, m(),
                                              n(), this->block_list(1), next, relax, new_pair);
  }

 private:
  // One side of the fp32 certificate (the model: lib/core/certificate.hpp, fast_row_slack, with
  // K_S = 8.31 (no FMA assumed), K_T = 100: exp2 32 u, the weight and the product 2 u, the float
  // sum of 64 terms 63 u). Row blocks of the list's row tile (128 without a list) share the
  // anchor, the first row of the block; each chunk of <= 64 keys is converted once per block.
  CertificateSide certify_side_fast(int side, double eps, const std::vector<double>& q,
                                    const std::vector<double>& k, const std::vector<double>& wq,
                                    const std::vector<double>& wk, const T* pq, const T* pk,
                                    std::int64_t nq, std::int64_t nk, const BlockList* list,
                                    T* next = nullptr, double relax = 1.0,
                                    CertificateSide* next_side = nullptr) {
    constexpr int kC = int(kCertChunk), kMaxD = kFastCertificateMaxDim;
    constexpr FastCertificateModel kModel{8.31, 100.0, 0x1.0p-125};
    const int d = int(dim());
    const std::int64_t block = list ? list->row_tile : 128;
    const std::int64_t blocks = (nq + block - 1) / block;
    const float cf = float(c_), lf = float(1.4426950408889634 / eps);
    double key_mass = 0;
    for (const double w : wk) key_mass += w;
    const double rho_inv = this->rho_inv(side);
    std::vector<CertificateSide> part(static_cast<std::size_t>(blocks)),
        next_part(static_cast<std::size_t>(next_side ? blocks : 0));
    pool_.run(blocks, [&](std::int64_t blk) {
      const std::int64_t i0 = blk * block, i1 = std::min(nq, i0 + block);
      const std::int64_t rows = i1 - i0;
      double o[kMaxD] = {};
      for (int a = 0; a < d; ++a) o[a] = q[std::size_t(i0 * d + a)];
      // The block's rows relative to o, and their largest |coordinate| per axis.
      std::vector<float> xi(std::size_t(rows * d));
      std::vector<double> sum(std::size_t(rows), 0.0), cost(std::size_t(rows), 0.0),
          pot(std::size_t(rows), 0.0);
      std::vector<double> weighted(std::size_t(rows), 0.0);
      std::vector<float> zmax(std::size_t(rows), -std::numeric_limits<float>::infinity());
      float ri[kMaxD] = {};
      for (std::int64_t r = 0; r < rows; ++r)
        for (int a = 0; a < d; ++a) {
          const float v = float(q[std::size_t((i0 + r) * d + a)] - o[a]);
          xi[std::size_t(r * d + a)] = v;
          if (wq[std::size_t(i0 + r)] > 0) ri[a] = std::max(ri[a], std::fabs(v));
        }
      double a_max = 0;
      alignas(64) float ek[kMaxD][kC], gk[kC], wk32[kC];
      const std::int64_t tile = list ? blk : 0;
      const std::int64_t r0 = list ? list->run_ptr[std::size_t(tile)] : 0;
      const std::int64_t r1 = list ? list->run_ptr[std::size_t(tile + 1)] : 1;
      for (std::int64_t run = r0; run < r1; ++run) {
        const std::int64_t j0 =
            list ? std::int64_t(list->runs[std::size_t(2 * run)]) * list->key_tile : 0;
        const std::int64_t j1 =
            list ? std::min(nk, std::int64_t(list->runs[std::size_t(2 * run + 1)]) * list->key_tile)
                 : nk;
        for (std::int64_t j = j0; j < j1; j += kC) {
          const int len = int(std::min<std::int64_t>(kC, j1 - j));
          float rj[kMaxD] = {};
          for (int jj = 0; jj < kC; ++jj) {
            const bool in = jj < len && wk[std::size_t(j + jj)] > 0;
            for (int a = 0; a < d; ++a) {
              const float v = in ? float(k[std::size_t((j + jj) * d + a)] - o[a]) : 0.0f;
              ek[a][jj] = v;
              rj[a] = std::max(rj[a], std::fabs(v));
            }
            // Masked or padding keys: 0 * 2^-inf = 0, whatever their potential.
            gk[jj] = in ? float(pk[j + jj]) : -3.0e38f;
            wk32[jj] = in ? float(wk[std::size_t(j + jj)]) : 0.0f;
          }
          double st = 0;
          for (int a = 0; a < d; ++a) {
            const double e = double(ri[a]) + double(rj[a]);
            st += e * e;
          }
          const double at = fast_tile_exposure(kModel, d, c_, eps, st);
          a_max = std::max(a_max, at);
          for (std::int64_t r = 0; r < rows; ++r) {
            if (!(wq[std::size_t(i0 + r)] > 0)) continue;
            const float fi = float(pq[i0 + r]);
            float ts, tc, tp;
            fast_certificate_chunk_row<kC>(xi.data() + r * d, d, fi, cf, lf, ek, gk, wk32,
                                           &zmax[std::size_t(r)], &ts, &tc, &tp);
            sum[std::size_t(r)] += double(ts);
            weighted[std::size_t(r)] += double(ts) * at;
            cost[std::size_t(r)] += double(tc);
            pot[std::size_t(r)] += double(tp);
          }
        }
      }
      CertificateSide s;
      for (std::int64_t r = 0; r < rows; ++r) {
        const double w = wq[std::size_t(i0 + r)];
        if (!(w > 0)) continue;
        CertificateRow row;
        row.sum = sum[std::size_t(r)];
        row.cost = cost[std::size_t(r)];
        row.pot = pot[std::size_t(r)];
        certificate_row(w, double(pq[i0 + r]), rho_inv, row, &s);
        const double slack = fast_row_slack(kModel, w, row.sum, weighted[std::size_t(r)], a_max,
                                            double(zmax[std::size_t(r)]), key_mass, double(nk));
        s.extra += slack;
        if (next)
          s.extra += next_update(double(pq[i0 + r]), row.sum, eps, relax, w, slack, next + i0 + r,
                                 next_side ? &next_part[std::size_t(blk)] : nullptr, row.cost,
                                 row.pot);
      }
      part[std::size_t(blk)] = s;
    });
    auto fold = [](const std::vector<CertificateSide>& parts) {
      CertificateSide total;
      for (const CertificateSide& s : parts) {
        total.error += s.error;
        total.mass += s.mass;
        total.cost += s.cost;
        total.potentials += s.potentials;
        total.weight += s.weight;
        total.target_exposure += s.target_exposure;
        total.extra += s.extra;
      }
      return total;
    };
    if (next_side) *next_side = fold(next_part);
    return fold(part);
  }

  static constexpr std::int64_t kCertChunk = 64;
  // Keys [j, j + len) of one row (len <= kCertChunk) into its certificate sums: the arithmetic
  // of certificate_pair (lib/core/certificate.hpp) for every pair, in branch-free loops over the
  // keys (squared distances from the keys' coordinates by dimension kt, then z, t and the cost,
  // then exp by certificate_exp; exponents outside its range, and non-finite ones, take std::exp
  // in a scalar fix-up), summed in 8 lanes per quantity. Masked keys (weight 0) and the pairs the
  // skip rule drops contribute exactly nothing, whatever their potentials.
  void certify_keys(const double* qi, std::int64_t d, double pi, double inv_eps, const double* kt,
                    std::int64_t nk, std::int64_t j, std::int64_t len, const T* pk,
                    const double* wk, const double* pair_row, const std::int32_t* key_labels,
                    CertificateRow* row) const {
    constexpr int kC = int(kCertChunk), kLanes = 8;
    alignas(64) double sq[kC], pr[kC], zz[kC], ee[kC], ww[kC], tt[kC], cc[kC], po[kC];
    for (int jj = 0; jj < kC; ++jj) sq[jj] = 0;
    for (std::int64_t c = 0; c < d; ++c) {
      const double x = qi[c];
      const double* kc = kt + c * nk + j;
      for (int jj = 0; jj < int(len); ++jj) {
        const double diff = x - kc[jj];
        sq[jj] += diff * diff;
      }
    }
    for (int jj = 0; jj < kC; ++jj)
      pr[jj] = pair_row && jj < len ? pair_row[key_labels[j + jj]] : 0.0;
    int kept = 0;
    for (int jj = 0; jj < kC; ++jj) {
      const bool in = jj < len;
      const double pot = in ? double(pk[j + jj]) : 0.0;
      const double w = in ? wk[j + jj] : 0.0;
      const double cost = c_ * sq[jj] + pr[jj];
      const double z = ((pi + pot) - cost) * inv_eps;
      const double t = std::fabs(pi) + std::fabs(pot) + cost;
      const bool keep = w > 0 && !(z < kCertificateSkipZ && t * inv_eps < kCertificateSkipT);
      kept += keep ? 1 : 0;
      zz[jj] = z;
      ww[jj] = keep ? w : 0.0;
      tt[jj] = keep ? t : 0.0;
      cc[jj] = keep ? cost : 0.0;
      po[jj] = keep ? pi + pot : 0.0;
    }
    if (kept == 0) return;  // every pair skipped or masked: nothing to add (max_t included)
    for (int jj = 0; jj < kC; ++jj) {
      const double z = zz[jj];
      ee[jj] = certificate_exp(z < kCertificateExpMin ? kCertificateExpMin
                                                      : (z > kCertificateExpMax ? kCertificateExpMax : z));
    }
    for (int jj = 0; jj < kC; ++jj)  // outside certificate_exp's range, NaN included
      if (ww[jj] > 0 && !(zz[jj] >= kCertificateExpMin && zz[jj] <= kCertificateExpMax))
        ee[jj] = std::exp(zz[jj]);
    double su[kLanes] = {}, st[kLanes] = {}, sc[kLanes] = {}, sp[kLanes] = {}, mx[kLanes] = {};
    for (int jb = 0; jb < kC; jb += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        const int jj = jb + l;
        const double p = ww[jj] > 0 ? ww[jj] * ee[jj] : 0.0;
        su[l] += p;
        st[l] += p * tt[jj];
        sc[l] += p * cc[jj];
        sp[l] += p * po[jj];
        mx[l] = tt[jj] > mx[l] ? tt[jj] : mx[l];
      }
    for (int l = 0; l < kLanes; ++l) {
      row->sum += su[l];
      row->t += st[l];
      row->cost += sc[l];
      row->pot += sp[l];
      row->max_t = mx[l] > row->max_t ? mx[l] : row->max_t;
    }
  }

  // One side of the certificate: rows of q (weights wq, potentials pq) against all keys k, in
  // double with exact differences. Row blocks are the parallel tasks; their partial sums are
  // added in block order, so the result does not depend on the thread count. The keys of a row
  // go through certify_keys in chunks (the per-pair arithmetic of certificate_pair in loops
  // the compiler vectorizes).
  CertificateSide certify_side(int side, double eps, const std::vector<double>& q,
                               const std::vector<double>& k, const std::vector<double>& wq,
                               const std::vector<double>& wk, const T* pq, const T* pk,
                               std::int64_t nq, std::int64_t nk,
                               const BlockList* list = nullptr) {
    constexpr std::int64_t kBlock = 64;
    const std::int64_t d = dim(), blocks = (nq + kBlock - 1) / kBlock, L = this->classes_;
    const double inv_eps = 1.0 / eps, rho_inv = this->rho_inv(side);
    // The keys' coordinates by dimension (structure of arrays: contiguous in the key index).
    std::vector<double> kt(std::size_t(nk * d));
    for (std::int64_t j = 0; j < nk; ++j)
      for (std::int64_t c = 0; c < d; ++c)
        kt[std::size_t(c * nk + j)] = k[std::size_t(j * d + c)];
    const std::int32_t* key_labels = L > 0 ? labels_[1 - side].data() : nullptr;
    std::vector<CertificateSide> part(static_cast<std::size_t>(blocks));
    pool_.run(blocks, [&](std::int64_t blk) {
      CertificateSide s;
      for (std::int64_t i = blk * kBlock; i < std::min(nq, (blk + 1) * kBlock); ++i) {
        if (!(wq[std::size_t(i)] > 0)) continue;  // a masked row: r_i = 0 = w_i exactly
        const double* qi = q.data() + i * d;
        const double pi = double(pq[i]);
        CertificateRow row;
        const double* pair_row =
            L > 0 ? pair_[side].data() + std::int64_t(labels_[side][std::size_t(i)]) * L : nullptr;
        // The keys of row i: all of them, or the runs of its row tile in the block list.
        const std::int64_t tile = list ? i / list->row_tile : 0;
        const std::int64_t r0 = list ? list->run_ptr[std::size_t(tile)] : 0;
        const std::int64_t r1 = list ? list->run_ptr[std::size_t(tile + 1)] : 1;
        for (std::int64_t r = r0; r < r1; ++r) {
          const std::int64_t j0 = list ? std::int64_t(list->runs[std::size_t(2 * r)]) * list->key_tile : 0;
          const std::int64_t j1 =
              list ? std::min(nk, std::int64_t(list->runs[std::size_t(2 * r + 1)]) * list->key_tile)
                   : nk;
          for (std::int64_t j = j0; j < j1; j += kCertChunk)
            certify_keys(qi, d, pi, inv_eps, kt.data(), nk, j, std::min(kCertChunk, j1 - j), pk,
                         wk.data(), pair_row, key_labels, &row);
        }
        certificate_row(wq[std::size_t(i)], pi, rho_inv, row, &s);
      }
      part[std::size_t(blk)] = s;
    });
    CertificateSide total;
    for (const CertificateSide& s : part) {
      total.error += s.error;
      total.mass += s.mass;
      total.weighted_t += s.weighted_t;
      total.max_t = std::max(total.max_t, s.max_t);
      total.cost += s.cost;
      total.potentials += s.potentials;
      total.weight += s.weight;
      total.target_exposure += s.target_exposure;
      if (std::isnan(s.max_t)) total.max_t = s.max_t;
    }
    return total;
  }

  Vec<T> f_side_bias(T eps, const T* g) const {
    return (Eigen::Map<const Vec<T>>(g, m()) - yn_) / eps + lb_;
  }
  Vec<T> g_side_bias(T eps, const T* f) const {
    return (Eigen::Map<const Vec<T>>(f, n()) - xn_) / eps + la_;
  }

  // out = tau T_f(other) (f_side) or tau T_g(other) (tau = 1 for a strict side).
  void lse_side(T eps, bool f_side, const T* other, T* out) {
    const RowMatrix<T>& q = f_side ? x_ : y_;
    const RowMatrix<T>& k = f_side ? y_ : x_;
    const Vec<T>& qn = f_side ? xn_ : yn_;
    const Vec<T> bias = f_side ? f_side_bias(eps, other) : g_side_bias(eps, other);
    Policy pol;
    const std::vector<T> pt = policy(f_side ? 0 : 1, eps, &pol);
    cpu::row_pass(pool_, cpu::ref(q), cpu::ref(k), bias.data(), T(2 * c_) / eps, cpu::ref(empty_),
                  &res_, pol);
    // row_pass reports natural-log maxima: the online state with alpha = log2(e).
    const double tau = damping(this->rho_inv(f_side ? 0 : 1), double(eps));
    for (std::int64_t i = 0; i < q.rows(); ++i)
      out[i] = T(tau * potential_from_lse(double(qn[i]), double(eps),
                                          online_lse(res_.max[i], res_.sum[i], kLog2e)));
  }

  // The residual of side s's rows: |marginal - w|_1 = sum_i w_i |exp((old_i - new_i)/eps) - 1|
  // for a strict side, its KL-relaxed form (residual_term) otherwise; in double.
  double side_error(T eps, int s, const Vec<T>& w, const T* old_pot, const Vec<T>& new_pot) const {
    const double ri = this->rho_inv(s);
    double e = 0;
    for (std::int64_t i = 0; i < w.size(); ++i)
      e += residual_term(double(w[i]), double(old_pot[i]), double(new_pot[i]), double(eps), ri);
    return e;
  }

  using Policy = cpu::RowPassPolicy<T>;
  /// The row_pass policies of side s (0: rows x, 1: rows y) at eps: the block list, and the pair
  /// term -c_w W / eps in score units (returned: the table *pol points into).
  std::vector<T> policy(int s, T eps, Policy* pol) const {
    std::vector<T> table;
    if (const BlockList* l = this->block_list(s)) {
      pol->run_ptr = l->run_ptr.data();
      pol->runs = l->runs.data();
      pol->row_tile = l->row_tile;
      pol->key_tile = l->key_tile;
    }
    if (this->label_cost()) {
      table.resize(pair_[s].size());
      for (std::size_t i = 0; i < table.size(); ++i) table[i] = T(-pair_[s][i] / double(eps));
      pol->row_labels = labels_[s].data();
      pol->key_labels = labels_[1 - s].data();
      pol->pair_table = table.data();
      pol->classes = this->classes_;
    }
    return table;  // moved: the data pointer stays valid in the caller's copy
  }
  void block_lists_changed() override {}

  void finish_update(T eps, int s, const Vec<T>& w, const Vec<T>& fresh, T* pot, double* err,
                     T relax = T(1)) {
    if (err) *err = side_error(eps, s, w, pot, fresh);
    if (relax == T(1)) {
      std::copy(fresh.data(), fresh.data() + fresh.size(), pot);
      return;
    }
    for (Eigen::Index i = 0; i < fresh.size(); ++i)
      pot[i] = T(relaxed(double(pot[i]), double(fresh[i]), double(relax)));
  }

  // exp(log a_i + (f_i - c|x_i|^2)/eps + M_i): the factor turning the pass's row sums into P's
  // (M_i natural-log: alpha = log2(e)).
  double row_prefactor(T eps, std::int64_t i, T fi, double row_max) const {
    return plan_prefactor(double(la_[i]), double(fi), double(xn_[i]), double(eps), row_max, kLog2e);
  }
  double col_prefactor(T eps, std::int64_t j, T gj, double col_max) const {
    return plan_prefactor(double(lb_[j]), double(gj), double(yn_[j]), double(eps), col_max, kLog2e);
  }

  // out = P_side values; mass (if not null) = P_side 1 from the same pass's row sums.
  void apply_side(T eps, bool f_side, const T* f, const T* g, const RowMatrix<T>& values, T* out,
                  std::int64_t K, T* mass = nullptr) {
    RowPassResult r;
    Policy pol;
    const std::vector<T> pt = policy(f_side ? 0 : 1, eps, &pol);
    if (f_side) {
      const Vec<T> bias = f_side_bias(eps, g);
      cpu::row_pass(pool_, cpu::ref(x_), cpu::ref(y_), bias.data(), T(2 * c_) / eps,
                    cpu::ref(values), &r, pol);
      for (std::int64_t i = 0; i < n(); ++i) {
        const double pref = row_prefactor(eps, i, f[i], r.max[i]);
        for (std::int64_t k = 0; k < K; ++k) out[i * K + k] = T(pref * r.acc(i, k));
        if (mass) mass[i] = T(pref * r.sum[i]);
      }
    } else {
      const Vec<T> bias = g_side_bias(eps, f);
      cpu::row_pass(pool_, cpu::ref(y_), cpu::ref(x_), bias.data(), T(2 * c_) / eps,
                    cpu::ref(values), &r, pol);
      for (std::int64_t j = 0; j < m(); ++j) {
        const double pref = col_prefactor(eps, j, g[j], r.max[j]);
        for (std::int64_t k = 0; k < K; ++k) out[j * K + k] = T(pref * r.acc(j, k));
        if (mass) mass[j] = T(pref * r.sum[j]);
      }
    }
  }

  // The CPU block lists use the CUDA engine's tile shape (the pass adapts to any): one list
  // serves both engines.
  static constexpr std::int64_t kRowTile = 128, kKeyTile = 64;
  static constexpr double kLog2e = 1.44269504088896340736;

  cpu::ThreadPool& pool_;
  Precision precision_;
  double c_;
  RowMatrix<T> x_, y_;  // centred clouds
  Vec<double> center_;
  std::vector<std::int32_t> labels_[2];  // labels of x and y (empty: squared-Euclidean)
  std::vector<double> pair_[2];          // c_w W and its transpose
  std::vector<double> x_ref_, y_ref_, a_ref_, b_ref_;  // the certificate's data (uncentred)
  Vec<T> a_, b_, la_, lb_, xn_, yn_;
  Vec<T> tn_, tm_;
  RowMatrix<T> empty_;
  RowPassResult res_;
  CpuVectorOps<T> ops_;
};

}  // namespace

template <class T>
std::unique_ptr<Oracle<T>> make_cpu_oracle(const Context& ctx, const Problem<T>& problem,
                                           Precision precision, bool clouds_checked) {
  return std::make_unique<CpuOracle<T>>(ctx, prepare_problem_data(problem, clouds_checked),
                                        precision);
}

template std::unique_ptr<Oracle<float>> make_cpu_oracle(const Context&, const Problem<float>&,
                                                        Precision, bool);
template std::unique_ptr<Oracle<double>> make_cpu_oracle(const Context&, const Problem<double>&,
                                                         Precision, bool);

}  // namespace kantor
