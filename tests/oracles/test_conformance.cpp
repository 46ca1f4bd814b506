// The conformance suite of the dual oracle: every pass of every engine, over backend x precision
// x cost x key schedule x accumulator, against the float64 dense reference (tests/support),
// which gets the same label term and the same block-list truncation (absent pairs are simply
// missing from a side's sums). CUDA cases skip without a GPU; on a GPU they also run every
// dispatch entry that serves them (ContextOptions::kernel, forced once each).
//
// Accumulators: the LSE updates (update_f, update_g, symmetric_step with its error), the value
// passes (apply: P v, apply_t: P^T u, apply_mat: P V with K = 5, apply_mat_t: P^T U with K = 5
// on strided views), plan statistics (mass, <P,C>, sum P (f + g)) and the certificate (computed
// part, always over every pair). Every case also checks the features the oracle exposes
// (points(side): the centred, unrounded clouds).
#include <gtest/gtest.h>

#include <array>
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <utility>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kantor/buffer.hpp"
#include "kantor/config.hpp"
#include "kantor/context.hpp"
#include "kantor/error.hpp"
#include "kantor/oracle.hpp"
#include "support/compare.hpp"
#include "support/dense_reference.hpp"
#include "support/engine_rounding.hpp"
#include "support/gpu.hpp"
#include "support/random_problems.hpp"

namespace kantor::testing {
namespace {

// kLabels3Sorted: 3 classes, rows and keys ordered by class, so that some 128-row tiles hold one
// label (the class-potential path of the mma.sync kernels) and some several (the policy kernel).
enum class CostKind { kSqEuclidean, kLabels1, kLabels100, kLabels3Sorted };
enum class Schedule { kDense, kRandom, kEmptyRows, kOneTile, kAllTiles };

struct Conf {
  Backend backend;
  Precision precision;
  CostKind cost;
  Schedule schedule;
  std::int64_t n, m, d;
  KernelChoice kernel = KernelChoice::kAuto;
  // One cloud for both sides (y is x's view, labels too; m = n): a divergence's self-problem,
  // whose copies an engine may share between the sides.
  bool same = false;
  // The regime: eps, and the clouds' standard deviation (the y cloud's offset scales with it).
  // The small-eps cases (eps = 0.002 on clouds of deviation 0.2: scores span ~1000 bits per row)
  // exercise the kernels' skips of far keys (the expanded kernel's warp skip of steps 2^64 below
  // the running maxima) against the reference, which skips nothing.
  double eps = 0.5;
  double spread = 1.0;
};

const char* name(CostKind c) {
  return c == CostKind::kSqEuclidean ? "sq"
         : c == CostKind::kLabels1    ? "lab1"
         : c == CostKind::kLabels100  ? "lab100"
                                      : "lab3sorted";
}
const char* name(Schedule s) {
  switch (s) {
    case Schedule::kDense: return "dense";
    case Schedule::kRandom: return "blocks30";
    case Schedule::kEmptyRows: return "emptyrows";
    case Schedule::kOneTile: return "onetile";
    case Schedule::kAllTiles: return "alltiles";
  }
  return "?";
}
std::string case_name(const Conf& c) {
  std::ostringstream os;
  os << to_string(c.backend) << "_" << to_string(c.precision) << "_" << name(c.cost) << "_"
     << name(c.schedule) << "_" << c.n << "x" << c.m << "x" << c.d;
  if (c.kernel != KernelChoice::kAuto) os << "_" << to_string(c.kernel);
  if (c.same) os << "_samecloud";
  if (c.eps != 0.5 || c.spread != 1.0) os << "_smalleps";
  std::string s = os.str();
  for (char& ch : s)
    if (ch == '-') ch = '_';
  return s;
}

// A block list of `rows` queries x `keys` keys with the engine's tile shape.
BlockList make_list(Schedule s, std::int64_t rows, std::int64_t keys, BlockShape shape, Rng& rng) {
  BlockList l;
  l.row_tile = shape.row_tile;
  l.key_tile = shape.key_tile;
  const std::int64_t rt = (rows + l.row_tile - 1) / l.row_tile;
  const std::int32_t kt = std::int32_t((keys + l.key_tile - 1) / l.key_tile);
  std::bernoulli_distribution keep(0.3);
  l.run_ptr.push_back(0);
  for (std::int64_t r = 0; r < rt; ++r) {
    switch (s) {
      case Schedule::kAllTiles:
        l.runs.insert(l.runs.end(), {0, kt});
        break;
      case Schedule::kOneTile:
        l.runs.insert(l.runs.end(), {std::int32_t(r % kt), std::int32_t(r % kt + 1)});
        break;
      case Schedule::kEmptyRows:
        if (r % 2 == 1) l.runs.insert(l.runs.end(), {0, std::min<std::int32_t>(kt, 2)});
        break;
      default:  // random tiles, merged into runs, listed in reverse order; one empty run
        for (std::int32_t t = kt - 1; t >= 0; --t)
          if (keep(rng)) {
            if (!l.runs.empty() && std::int64_t(l.runs.size()) > 2 * l.run_ptr.back() &&
                l.runs[l.runs.size() - 2] == t + 1)
              l.runs[l.runs.size() - 2] = t;
            else
              l.runs.insert(l.runs.end(), {t, t + 1});
          }
        l.runs.insert(l.runs.end(), {0, 0});
        break;
    }
    l.run_ptr.push_back(std::int64_t(l.runs.size()) / 2);
  }
  return l;
}

// Relative accuracy of one pass of the precision (before the conditioning of exp).
double pass_tol(Precision p) {
  switch (p) {
    case Precision::kFp64: return 1e-11;
    case Precision::kFp32: return 2e-5;
    default: return 4e-5;  // tensor-core dot products of rounded values, fp32 accumulation
  }
}

template <class T>
Buffer<T> to_buffer(const Context& ctx, const std::vector<T>& h) {
  Buffer<T> b(ctx, std::int64_t(h.size()));
  copy(ctx, host_vector<const T>(h.data(), std::int64_t(h.size())), b.view());
  return b;
}

template <class T>
void run_case(const Conf& c) {
  if (c.backend == Backend::kCuda && !have_gpu()) GTEST_SKIP() << "no CUDA device";
  Rng rng(7 + std::uint64_t(c.n * 31 + c.m * 17 + c.d) + std::uint64_t(c.cost) * 1000 +
          std::uint64_t(c.schedule) * 10000);
  std::vector<double> x = gaussian_cloud(rng, c.n, c.d, 0.0, c.spread);
  std::vector<double> y = gaussian_cloud(rng, c.m, c.d, 0.4 * c.spread, c.spread);
  if (c.same) y = x;
  std::vector<double> a = with_zeros(random_weights(rng, c.n), 2, 7);
  std::vector<double> b = same_mass(with_zeros(random_weights(rng, c.m), 1, 5), a);
  PointData<T> data = make_point_data<T>(c.d, x, y, a, b, 0.5, 0.7);
  // Labels and a non-symmetric table (one label space of L classes, entries >= 0).
  const std::int64_t L = c.cost == CostKind::kLabels1          ? 1
                         : c.cost == CostKind::kLabels100      ? 100
                         : c.cost == CostKind::kLabels3Sorted ? 3
                                                              : 0;
  std::vector<std::int32_t> lx(std::size_t(c.n)), ly(std::size_t(c.m));
  std::vector<double> W(std::size_t(L * L));
  const double c_w = 0.8;
  if (L > 0) {
    std::uniform_int_distribution<std::int32_t> lab(0, std::int32_t(L - 1));
    std::uniform_real_distribution<double> u(0.0, 2.0);
    for (auto& e : lx) e = lab(rng);
    for (auto& e : ly) e = lab(rng);
    if (c.cost == CostKind::kLabels3Sorted) {
      for (std::int64_t i = 0; i < c.n; ++i) lx[std::size_t(i)] = std::int32_t(i * L / c.n);
      for (std::int64_t j = 0; j < c.m; ++j) ly[std::size_t(j)] = std::int32_t(j * L / c.m);
    }
    for (auto& e : W) e = u(rng);
    if (c.same) ly = lx;
  }
  Problem<T> prob = data.problem();
  if (c.same) prob.features().y = prob.features().x;  // one view
  if (L > 0) {
    LabelAugmented<T> la;
    la.features = prob.features();
    la.labels_x = host_vector<const std::int32_t>(lx.data(), c.n);
    la.labels_y = c.same ? la.labels_x : host_vector<const std::int32_t>(ly.data(), c.m);
    la.table = host_matrix<const double>(W.data(), L, L);
    la.table_scale = c_w;
    prob.cost = la;
  }
  ContextOptions co;
  co.backend = c.backend;
  co.threads = 2;
  co.kernel = c.kernel;
  Context ctx(co);
  std::unique_ptr<Oracle<T>> o = make_oracle(ctx, prob, c.precision);
  ASSERT_EQ(o->cost_kind(), L > 0 ? "label-augmented" : "sqeuclidean");

  // The reference sees the engine's numbers: T data (rounded coordinates on tf32 / bf16).
  std::vector<double> xr(data.x.begin(), data.x.end()), yr(data.y.begin(), data.y.end());
  if (c.precision == Precision::kTf32 || c.precision == Precision::kBf16)
    round_like_engine(&xr, &yr, c.d, c.precision);
  const std::vector<double> ad(data.a.begin(), data.a.end()), bd(data.b.begin(), data.b.end());
  DenseProblem ref = make_dense_problem(xr, yr, c.d, ad, bd, 0.7);
  if (L > 0) add_label_term(&ref, lx, ly, W, L, c_w);
  if (c.schedule != Schedule::kDense) {
    const BlockList lf = make_list(c.schedule, c.n, c.m, o->block_shape(), rng);
    const BlockList lg = make_list(c.schedule, c.m, c.n, o->block_shape(), rng);
    o->set_block_lists(&lf, &lg);
    ref.keep_f = block_list_mask(lf.run_ptr, lf.runs, lf.row_tile, lf.key_tile, c.n, c.m, false);
    ref.keep_g = block_list_mask(lg.run_ptr, lg.runs, lg.row_tile, lg.key_tile, c.m, c.n, true);
  }
  const double eps = c.eps, cmax = ref.max_cost();
  EXPECT_GE(o->max_cost() * (1 + 1e-6), cmax);
  // Potentials: two dense (unmasked) updates from 0 plus a perturbation, rounded to T.
  DenseProblem full = ref;
  full.keep_f.clear();
  full.keep_g.clear();
  std::vector<double> fd = dense_update_f(full, eps, std::vector<double>(std::size_t(c.m), 0.0));
  std::vector<double> gd = dense_update_g(full, eps, fd);
  std::normal_distribution<double> pert(0.0, 0.1 * eps);
  for (auto* v : {&fd, &gd})
    for (double& e : *v) e = double(T(e + pert(rng)));
  const std::vector<T> ft(fd.begin(), fd.end()), gt(gd.begin(), gd.end());
  Buffer<T> f = to_buffer(ctx, ft), g = to_buffer(ctx, gt);
  const double tol = pass_tol(c.precision) * (1 + cmax / eps);
  // Potentials in cost units: entries that are +inf (rows without keys) must match exactly.
  auto check_pot = [&](const std::vector<T>& got, const std::vector<double>& want, const char* w) {
    std::vector<double> gg(got.begin(), got.end()), ww = want;
    for (std::size_t i = 0; i < ww.size(); ++i)
      if (std::isinf(ww[i])) {
        EXPECT_EQ(gg[i], ww[i]) << w << " entry " << i;
        gg[i] = ww[i] = 0;
      }
    EXPECT_TRUE(all_close(gg, ww, tol * eps + pass_tol(c.precision) * (1 + cmax))) << w;
  };

  // LSE accumulator: update_f, update_g, the symmetric step and its error.
  Buffer<double> err(ctx, 1);
  const std::vector<double> f_ref = dense_update_f(ref, eps, gd), g_ref = dense_update_g(ref, eps, fd);
  {
    Buffer<T> fw = to_buffer(ctx, ft);
    o->update_f(T(eps), g.data(), fw.data(), err.data());
    check_pot(to_host(ctx, fw.cview()), f_ref, "update_f");
    Buffer<T> gw = to_buffer(ctx, gt);
    o->update_g(T(eps), f.data(), gw.data(), nullptr);
    check_pot(to_host(ctx, gw.cview()), g_ref, "update_g");
    Buffer<T> fs = to_buffer(ctx, ft), gs = to_buffer(ctx, gt);
    o->symmetric_step(T(eps), T(1), fs.data(), gs.data(), err.data());
    check_pot(to_host(ctx, fs.cview()), f_ref, "symmetric f");
    check_pot(to_host(ctx, gs.cview()), g_ref, "symmetric g");
    double e_ref = 0;
    for (std::int64_t i = 0; i < c.n; ++i)
      if (ref.a[std::size_t(i)] > 0)
        e_ref += ref.a[std::size_t(i)] * std::abs(std::expm1((fd[std::size_t(i)] - f_ref[std::size_t(i)]) / eps));
    for (std::int64_t j = 0; j < c.m; ++j)
      if (ref.b[std::size_t(j)] > 0)
        e_ref += ref.b[std::size_t(j)] * std::abs(std::expm1((gd[std::size_t(j)] - g_ref[std::size_t(j)]) / eps));
    if (std::isfinite(e_ref)) {
      EXPECT_TRUE(near(to_host(ctx, err.cview())[0], e_ref, 20 * tol * (1 + e_ref))) << "symmetric err";
    }
  }

  // Value accumulators: P v, P^T u, P V (K = 5), with each side's truncation.
  const std::vector<double> P = dense_plan(ref, eps, fd, gd);
  const std::vector<double> Pf = masked_plan(ref, P, 0), Pg = masked_plan(ref, P, 1);
  std::uniform_real_distribution<double> uv(-1.0, 1.0);
  std::vector<double> v(std::size_t(c.m)), u(std::size_t(c.n)), V(std::size_t(c.m * 5));
  for (auto* w : {&v, &u, &V})
    for (double& e : *w) e = double(T(uv(rng)));
  auto abs_bound = [&](const std::vector<double>& Pm, const std::vector<double>& vals, int K,
                       bool transpose) {
    // |P| |V| per output entry: the scale of each entry's rounding.
    const std::int64_t rows = transpose ? c.m : c.n;
    std::vector<double> bnd(std::size_t(rows * K), 0.0);
    for (std::int64_t i = 0; i < c.n; ++i)
      for (std::int64_t j = 0; j < c.m; ++j) {
        const double pij = Pm[std::size_t(i * c.m + j)];
        for (int k = 0; k < K; ++k) {
          const std::int64_t r = transpose ? j : i, s = transpose ? i : j;
          bnd[std::size_t(r * K + k)] += pij * std::abs(vals[std::size_t(s * K + k)]);
        }
      }
    for (double& e : bnd) e = tol * e + 1e-300;
    return bnd;
  };
  {
    Buffer<T> vb = to_buffer(ctx, std::vector<T>(v.begin(), v.end())), out(ctx, c.n);
    o->apply(T(eps), f.data(), g.data(), vb.data(), out.data());
    EXPECT_TRUE(all_close(to_host(ctx, out.cview()), dense_apply(ref, Pf, v), abs_bound(Pf, v, 1, false)))
        << "apply";
    Buffer<T> ub = to_buffer(ctx, std::vector<T>(u.begin(), u.end())), outt(ctx, c.m);
    o->apply_t(T(eps), f.data(), g.data(), ub.data(), outt.data());
    EXPECT_TRUE(all_close(to_host(ctx, outt.cview()), dense_apply_t(ref, Pg, u), abs_bound(Pg, u, 1, true)))
        << "apply_t";
    Buffer<T> Vb = to_buffer(ctx, std::vector<T>(V.begin(), V.end())), outm(ctx, c.n * 5);
    Buffer<T> mass(ctx, c.n);
    o->apply_mat(T(eps), f.data(), g.data(),
                 MatrixView<const T>{Vb.data(), c.m, 5, 5, Vb.space()},
                 MatrixView<T>{outm.data(), c.n, 5, 5, outm.space()}, mass.data());
    EXPECT_TRUE(all_close(to_host(ctx, outm.cview()), dense_apply_mat(ref, Pf, V, 5), abs_bound(Pf, V, 5, false)))
        << "apply_mat";
    // The row masses of the same pass: P 1.
    const std::vector<double> ones(std::size_t(c.m), 1.0);
    EXPECT_TRUE(all_close(to_host(ctx, mass.cview()), dense_apply(ref, Pf, ones), abs_bound(Pf, ones, 1, false)))
        << "apply_mat row masses";
    // P^T U with the g side's truncation, U (n x 5) at stride 7 and out (m x 5) at stride 6:
    // entries between the rows must be neither read (NaN there) nor written.
    std::vector<double> U(std::size_t(c.n * 5));
    for (double& e : U) e = double(T(uv(rng)));
    std::vector<T> Us(std::size_t(c.n * 7), std::numeric_limits<T>::quiet_NaN());
    for (std::int64_t i = 0; i < c.n; ++i)
      for (int k = 0; k < 5; ++k) Us[std::size_t(i * 7 + k)] = T(U[std::size_t(i * 5 + k)]);
    Buffer<T> Ub = to_buffer(ctx, Us);
    const T sentinel = T(-12345);
    Buffer<T> outmt = to_buffer(ctx, std::vector<T>(std::size_t(c.m * 6), sentinel));
    o->apply_mat_t(T(eps), f.data(), g.data(),
                   MatrixView<const T>{Ub.data(), c.n, 5, 7, Ub.space()},
                   MatrixView<T>{outmt.data(), c.m, 5, 6, outmt.space()});
    const std::vector<T> hmt = to_host(ctx, outmt.cview());
    std::vector<T> got_mt(std::size_t(c.m * 5));
    for (std::int64_t j = 0; j < c.m; ++j) {
      for (int k = 0; k < 5; ++k) got_mt[std::size_t(j * 5 + k)] = hmt[std::size_t(j * 6 + k)];
      EXPECT_EQ(hmt[std::size_t(j * 6 + 5)], sentinel) << "apply_mat_t wrote a padding entry";
    }
    EXPECT_TRUE(all_close(got_mt, dense_apply_mat_t(ref, Pg, U, 5), abs_bound(Pg, U, 5, true)))
        << "apply_mat_t";
    EXPECT_THROW(o->apply_mat_t(T(eps), f.data(), g.data(),
                                MatrixView<const T>{Ub.data(), c.n + 1, 5, 7, Ub.space()},
                                MatrixView<T>{outmt.data(), c.m, 5, 6, outmt.space()}),
                 InvalidArgument);
  }
  // The features: points(side) are the inputs (T data, unrounded on every precision) up to one
  // common shift (the centring), so every difference x_i - y_j is the input's.
  {
    EXPECT_EQ(o->cost_scale(), 0.7);
    const MatrixView<const T> px = o->points(0), py = o->points(1);
    ASSERT_EQ(px.rows, c.n);
    ASSERT_EQ(py.rows, c.m);
    ASSERT_EQ(px.cols, c.d);
    ASSERT_EQ(py.cols, c.d);
    ASSERT_GE(px.stride, c.d);
    ASSERT_GE(py.stride, c.d);
    EXPECT_EQ(px.space, ctx.memory_space());
    EXPECT_EQ(py.space, ctx.memory_space());
    auto fetch = [&](const MatrixView<const T>& v) {
      const std::vector<T> h =
          to_host(ctx, VectorView<const T>{v.data, (v.rows - 1) * v.stride + v.cols, v.space});
      std::vector<double> out(std::size_t(v.rows * v.cols));
      for (std::int64_t i = 0; i < v.rows; ++i)
        for (std::int64_t k = 0; k < v.cols; ++k)
          out[std::size_t(i * v.cols + k)] = double(h[std::size_t(i * v.stride + k)]);
      return out;
    };
    const std::vector<double> hx = fetch(px), hy = fetch(py);
    double scale = 1;
    for (T e : data.x) scale = std::max(scale, std::abs(double(e)));
    for (T e : data.y) scale = std::max(scale, std::abs(double(e)));
    // Centring in double, then one rounding to T per coordinate (|x - centre| <= 2 scale, half
    // an ulp each side): 4 eps scale, doubled for margin. TF32 or bf16 rounding would be 2^-11
    // or 2^-8 of the scale, far outside.
    const double ptol = 8 * double(std::numeric_limits<T>::epsilon()) * scale;
    std::vector<double> got_diff, want_diff;
    for (std::int64_t i = 0; i < c.n; ++i)
      for (std::int64_t j = 0; j < c.m; ++j)
        for (std::int64_t k = 0; k < c.d; ++k) {
          got_diff.push_back(hx[std::size_t(i * c.d + k)] - hy[std::size_t(j * c.d + k)]);
          want_diff.push_back(double(data.x[std::size_t(i * c.d + k)]) -
                              double(data.y[std::size_t(j * c.d + k)]));
        }
    EXPECT_TRUE(all_close(got_diff, want_diff, ptol)) << "points: x_i - y_j";
  }
  // Plan statistics (f side's truncation) and the certificate (every pair).
  {
    Buffer<double> st(ctx, 3);
    o->plan_statistics(T(eps), f.data(), g.data(), st.data());
    const std::vector<double> h = to_host(ctx, st.cview());
    const double mass = dense_mass(Pf);
    EXPECT_TRUE(near(h[0], mass, tol * mass)) << "mass";
    EXPECT_TRUE(near(h[1], dense_transport_cost(ref, Pf), tol * mass * cmax)) << "<P,C>";
    EXPECT_TRUE(near(h[2], dense_plan_fg(ref, Pf, fd, gd), tol * mass * (cmax + 10))) << "P(f+g)";
    if (c.schedule == Schedule::kDense && c.precision != Precision::kTf32 &&
        c.precision != Precision::kBf16) {
      // The certificate runs on the caller's coordinates: here the T data themselves.
      const Certificate cert = o->certify(eps, f.data(), g.data());
      const double e_full = dense_marginal_error(full, eps, fd, gd);
      EXPECT_TRUE(near(cert.computed, e_full, 1e-9 * (1 + e_full) * (1 + cmax / eps))) << "certificate";
    }
  }
  // Euclidean-only operations say so for another cost.
  if (L > 0) {
    Buffer<T> bm(ctx, c.n * c.d);
    EXPECT_THROW(o->barycentric_map(T(eps), f.data(), g.data(),
                                    MatrixView<T>{bm.data(), c.n, c.d, c.d, bm.space()}),
                 InvalidArgument);
  }
}

std::vector<Conf> all_cases() {
  std::vector<Conf> out;
  const std::vector<std::array<std::int64_t, 3>> sizes = {{300, 257, 3}, {1, 70, 2}, {130, 200, 17}};
  std::vector<std::pair<Backend, Precision>> engines = {{Backend::kCpu, Precision::kFp64},
                                                        {Backend::kCpu, Precision::kFp32}};
#if KANTOR_CUDA_ENABLED
  for (Precision p : {Precision::kFp64, Precision::kFp32, Precision::kTf32, Precision::kBf16})
    engines.push_back({Backend::kCuda, p});
#endif
  for (const auto& e : engines)
    for (CostKind ck : {CostKind::kSqEuclidean, CostKind::kLabels1, CostKind::kLabels100})
      for (Schedule s : {Schedule::kDense, Schedule::kRandom, Schedule::kEmptyRows,
                         Schedule::kOneTile, Schedule::kAllTiles})
        for (const auto& sz : sizes) {
          // Keep the grid small: the odd sizes run every cost with the dense and random
          // schedules only.
          if (sz[0] != 300 && s != Schedule::kDense && s != Schedule::kRandom) continue;
          out.push_back({e.first, e.second, ck, s, sz[0], sz[1], sz[2]});
        }
  // Rows ordered by class: uniform and mixed row tiles in one pass (700 rows: tiles 0, 2, 4, 5
  // uniform; 500 keys: tiles 0, 3).
  for (const auto& e : engines)
    for (Schedule sch : {Schedule::kDense, Schedule::kRandom})
      out.push_back({e.first, e.second, CostKind::kLabels3Sorted, sch, 700, 500, 5});
  // One cloud on both sides (the engines may share its copies): every engine at a narrow and a
  // wide d, a label cost, and a block-list schedule.
  for (const auto& e : engines) {
    const std::int64_t wide = e.second == Precision::kBf16 ? 100 : 130;
    out.push_back({e.first, e.second, CostKind::kSqEuclidean, Schedule::kDense, 150, 150, 3, KernelChoice::kAuto, true});
    out.push_back({e.first, e.second, CostKind::kLabels100, Schedule::kDense, 150, 150, wide, KernelChoice::kAuto, true});
    out.push_back({e.first, e.second, CostKind::kSqEuclidean, Schedule::kRandom, 300, 300, 5, KernelChoice::kAuto, true});
  }
  // Small eps (scores spanning ~1000 bits per row: the far keys' skips), fp64 and fp32, dense and
  // block lists (on CUDA fp32 the lists run the expanded kernel, dense the exact one).
  for (const auto& e : engines)
    if (e.second == Precision::kFp64 || e.second == Precision::kFp32)
      for (Schedule sch : {Schedule::kDense, Schedule::kRandom})
        out.push_back({e.first, e.second, CostKind::kSqEuclidean, sch, 300, 257, 3, KernelChoice::kAuto, false, 0.002, 0.2});
#if KANTOR_CUDA_ENABLED
  // Each dispatch entry forced once where it can serve (tf32: the mma kernel d <= 64, chunked
  // d = 80, cuBLAS d = 130; bf16 mma; exact on tf32 data).
  out.push_back({Backend::kCuda, Precision::kTf32, CostKind::kSqEuclidean, Schedule::kDense, 300, 257, 3, KernelChoice::kMma});
  out.push_back({Backend::kCuda, Precision::kTf32, CostKind::kSqEuclidean, Schedule::kDense, 200, 150, 80, KernelChoice::kTf32Chunked});
  out.push_back({Backend::kCuda, Precision::kTf32, CostKind::kSqEuclidean, Schedule::kDense, 200, 150, 130, KernelChoice::kGemm});
  out.push_back({Backend::kCuda, Precision::kTf32, CostKind::kSqEuclidean, Schedule::kDense, 300, 257, 3, KernelChoice::kExact});
  out.push_back({Backend::kCuda, Precision::kTf32, CostKind::kLabels100, Schedule::kRandom, 300, 257, 3, KernelChoice::kExact});
  out.push_back({Backend::kCuda, Precision::kBf16, CostKind::kSqEuclidean, Schedule::kDense, 300, 257, 17, KernelChoice::kMma});
  // The cuBLAS families with the label pair term (gathered per score: unsorted and sorted
  // labels), fp32 on float32 cuBLAS and as 3xTF32 (both opt-in: forced).
  out.push_back({Backend::kCuda, Precision::kTf32, CostKind::kLabels100, Schedule::kDense, 200, 150, 130, KernelChoice::kGemm});
  out.push_back({Backend::kCuda, Precision::kTf32, CostKind::kLabels3Sorted, Schedule::kDense, 700, 500, 130});
  out.push_back({Backend::kCuda, Precision::kFp32, CostKind::kSqEuclidean, Schedule::kDense, 200, 150, 130, KernelChoice::kGemm3xTf32});
  out.push_back({Backend::kCuda, Precision::kFp32, CostKind::kSqEuclidean, Schedule::kDense, 1, 70, 100, KernelChoice::kGemmFp32});
  out.push_back({Backend::kCuda, Precision::kFp32, CostKind::kLabels100, Schedule::kDense, 200, 150, 5, KernelChoice::kGemmFp32});
  out.push_back({Backend::kCuda, Precision::kFp32, CostKind::kLabels100, Schedule::kDense, 300, 257, 70, KernelChoice::kGemmFp32});
  out.push_back({Backend::kCuda, Precision::kFp32, CostKind::kLabels3Sorted, Schedule::kDense, 700, 500, 130, KernelChoice::kGemm3xTf32});
  // gemm-fp64 forced (it is also the table's fp32 entry above d = 16: the auto cases at d = 17
  // and 130 run it).
  out.push_back({Backend::kCuda, Precision::kFp32, CostKind::kSqEuclidean, Schedule::kDense, 200, 150, 130, KernelChoice::kGemmFp64});
  out.push_back({Backend::kCuda, Precision::kFp32, CostKind::kSqEuclidean, Schedule::kDense, 1, 70, 3, KernelChoice::kGemmFp64});
  out.push_back({Backend::kCuda, Precision::kFp32, CostKind::kLabels100, Schedule::kDense, 300, 257, 70, KernelChoice::kGemmFp64});
  out.push_back({Backend::kCuda, Precision::kFp32, CostKind::kLabels3Sorted, Schedule::kDense, 700, 500, 17, KernelChoice::kGemmFp64});
  // The expanded kernel (fp32, d <= 8; the table's choice for block lists there, which the auto
  // cases above run at d = 2, 3 and 5): forced on both schedules at each of its widths (3, 4, 8,
  // the padded coordinates zero), partial tiles, one row, empty rows, one and all tiles (every
  // case's weights hold zeros).
  for (std::int64_t d : {1, 3, 4, 6, 8}) {
    out.push_back({Backend::kCuda, Precision::kFp32, CostKind::kSqEuclidean, Schedule::kDense, 300, 257, d, KernelChoice::kExpanded});
    out.push_back({Backend::kCuda, Precision::kFp32, CostKind::kSqEuclidean, Schedule::kRandom, 300, 257, d, KernelChoice::kExpanded});
  }
  for (Schedule sch : {Schedule::kEmptyRows, Schedule::kOneTile, Schedule::kAllTiles})
    out.push_back({Backend::kCuda, Precision::kFp32, CostKind::kSqEuclidean, sch, 300, 300, 3, KernelChoice::kExpanded});
  out.push_back({Backend::kCuda, Precision::kFp32, CostKind::kSqEuclidean, Schedule::kRandom, 1, 70, 3, KernelChoice::kExpanded});
  out.push_back({Backend::kCuda, Precision::kFp32, CostKind::kSqEuclidean, Schedule::kRandom, 200, 200, 3, KernelChoice::kExpanded, true});
  // ... and at small eps, where its warp skip drops whole steps of keys.
  for (Schedule sch : {Schedule::kDense, Schedule::kRandom, Schedule::kAllTiles})
    out.push_back({Backend::kCuda, Precision::kFp32, CostKind::kSqEuclidean, sch, 300, 257, 3, KernelChoice::kExpanded, false, 0.002, 0.2});
  // One cloud with the families whose two sides' copies differ (3xTF32: [lo, hi, hi] and
  // [hi, lo, hi]) or are float32 norm expansions.
  out.push_back({Backend::kCuda, Precision::kFp32, CostKind::kSqEuclidean, Schedule::kDense, 200, 200, 130, KernelChoice::kGemm3xTf32, true});
  out.push_back({Backend::kCuda, Precision::kFp32, CostKind::kLabels3Sorted, Schedule::kDense, 200, 200, 40, KernelChoice::kGemmFp32, true});
  out.push_back({Backend::kCuda, Precision::kTf32, CostKind::kSqEuclidean, Schedule::kDense, 200, 200, 80, KernelChoice::kTf32Chunked, true});
#endif
  return out;
}

class Conformance : public ::testing::TestWithParam<Conf> {};

TEST_P(Conformance, EveryPassMatchesTheDenseReference) {
  const Conf& c = GetParam();
  if (c.precision == Precision::kFp64)
    run_case<double>(c);
  else
    run_case<float>(c);
}

INSTANTIATE_TEST_SUITE_P(Oracle, Conformance, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Conf>& i) { return case_name(i.param); });

// Three points a side in d = 20 (above the fp32 table's exact-kernel width).
struct SmallWide {
  std::vector<float> x, y;
  Problem<float> p;
  SmallWide() : x(60), y(60) {
    for (int i = 0; i < 60; ++i) x[std::size_t(i)] = float(i) * 0.1f, y[std::size_t(i)] = float(i) * 0.07f;
    p.features().x = host_matrix<const float>(x.data(), 3, 20);
    p.features().y = host_matrix<const float>(y.data(), 3, 20);
  }
};

// make_oracle's own kernel choice overrides the context's for that oracle; the CPU engine
// refuses CUDA families there too.
TEST(ConformanceDispatch, PerOracleKernelChoiceOnTheCpu) {
  const SmallWide w;
  const Problem<float>& p = w.p;
  {
    ContextOptions co;
    co.backend = Backend::kCpu;
    Context ctx(co);
    EXPECT_NO_THROW((void)make_oracle(ctx, p, Precision::kFp32, KernelChoice::kExact));
    try {
      (void)make_oracle(ctx, p, Precision::kFp32, KernelChoice::kGemmFp64);
      FAIL() << "a CUDA family on the CPU engine accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("gemm-fp64"), std::string::npos) << e.what();
    }
  }
}

TEST(ConformanceDispatch, PerOracleKernelChoiceOnTheGpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const SmallWide w;
  const Problem<float>& p = w.p;
  ContextOptions co;
  co.backend = Backend::kCuda;
  Context ctx(co);
  EXPECT_NE(make_oracle(ctx, p, Precision::kFp32)->description().find("float64 score blocks"),
            std::string::npos);
  EXPECT_NE(make_oracle(ctx, p, Precision::kFp32, KernelChoice::kGemm3xTf32)
                ->description()
                .find("3xTF32"),
            std::string::npos);
}

// A forced family that cannot serve the pass is refused with the reason.
TEST(ConformanceDispatch, ForcedFamilyThatCannotServeIsRefused) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  std::vector<float> x(30), y(30);
  for (int i = 0; i < 30; ++i) x[std::size_t(i)] = float(i) * 0.1f, y[std::size_t(i)] = float(i) * 0.07f;
  Problem<float> p;
  p.features().x = host_matrix<const float>(x.data(), 10, 3);
  p.features().y = host_matrix<const float>(y.data(), 10, 3);
  ContextOptions co;
  co.backend = Backend::kCuda;
  co.kernel = KernelChoice::kGemm;
  Context ctx(co);
  try {
    (void)make_oracle(ctx, p, Precision::kFp32);
    FAIL() << "gemm on fp32 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("cuBLAS path needs precision tf32"), std::string::npos)
        << e.what();
  }
}

// A forced family without the block-list schedule refuses lists, and the oracle keeps its dense
// schedule (passes, certificates and description alike).
TEST(ConformanceDispatch, RefusedBlockListsLeaveTheDenseSchedule) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const std::int64_t n = 200, m = 150, d = 130;
  Rng rng(11);
  std::vector<float> x(std::size_t(n * d)), y(std::size_t(m * d));
  std::normal_distribution<float> g(0.f, 1.f);
  for (float& v : x) v = g(rng);
  for (float& v : y) v = g(rng);
  Problem<float> p;
  p.features().x = host_matrix<const float>(x.data(), n, d);
  p.features().y = host_matrix<const float>(y.data(), m, d);
  ContextOptions co;
  co.backend = Backend::kCuda;
  co.kernel = KernelChoice::kGemmFp32;
  Context ctx(co);
  auto o = make_oracle(ctx, p, Precision::kFp32);
  const BlockList l = make_list(Schedule::kRandom, n, m, o->block_shape(), rng);
  EXPECT_THROW(o->set_block_lists(&l, nullptr), InvalidArgument);
  EXPECT_EQ(o->description().find("block-list"), std::string::npos) << o->description();
  Buffer<float> f(ctx, n), gpot = to_buffer(ctx, std::vector<float>(std::size_t(m), 0.f));
  o->update_f(0.5f, gpot.data(), f.data(), nullptr);
  for (float v : to_host(ctx, f.cview())) ASSERT_TRUE(std::isfinite(v));
}

// Block lists are validated at the API boundary, naming the defect.
TEST(ConformanceBlockList, DefectsAreNamed) {
  std::vector<double> x(60), y(90);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = double(i % 7) * 0.1;
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = double(i % 5) * 0.2;
  Problem<double> p;
  p.features().x = host_matrix<const double>(x.data(), 20, 3);
  p.features().y = host_matrix<const double>(y.data(), 30, 3);
  Context ctx(ContextOptions{Backend::kCpu, 1});
  auto o = make_oracle(ctx, p, Precision::kFp64);
  const BlockShape sh = o->block_shape();
  auto expect = [&](BlockList l, const char* what) {
    try {
      o->set_block_lists(&l, nullptr);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  BlockList ok{sh.row_tile, sh.key_tile, {0, 1}, {0, 1}};
  EXPECT_NO_THROW(o->set_block_lists(&ok, nullptr));
  BlockList bad = ok;
  bad.row_tile = 7;
  expect(bad, "row_tile is 7");
  bad = ok;
  bad.run_ptr = {0, 1, 1};
  expect(bad, "run_ptr has 3 entries");
  bad = ok;
  bad.runs = {0, 5};
  expect(bad, "outside [0, 1]");
  bad = ok;
  bad.run_ptr = {0, 2};
  bad.runs = {0, 1, 0, 1};
  expect(bad, "overlap");
}

// validate_block_list on lists of many row tiles (checked on the host threads): runs out of
// order but disjoint are accepted; with defects in several tiles the message names the first.
TEST(ConformanceDispatch, BlockListValidationNamesTheFirstDefectiveTile) {
  const BlockShape sh{128, 64};
  const std::int64_t tiles = 3000, key_tiles = 40;
  const std::int64_t rows = tiles * sh.row_tile - 5, keys = key_tiles * sh.key_tile;
  BlockList l{sh.row_tile, sh.key_tile, {0}, {}};
  for (std::int64_t r = 0; r < tiles; ++r) {
    // Three disjoint runs, the last two out of order: [30, 40), [0, 3), [10, 12).
    for (std::int32_t v : {30, 40, 0, 3, 10, 12}) l.runs.push_back(v);
    l.run_ptr.push_back(l.run_ptr.back() + 3);
  }
  EXPECT_NO_THROW(validate_block_list(l, rows, keys, sh, "test"));
  BlockList bad = l;
  bad.runs[std::size_t(6 * 2500 + 5)] = 31;  // tile 2500: [10, 31) overlaps [30, 40)
  bad.runs[std::size_t(6 * 1700 + 1)] = 41;  // tile 1700: [30, 41) past the last key tile
  bad.runs[std::size_t(6 * 2900 + 4)] = 9;   // tile 2900: [9, 12) fine, but ...
  bad.runs[std::size_t(6 * 2900 + 5)] = 2;   // ... [9, 2) reversed
  try {
    validate_block_list(bad, rows, keys, sh, "test");
    ADD_FAILURE() << "accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("row tile 1700, run 5100: key tiles [30, 41)"), std::string::npos) << e.what();
  }
  bad.runs[std::size_t(6 * 1700 + 1)] = 40;  // tile 1700 repaired: tile 2500 is the first
  try {
    validate_block_list(bad, rows, keys, sh, "test");
    ADD_FAILURE() << "accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("row tile 2500: runs [10, 31) and [30, 40) overlap"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kantor::testing
