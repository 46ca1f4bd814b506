// The CUDA engine against independent references: every Oracle pass and full solves against the
// CPU engine in float64 on the same inputs (same fixed iteration counts), and one update at
// n = m = 100,000 against a float64 recomputation of sampled rows on the host. Tolerances per
// precision (relative, norm-wise): fp64 1e-12, fp32 1e-5, tf32 3e-4, bf16 2^-8. Skips without a
// GPU, except the host-side checks of the bf16 rounding (Bf16Rounding).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kantor/buffer.hpp"
#include "kantor/config.hpp"
#include "kantor/context.hpp"
#include "kantor/error.hpp"
#include "kantor/info.hpp"
#include "kantor/oracle.hpp"
#include "kantor/sinkhorn.hpp"
#include "oracles/cuda/bf16_round.hpp"
#include "support/engine_rounding.hpp"
#include "support/gpu.hpp"

namespace kantor {
using testing::engine_round;
using testing::round_like_engine;
using testing::round_tf32;
namespace {

using testing::have_gpu;

#define SKIP_WITHOUT_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible (or a CPU-only build)"

// Kernel exactness: the CUDA engine against the CPU fp64 engine on the inputs the engine sees
// (engine_inputs): fp64 1e-12, fp32, tf32 and bf16 1e-5 (fp32 accumulation).
double tol_kernel(Precision p) { return p == Precision::kFp64 ? 1e-12 : 1e-5; }

// Accuracy against the unrounded inputs (includes the TF32 rounding of the coordinates).
double tol_potentials(Precision p) {
  switch (p) {
    case Precision::kFp64:
      return 1e-12;
    case Precision::kFp32:
      return 1e-5;
    case Precision::kTf32:
      return 3e-4;
    case Precision::kBf16:
      // bf16 keeps 8 significant bits (7 stored): round to nearest even moves each coordinate
      // by |dx| <= 2^-8 |x| (tf32: 2^-11 |x|). To first order dC_ij = 2c <x_i - y_j, dx_i - dy_j>,
      // so |dC_ij| <= 2c |x_i - y_j| (|dx_i| + |dy_j|) <= 2^-7 c |x_i - y_j| (|x_i| + |y_j|), a few
      // 2^-8 of the cost scale in the worst case; with independent rounding errors of either sign
      // (RMS about 2^-8 / sqrt(3) per coordinate) the RMS of dC is ~0.8 * 2^-8 of the RMS cost
      // for centred clouds (|x| ~ |x - y| / sqrt(2)). A potential is a soft minimum over keys,
      // so it moves by a weighted average of dC_ij (no more than max |dC_ij|): norm-wise,
      // potentials and costs agree to 2^-8 of the RMS cost. The tf32 bound 3e-4 is the same rule
      // at 2^-11 (0.6 * 2^-11); bf16 keeps the full 2^-8 as margin for the 8x larger rounding.
      return std::ldexp(1.0, -8);
    default:
      return 0;
  }
}
// Marginal errors are differences of nearly equal potentials divided by eps: compared with a
// looser relative bound (their reference values are O(0.01 - 1) in these tests).
double tol_marginal(Precision p) {
  switch (p) {
    case Precision::kFp64:
      return 1e-9;
    case Precision::kFp32:
      return 1e-3;
    case Precision::kTf32:
    case Precision::kBf16:
      return 1e-3;
    default:
      return 0;
  }
}

struct Case {
  std::int64_t n, m, d;
  double eps;
  double shift = 0;  // added to every coordinate (centring must absorb it)
  bool zero_weights = false;
  double cost_scale = 1;
};

std::string name(const Case& c, Precision p) {
  return "n=" + std::to_string(c.n) + " m=" + std::to_string(c.m) + " d=" + std::to_string(c.d) +
         " eps=" + std::to_string(c.eps) + " " + to_string(p) +
         (c.zero_weights ? " zero-weights" : "");
}

struct HostData {
  std::int64_t n, m, d;
  std::vector<double> x, y, a, b;
};

HostData make_data(const Case& c, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::uniform_real_distribution<double> ud(0.1, 1.1);
  HostData h{c.n, c.m, c.d, {}, {}, {}, {}};
  h.x.resize(std::size_t(c.n * c.d));
  h.y.resize(std::size_t(c.m * c.d));
  for (auto& v : h.x) v = nd(rng) + c.shift;
  for (auto& v : h.y) v = 0.8 * nd(rng) + 0.3 + c.shift;
  h.a.resize(std::size_t(c.n));
  h.b.resize(std::size_t(c.m));
  for (auto& v : h.a) v = ud(rng);
  for (auto& v : h.b) v = ud(rng);
  if (c.zero_weights) {
    for (std::int64_t i = 1; i < c.n; i += 3) h.a[std::size_t(i)] = 0;
    for (std::int64_t j = 0; j < c.m; j += 4) h.b[std::size_t(j)] = 0;
    if (c.m == 1) h.b[0] = 1;
  }
  // Equal total mass (balanced OT): normalize both to 1.
  double sa = 0, sb = 0;
  for (double v : h.a) sa += v;
  for (double v : h.b) sb += v;
  for (auto& v : h.a) v /= sa;
  for (auto& v : h.b) v /= sb;
  return h;
}

// Whether precision p stores rounded coordinates (tensor-core operands).
bool rounds_inputs(Precision p) { return p == Precision::kTf32 || p == Precision::kBf16; }

// The inputs as the engine of precision p sees them, in double: float data for fp32/tf32/bf16,
// and for tf32/bf16 the rounded coordinates after the engine's centring (midpoint of the joint
// bounding box, lib/costs/problem_data.cpp). The CPU fp64 engine on these inputs is the exact
// reference of the kernels; the rounding of the inputs themselves is measured separately.
HostData engine_inputs(const HostData& h, Precision p) {
  HostData r = h;
  if (p == Precision::kFp64) return r;
  for (auto* v : {&r.x, &r.y, &r.a, &r.b})
    for (auto& e : *v) e = double(float(e));
  // The engine stores float(x - center): both engines then see the same centred values.
  round_like_engine(&r.x, &r.y, r.d, p);
  return r;
}

// Root mean square of the cost c|x_i - y_j|^2 over all pairs: the scale potentials are
// compared in (a potential's own norm depends on the gauge (f + t, g - t) and can be ~0).
double rms_cost(const HostData& h, double c) {
  double s = 0;
  for (std::int64_t i = 0; i < h.n; ++i)
    for (std::int64_t j = 0; j < h.m; ++j) {
      double d2 = 0;
      for (std::int64_t k = 0; k < h.d; ++k) {
        const double df = h.x[std::size_t(i * h.d + k)] - h.y[std::size_t(j * h.d + k)];
        d2 += df * df;
      }
      s += (c * d2) * (c * d2);
    }
  return std::sqrt(s / double(h.n * h.m));
}

template <class T>
struct Cast {
  std::vector<T> x, y, a, b;
  Problem<T> problem;
};

template <class T>
Cast<T> cast(const HostData& h, const Case& c) {
  Cast<T> out;
  out.x.assign(h.x.begin(), h.x.end());
  out.y.assign(h.y.begin(), h.y.end());
  out.a.assign(h.a.begin(), h.a.end());
  out.b.assign(h.b.begin(), h.b.end());
  out.problem.features().x = host_matrix<const T>(out.x.data(), h.n, h.d);
  out.problem.features().y = host_matrix<const T>(out.y.data(), h.m, h.d);
  out.problem.a = host_vector<const T>(out.a.data(), h.n);
  out.problem.b = host_vector<const T>(out.b.data(), h.m);
  out.problem.epsilon = c.eps;
  out.problem.features().scale = c.cost_scale;
  return out;
}

// |v - ref|_2 / max(|ref|_2, sqrt(len) * scale); NaN never passes.
double rel_err(const std::vector<double>& v, const std::vector<double>& ref, double scale = 0) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(v[i])) return std::numeric_limits<double>::infinity();
    num += (v[i] - ref[i]) * (v[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num) / std::max({std::sqrt(den), std::sqrt(double(ref.size())) * scale, 1e-300});
}

double rel_scalar(double v, double ref) {
  if (!std::isfinite(v)) return std::numeric_limits<double>::infinity();
  return std::abs(v - ref) / std::max(std::abs(ref), 1e-2);
}

template <class T>
std::vector<double> to_double(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// Device buffer holding `host` (cast to T) on `ctx`.
template <class T>
Buffer<T> device_copy(const Context& ctx, const std::vector<double>& host) {
  std::vector<T> t(host.begin(), host.end());
  Buffer<T> b(ctx, std::int64_t(t.size()));
  copy(ctx, VectorView<const T>{t.data(), std::int64_t(t.size()), MemorySpace::kHost}, b.view());
  return b;
}
template <class T>
std::vector<double> host_copy(const Context& ctx, const Buffer<T>& b) {
  return to_double(to_host(ctx, b.cview()));
}
double host_scalar(const Context& ctx, const Buffer<double>& b, int k = 0) {
  return to_host(ctx, b.cview())[std::size_t(k)];
}

// Every pass of the CUDA oracle (precision p, data type T) against the CPU fp64 oracle.
template <class T>
void check_passes(const Case& c, Precision p, unsigned seed) {
  SCOPED_TRACE(name(c, p));
  const HostData h = make_data(c, seed);
  const HostData he = engine_inputs(h, p);
  const double scale = rms_cost(he, c.cost_scale);
  Context cpu({Backend::kCpu});
  Context gpu({Backend::kCuda});
  Cast<double> hd = cast<double>(he, c);
  Cast<T> ht = cast<T>(h, c);
  auto ref = make_oracle(cpu, hd.problem, Precision::kFp64);
  auto dev = make_oracle(gpu, ht.problem, p);
  ASSERT_EQ(dev->memory_space(), MemorySpace::kDevice);
  const T eps = T(c.eps);
  const double tol = tol_kernel(p), tolm = tol_marginal(p);

  // Realistic potentials: three alternating iterations of the reference from zero.
  std::vector<double> f(static_cast<std::size_t>(c.n), 0.0), g(static_cast<std::size_t>(c.m), 0.0);
  for (int it = 0; it < 3; ++it) {
    ref->update_f(c.eps, g.data(), f.data(), nullptr);
    ref->update_g(c.eps, f.data(), g.data(), nullptr);
  }
  // Rounded to T first, so both engines see the same inputs.
  for (auto& v : f) v = double(T(v));
  for (auto& v : g) v = double(T(v));

  Buffer<double> sc(gpu, 4);
  {  // update_f with the row error of the plan (f, g)
    std::vector<double> fr = f;
    double er = 0;
    ref->update_f(c.eps, g.data(), fr.data(), &er);
    Buffer<T> fd = device_copy<T>(gpu, f), gd = device_copy<T>(gpu, g);
    dev->update_f(eps, gd.data(), fd.data(), sc.data());
    EXPECT_LE(rel_err(host_copy(gpu, fd), fr, scale), tol) << "update_f";
    EXPECT_LE(std::abs(host_scalar(gpu, sc) - er), tolm * (1 + er)) << "update_f row_err " << er;
  }
  {  // update_g
    std::vector<double> gr = g;
    double er = 0;
    ref->update_g(c.eps, f.data(), gr.data(), &er);
    Buffer<T> fd = device_copy<T>(gpu, f), gd = device_copy<T>(gpu, g);
    dev->update_g(eps, fd.data(), gd.data(), sc.data());
    EXPECT_LE(rel_err(host_copy(gpu, gd), gr, scale), tol) << "update_g";
    EXPECT_LE(std::abs(host_scalar(gpu, sc) - er), tolm * (1 + er)) << "update_g col_err " << er;
  }
  for (const int side : {0, 1}) {  // relaxed_update against the CPU engine's, w = 1.6
    std::vector<double> pr = side == 0 ? f : g;
    double er = 0;
    ref->relaxed_update(side, c.eps, double(T(1.6)), side == 0 ? g.data() : f.data(), pr.data(),
                        &er);
    Buffer<T> fd = device_copy<T>(gpu, f), gd = device_copy<T>(gpu, g);
    Buffer<T>& pd = side == 0 ? fd : gd;
    dev->relaxed_update(side, eps, T(1.6), side == 0 ? gd.data() : fd.data(), pd.data(),
                        sc.data());
    EXPECT_LE(rel_err(host_copy(gpu, pd), pr, scale), 2 * tol) << "relaxed_update " << side;
    EXPECT_LE(std::abs(host_scalar(gpu, sc) - er), tolm * (1 + er))
        << "relaxed_update err " << side << ": " << er;
  }
  {  // symmetric step, w = 0.5
    std::vector<double> fr = f, gr = g;
    double er = 0;
    ref->symmetric_step(c.eps, 0.5, fr.data(), gr.data(), &er);
    Buffer<T> fd = device_copy<T>(gpu, f), gd = device_copy<T>(gpu, g);
    dev->symmetric_step(eps, T(0.5), fd.data(), gd.data(), sc.data());
    EXPECT_LE(rel_err(host_copy(gpu, fd), fr, scale), tol) << "symmetric f";
    EXPECT_LE(rel_err(host_copy(gpu, gd), gr, scale), tol) << "symmetric g";
    EXPECT_LE(std::abs(host_scalar(gpu, sc) - er), tolm * (1 + er)) << "symmetric err " << er;
  }
  Buffer<T> fd = device_copy<T>(gpu, f), gd = device_copy<T>(gpu, g);
  std::mt19937_64 rng(seed + 7);
  std::normal_distribution<double> nd(0.0, 1.0);
  // Value passes run the exact CUDA-core kernel; P v / P^T u / P V of float data in float
  // arithmetic: each P_ij then carries ~2^-24 |exponent| relative error, |exponent| up to about
  // (|g| + C)/eps, so the bound scales with the cost over eps (measured worst 6.2e-5 at eps = 0.05,
  // rms cost ~4: within 1e-5 (1 + 4 / 0.05) = 8.1e-4).
  const double tolp = p == Precision::kFp64 ? 1e-12 : 1e-5 * (1 + scale / c.eps);
  // Barycentric map, dual value and plan statistics stay in double arithmetic.
  const double tolv = p == Precision::kFp64 ? 1e-12 : 1e-5;
  {  // apply, apply_t
    std::vector<double> v(std::size_t(c.m)), u(std::size_t(c.n));
    for (auto& e : v) e = double(T(nd(rng)));
    for (auto& e : u) e = double(T(nd(rng)));
    std::vector<double> pv(std::size_t(c.n)), ptu(std::size_t(c.m));
    ref->apply(c.eps, f.data(), g.data(), v.data(), pv.data());
    ref->apply_t(c.eps, f.data(), g.data(), u.data(), ptu.data());
    Buffer<T> vd = device_copy<T>(gpu, v), ud = device_copy<T>(gpu, u);
    Buffer<T> o1(gpu, c.n), o2(gpu, c.m);
    dev->apply(eps, fd.data(), gd.data(), vd.data(), o1.data());
    dev->apply_t(eps, fd.data(), gd.data(), ud.data(), o2.data());
    EXPECT_LE(rel_err(host_copy(gpu, o1), pv), tolp) << "apply";
    EXPECT_LE(rel_err(host_copy(gpu, o2), ptu), tolp) << "apply_t";
  }
  {  // apply_mat with k = 11 columns (two value chunks), strided input
    const std::int64_t k = 11, vs = 13;
    std::vector<double> V(std::size_t(c.m * vs), 0.0);
    for (auto& e : V) e = double(T(nd(rng)));
    std::vector<double> out(std::size_t(c.n * k));
    ref->apply_mat(c.eps, f.data(), g.data(),
                   MatrixView<const double>{V.data(), c.m, k, vs, MemorySpace::kHost},
                   MatrixView<double>{out.data(), c.n, k, k, MemorySpace::kHost});
    Buffer<T> Vd = device_copy<T>(gpu, V);
    Buffer<T> od(gpu, c.n * k);
    dev->apply_mat(eps, fd.data(), gd.data(),
                   MatrixView<const T>{Vd.data(), c.m, k, vs, MemorySpace::kDevice},
                   MatrixView<T>{od.data(), c.n, k, k, MemorySpace::kDevice});
    // On tf32, P V runs on the tensor cores (lib/cuda/lse_values.hpp): P and V are rounded to
    // TF32 (relative 2^-11 each, round to nearest), so norm-wise the product carries about 2^-10
    // (9.8e-4) at worst and ~2^-11 typically (measured 1.6e-4 - 4.6e-4 on these cases); the
    // other precisions keep the exact value pass (1e-5 / 1e-12).
    const double tolm = p == Precision::kTf32 ? std::ldexp(1.0, -10) : tolp;
    EXPECT_LE(rel_err(host_copy(gpu, od), out), tolm) << "apply_mat";
  }
  {  // barycentric map
    std::vector<double> out(std::size_t(c.n * c.d));
    ref->barycentric_map(c.eps, f.data(), g.data(),
                         MatrixView<double>{out.data(), c.n, c.d, c.d, MemorySpace::kHost});
    Buffer<T> od(gpu, c.n * c.d);
    dev->barycentric_map(eps, fd.data(), gd.data(),
                         MatrixView<T>{od.data(), c.n, c.d, c.d, MemorySpace::kDevice});
    std::vector<double> got = host_copy(gpu, od);
    if (rounds_inputs(p)) {
      // The engine weighs the unrounded y by the plan of the rounded cost: the reference is
      // (P Y)_i / (P 1)_i with Y the engine's unrounded float coordinates (rows with P 1 = 0,
      // zero weights, are left out).
      const HostData hv = engine_inputs(h, Precision::kFp32);
      std::vector<double> py(std::size_t(c.n * c.d)), p1(std::size_t(c.n));
      std::vector<double> ones(std::size_t(c.m), 1.0);
      ref->apply_mat(c.eps, f.data(), g.data(),
                     MatrixView<const double>{hv.y.data(), c.m, c.d, c.d, MemorySpace::kHost},
                     MatrixView<double>{py.data(), c.n, c.d, c.d, MemorySpace::kHost});
      ref->apply(c.eps, f.data(), g.data(), ones.data(), p1.data());
      std::vector<double> kept_ref, kept_got;
      for (std::int64_t i = 0; i < c.n; ++i)
        if (p1[std::size_t(i)] > 0)
          for (std::int64_t k = 0; k < c.d; ++k) {
            kept_ref.push_back(py[std::size_t(i * c.d + k)] / p1[std::size_t(i)]);
            kept_got.push_back(got[std::size_t(i * c.d + k)]);
          }
      out = kept_ref;
      got = kept_got;
    }
    EXPECT_LE(rel_err(got, out), tolv) << "barycentric_map";
  }
  {  // dual value, plan statistics, marginal error
    double dv = 0, st[3] = {0, 0, 0}, me = 0;
    ref->dual_value(f.data(), g.data(), &dv);
    ref->plan_statistics(c.eps, f.data(), g.data(), st);
    ref->marginal_error(c.eps, f.data(), g.data(), &me);
    Buffer<double> s1(gpu, 1), s3(gpu, 3), s4(gpu, 1);
    dev->dual_value(fd.data(), gd.data(), s1.data());
    dev->plan_statistics(eps, fd.data(), gd.data(), s3.data());
    dev->marginal_error(eps, fd.data(), gd.data(), s4.data());
    const std::vector<double> r3 = to_host(gpu, s3.cview());
    EXPECT_LE(rel_scalar(host_scalar(gpu, s1), dv), tolv) << "dual_value " << dv;
    EXPECT_LE(rel_scalar(r3[0], st[0]), tolv) << "plan mass " << st[0];
    EXPECT_LE(rel_scalar(r3[1], st[1]), tolv) << "plan cost " << st[1];
    EXPECT_LE(rel_scalar(r3[2], st[2]), tolv) << "plan f+g " << st[2];
    EXPECT_LE(std::abs(host_scalar(gpu, s4) - me), tolm * (1 + me)) << "marginal_error " << me;
    // The inputs were not modified by marginal_error.
    EXPECT_EQ(rel_err(host_copy(gpu, fd), f), 0.0);
  }
}

const std::vector<Case>& pass_cases() {
  static const std::vector<Case> cases = {
      {97, 131, 3, 0.1, 5.0},
      {1, 77, 2, 0.05},
      {64, 1, 7, 0.2},
      {200, 150, 1, 0.01},
      {129, 255, 16, 0.5, -3},
      {150, 97, 64, 1.0},
      {61, 90, 100, 2.0},
      {45, 70, 512, 10.0},
      {300, 211, 3, 0.02, 0, true},
      {123, 77, 7, 0.3, 2.0, true, 0.5},
      {70, 66, 80, 3.0},
  };
  return cases;
}

TEST(CudaOracle, PassesFp64) {
  SKIP_WITHOUT_GPU();
  unsigned seed = 1;
  for (const Case& c : pass_cases()) check_passes<double>(c, Precision::kFp64, seed++);
}

TEST(CudaOracle, PassesFp32) {
  SKIP_WITHOUT_GPU();
  unsigned seed = 100;
  for (const Case& c : pass_cases()) check_passes<float>(c, Precision::kFp32, seed++);
}

TEST(CudaOracle, PassesTf32) {
  SKIP_WITHOUT_GPU();
  unsigned seed = 200;
  for (const Case& c : pass_cases()) check_passes<float>(c, Precision::kTf32, seed++);
  // Every resident padded width (8, 16, 32, 64) with d just above the previous one, and clouds
  // of many key tiles with a partial last tile (the pipelined kernel's stage hand-over).
  const std::vector<Case> widths = {
      {70, 45, 9, 0.5}, {33, 129, 17, 1.0, 1.0, true}, {300, 1000, 33, 1.0}, {1100, 777, 5, 0.2}};
  for (const Case& c : widths) check_passes<float>(c, Precision::kTf32, seed++);
}

// bf16 serves d <= 128 (padded widths 16, 32, 64, 128): the pass cases within that range.
TEST(CudaOracle, PassesBf16) {
  SKIP_WITHOUT_GPU();
  unsigned seed = 250;
  for (const Case& c : pass_cases())
    if (c.d <= 128) check_passes<float>(c, Precision::kBf16, seed++);
  // Every padded width (16, 32, 64, 128) with d just above the previous width, and clouds of
  // many key tiles with a partial last tile.
  const std::vector<Case> widths = {{70, 45, 17, 0.5},
                                    {33, 129, 33, 1.0, 1.0, true},
                                    {40, 50, 65, 2.0},
                                    {300, 1000, 128, 4.0},
                                    {1100, 777, 5, 0.2}};
  for (const Case& c : widths) check_passes<float>(c, Precision::kBf16, seed++);
}

TEST(CudaOracle, Bf16RefusesWideCloudsAndDoubleData) {
  SKIP_WITHOUT_GPU();
  Context gpu({Backend::kCuda});
  {  // d = 129 > 128: no bf16 kernel serves it
    Case c{10, 12, 129, 1.0};
    const HostData h = make_data(c, 3);
    Cast<float> ht = cast<float>(h, c);
    EXPECT_THROW(make_oracle(gpu, ht.problem, Precision::kBf16), InvalidArgument);
  }
  {  // double data
    Case c{10, 12, 3, 0.1};
    const HostData h = make_data(c, 4);
    Cast<double> hd = cast<double>(h, c);
    EXPECT_THROW(make_oracle(gpu, hd.problem, Precision::kBf16), InvalidArgument);
  }
  {  // d = 128 is served, and the description names the kernel
    Case c{10, 12, 128, 1.0};
    const HostData h = make_data(c, 5);
    Cast<float> ht = cast<float>(h, c);
    auto o = make_oracle(gpu, ht.problem, Precision::kBf16);
    EXPECT_NE(o->description().find("bf16"), std::string::npos) << o->description();
    EXPECT_EQ(o->precision(), Precision::kBf16);
  }
}

// The engine's float -> bf16 rounding against hand-computed bit patterns (host only).
// The test's TF32 reference (host only): 10 stored mantissa bits, error <= half a unit in the
// 11th significant bit, ties away from zero, exact on TF32 values.
TEST(Tf32Rounding, Reference) {
  auto bits_of = [](float v) {
    std::uint32_t u;
    std::memcpy(&u, &v, 4);
    return u;
  };
  EXPECT_EQ(round_tf32(1.0f + std::ldexp(1.0f, -11)), 1.0f + std::ldexp(1.0f, -10));  // tie: away
  EXPECT_EQ(round_tf32(-1.0f - std::ldexp(1.0f, -11)), -1.0f - std::ldexp(1.0f, -10));
  EXPECT_EQ(round_tf32(1.0f + std::ldexp(1.0f, -12)), 1.0f);
  EXPECT_EQ(round_tf32(2.0f - std::ldexp(1.0f, -12)), 2.0f);  // carry into the exponent
  std::mt19937_64 rng(11);
  std::normal_distribution<float> nd(0.f, 50.f);
  for (int i = 0; i < 100000; ++i) {
    const float x = nd(rng);
    const float r = round_tf32(x);
    ASSERT_EQ(bits_of(r) & 0x1fffu, 0u) << x;
    ASSERT_LE(std::abs(double(r) - x), std::ldexp(std::abs(double(x)), -11)) << x;
    ASSERT_EQ(round_tf32(r), r) << x;
  }
}

TEST(Bf16Rounding, BitPatterns) {
  auto bits_of = [](float x) {
    std::uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
  };
  auto from_bits = [](std::uint32_t u) {
    float x;
    std::memcpy(&x, &u, 4);
    return x;
  };
  // Exact values keep their high half.
  EXPECT_EQ(bf16::bits(1.0f), 0x3f80u);
  EXPECT_EQ(bf16::bits(-2.0f), 0xc000u);
  EXPECT_EQ(bf16::bits(0.0f), 0x0000u);
  EXPECT_EQ(bf16::bits(-0.0f), 0x8000u);
  // Below / above the halfway point: down / up.
  EXPECT_EQ(bf16::bits(from_bits(0x3f807fffu)), 0x3f80u);
  EXPECT_EQ(bf16::bits(from_bits(0x3f808001u)), 0x3f81u);
  // Ties to even: 0x3f80'8000 (even 0x3f80 stays), 0x3f81'8000 (odd 0x3f81 goes up to 0x3f82).
  EXPECT_EQ(bf16::bits(from_bits(0x3f808000u)), 0x3f80u);
  EXPECT_EQ(bf16::bits(from_bits(0x3f818000u)), 0x3f82u);
  EXPECT_EQ(bf16::bits(from_bits(0xbf818000u)), 0xbf82u);  // sign does not matter
  // Carry into the exponent: 1.99609375 + a bit (0x3fff'8001) rounds to 2.0 (0x4000).
  EXPECT_EQ(bf16::bits(from_bits(0x3fff8001u)), 0x4000u);
  EXPECT_EQ(bf16::bits(from_bits(0x3fff8000u)), 0x4000u);  // tie, odd 0x3fff goes up
  // 1 + 2^-8 is the tie between 1 and 1 + 2^-7: even (1) wins; 1 + 3 * 2^-8 goes to 1 + 2^-6.
  EXPECT_EQ(bf16::round(1.0f + std::ldexp(1.0f, -8)), 1.0f);
  EXPECT_EQ(bf16::round(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
  // Overflow: the largest float rounds to +inf; +-inf stay; NaN stays NaN (quiet).
  EXPECT_EQ(bf16::bits(from_bits(0x7f7fffffu)), 0x7f80u);
  EXPECT_EQ(bf16::bits(std::numeric_limits<float>::infinity()), 0x7f80u);
  EXPECT_EQ(bf16::bits(-std::numeric_limits<float>::infinity()), 0xff80u);
  EXPECT_TRUE(std::isnan(bf16::round(from_bits(0x7f800001u))));
  EXPECT_TRUE(std::isnan(bf16::round(std::numeric_limits<float>::quiet_NaN())));
  // Round trip: every bf16 pattern (finite) converts to float and back unchanged.
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    if ((b & 0x7f80u) == 0x7f80u) continue;  // inf / NaN
    ASSERT_EQ(bf16::bits(bf16::to_float(std::uint16_t(b))), b) << std::hex << b;
  }
  // Against an independent rounding (frexp, nearbyint in round-to-nearest-even) on normal
  // floats: same value, relative error <= 2^-8.
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd(0.f, 100.f);
  for (int i = 0; i < 100000; ++i) {
    const float x = nd(rng);
    if (x == 0.f) continue;
    int e = 0;
    const double mant = std::frexp(double(x), &e);  // x = mant 2^e, 0.5 <= |mant| < 1
    const double ref = std::ldexp(std::nearbyint(std::ldexp(mant, 8)), e - 8);
    ASSERT_EQ(double(bf16::round(x)), ref) << x << " bits " << std::hex << bits_of(x);
    ASSERT_LE(std::abs(ref - x), std::ldexp(std::abs(double(x)), -8));
  }
}

// Full solves, fixed iteration count (tolerance unreachable), annealing on: CUDA vs CPU fp64.
// The smallest eps precision p resolves for these points (docs/numerics.md, "Resolvable range"),
// computed here independently: ulp of the largest c|x|^2 of the clouds centred on the midpoint of
// their joint bounding box, in the format the scores round to, and ulp of c D^2 in the
// potentials' storage.
double resolvable_eps(const HostData& h, double c, Precision p) {
  const int bits = p == Precision::kFp64 ? 52 : p == Precision::kFp32 ? 23 : p == Precision::kTf32 ? 10 : 7;
  const int store = p == Precision::kFp64 ? 52 : 23;
  std::vector<double> lo(std::size_t(h.d), 1e300), hi(std::size_t(h.d), -1e300);
  for (const std::vector<double>* v : {&h.x, &h.y})
    for (std::size_t i = 0; i < v->size(); ++i) {
      lo[i % std::size_t(h.d)] = std::min(lo[i % std::size_t(h.d)], (*v)[i]);
      hi[i % std::size_t(h.d)] = std::max(hi[i % std::size_t(h.d)], (*v)[i]);
    }
  double term = 0, diag2 = 0;
  for (std::int64_t k = 0; k < h.d; ++k)
    diag2 += (hi[std::size_t(k)] - lo[std::size_t(k)]) * (hi[std::size_t(k)] - lo[std::size_t(k)]);
  for (const std::vector<double>* v : {&h.x, &h.y})
    for (std::size_t i = 0; i < v->size(); i += std::size_t(h.d)) {
      double s2 = 0;
      for (std::int64_t k = 0; k < h.d; ++k) {
        const double z = (*v)[i + std::size_t(k)] - 0.5 * (lo[std::size_t(k)] + hi[std::size_t(k)]);
        s2 += z * z;
      }
      term = std::max(term, c * s2);
    }
  auto ulp = [](double v, int b) { return v > 0 ? std::ldexp(1.0, std::ilogb(v) - b) : 0.0; };
  return std::max(ulp(term, bits), ulp(c * diag2, store));
}

template <class T>
void check_solve(const Case& case_in, Precision p, Schedule schedule, std::int64_t iterations,
                 unsigned seed, bool exact_inputs = true) {
  Case c = case_in;
  const HostData h = make_data(c, seed);
  // An eps below the resolvable range of p is refused (no digit of the plan could be right);
  // the kernels are then compared at twice that bound.
  const double floor_eps = resolvable_eps(h, c.cost_scale, p);
  if (c.eps < floor_eps) {
    Cast<T> refused = cast<T>(h, c);
    SinkhornOptions ro;
    ro.precision = p;
    EXPECT_THROW(solve_sinkhorn(Context({Backend::kCuda}), refused.problem, ro), InvalidArgument)
        << name(c, p) << ": below the resolvable eps " << floor_eps;
    c.eps = 2 * floor_eps;
  }
  SCOPED_TRACE(name(c, p) + " " + to_string(schedule) + (exact_inputs ? "" : " unrounded ref"));
  const HostData he = exact_inputs ? engine_inputs(h, p) : h;
  const double scale = rms_cost(he, c.cost_scale);
  Context cpu({Backend::kCpu});
  Context gpu({Backend::kCuda});
  Cast<double> hd = cast<double>(he, c);
  Cast<T> ht = cast<T>(h, c);
  SinkhornOptions o;
  o.schedule = schedule;
  o.max_iterations = iterations;
  o.tolerance = 1e-300;  // never met: both run exactly `iterations` iterations
  o.scaling = 0.5;
  o.precision = Precision::kFp64;
  Potentials<double> pr;
  const SinkhornSummary sr = solve_sinkhorn(cpu, hd.problem, o, &pr);
  o.precision = p;
  Potentials<T> pd;
  const SinkhornSummary sd = solve_sinkhorn(gpu, ht.problem, o, &pd);
  // Both run `iterations` iterations, unless the fp64 reference hit an exactly zero marginal error
  // (n = 1: every update is exact) and stopped at its fixed point, which further iterations keep.
  if (sr.termination != TerminationType::kConverged) ASSERT_EQ(sd.iterations, sr.iterations);
  const std::vector<double> fr = to_double(to_host(cpu, pr.f.cview()));
  const std::vector<double> gr = to_double(to_host(cpu, pr.g.cview()));
  std::vector<double> fd = host_copy(gpu, pd.f), gd = host_copy(gpu, pd.g);
  // Remove the gauge (f + t, g - t): t minimizes |fd - t - fr|^2 + |gd + t - gr|^2.
  double t = 0;
  for (std::size_t i = 0; i < fd.size(); ++i) t += fd[i] - fr[i];
  for (std::size_t j = 0; j < gd.size(); ++j) t -= gd[j] - gr[j];
  t /= double(fd.size() + gd.size());
  std::vector<double> both_d, both_r;
  for (std::size_t i = 0; i < fd.size(); ++i) both_d.push_back(fd[i] - t), both_r.push_back(fr[i]);
  for (std::size_t j = 0; j < gd.size(); ++j) both_d.push_back(gd[j] + t), both_r.push_back(gr[j]);
  const double tol = exact_inputs ? tol_kernel(p) : tol_potentials(p);
  EXPECT_LE(rel_err(both_d, both_r, scale), tol) << "potentials";
  // Costs: tf32/bf16 scores are fp32 sums of expanded products (c|x|^2 + c|y|^2 - 2c<x, y>), whose
  // rounding (~1e-7 of |x|^2) moves P by that over eps; costs are held to the tf32 bound 3e-4
  // (bf16 against the unrounded inputs: its own bound, which includes the coordinate rounding).
  const double tolc = !rounds_inputs(p) ? tol
                      : exact_inputs    ? tol_potentials(Precision::kTf32)
                                        : tol_potentials(p);
  EXPECT_LE(rel_scalar(sd.dual_cost, sr.dual_cost), tolc) << "dual " << sr.dual_cost;
  // The primal cost <P, C> weighs every plan entry P_ij = a_i b_j exp((f_i + g_j - C_ij) / eps):
  // a rounding u of the potentials and scores moves an entry by about u (|f_i| + |g_j| + C_ij) /
  // eps relative, so in fp32 at a small eps the primal cost is only good to ~u scale / eps, not
  // to the kernels' 1e-5 (300 points, eps = 1e-3: 1.1e-5 to 1.4e-5 off the float64 solve after
  // ulp-level changes of the log weights or of the split count, twentieth session). The dual
  // cost and the potentials keep the kernels' bound.
  const double tolp = p == Precision::kFp32 && exact_inputs
                          ? std::max(tolc, std::ldexp(1.0, -24) * scale / c.eps)
                          : tolc;
  EXPECT_LE(rel_scalar(sd.primal_cost, sr.primal_cost), tolp) << "primal " << sr.primal_cost;
  // The engines' residuals on the same (rounded) problem agree; the certificates are about
  // different points (the GPU's about the caller's unrounded ones) and are checked elsewhere.
  if (exact_inputs)
    EXPECT_LE(std::abs(sd.residual - sr.residual), tol_marginal(p) * (1 + sr.residual))
        << "residual " << sr.residual;
  EXPECT_GE(sd.marginal_error, 0);
}

const std::vector<Case>& solve_cases() {
  static const std::vector<Case> cases = {
      {211, 173, 3, 0.01, 4.0}, {1, 50, 2, 0.05},   {90, 120, 16, 0.1, 0, true},
      {80, 64, 64, 0.5},        {40, 33, 512, 5.0}, {300, 300, 2, 1e-3},  // tiny eps, annealed
  };
  return cases;
}

TEST(CudaSinkhorn, SolvesMatchCpuFp64) {
  SKIP_WITHOUT_GPU();
  unsigned seed = 300;
  for (const Case& c : solve_cases()) {
    check_solve<double>(c, Precision::kFp64, Schedule::kAlternating, 40, seed++);
    check_solve<double>(c, Precision::kFp64, Schedule::kSymmetric, 40, seed++);
  }
}

TEST(CudaSinkhorn, SolvesMatchCpuFp32) {
  SKIP_WITHOUT_GPU();
  unsigned seed = 400;
  for (const Case& c : solve_cases()) {
    check_solve<float>(c, Precision::kFp32, Schedule::kAlternating, 40, seed++);
    check_solve<float>(c, Precision::kFp32, Schedule::kSymmetric, 40, seed++);
  }
}

TEST(CudaSinkhorn, SolvesMatchCpuTf32) {
  SKIP_WITHOUT_GPU();
  unsigned seed = 500;
  for (const Case& c : solve_cases()) {
    check_solve<float>(c, Precision::kTf32, Schedule::kAlternating, 40, seed++);
    check_solve<float>(c, Precision::kTf32, Schedule::kSymmetric, 40, seed++);
  }
}

TEST(CudaSinkhorn, SolvesMatchCpuBf16) {
  SKIP_WITHOUT_GPU();
  unsigned seed = 550;
  // d in {3, 2, 16, 64} with n != m, n = 1, zero weights and a tiny annealed eps (d <= 128 only).
  for (const Case& c : solve_cases()) {
    if (c.d > 128) continue;
    check_solve<float>(c, Precision::kBf16, Schedule::kAlternating, 40, seed++);
    check_solve<float>(c, Precision::kBf16, Schedule::kSymmetric, 40, seed++);
  }
}

// Device-resident problem data (a strided x, device weights) gives exactly the result of the
// same data in host memory, on the CUDA engine and on the CPU engine (setup copies it to the host
// once); device data with a non-finite coordinate is refused like host data.
// Oracle::repeat on the CUDA engine (a recorded CUDA graph replayed): the same bits as calling
// the step directly, for a relaxed alternating step with a residual (the multiscale levels' and
// the dense solver's steps), recorded again when the key changes (another eps), on block lists
// too; a step the capture refuses (it synchronizes) runs directly, with the same result.
void check_repeat(bool refuse) {
  const Case c{300, 200, 3, 0.05};
  const HostData h = make_data(c, 9090);
  Cast<float> ht = cast<float>(h, c);
  Context gpu({Backend::kCuda});
  for (const bool lists : {false, true}) {
    SCOPED_TRACE(lists ? "block lists" : "dense");
    auto one = make_oracle(gpu, ht.problem, Precision::kFp32);
    auto two = make_oracle(gpu, ht.problem, Precision::kFp32);
    BlockList lf, lg;
    if (lists) {
      // Every other key tile of every row tile (both sides): a schedule that is not dense.
      for (auto [list, rows, keys] : {std::make_tuple(&lf, c.n, c.m),
                                      std::make_tuple(&lg, c.m, c.n)}) {
        const BlockShape sh = one->block_shape();
        list->row_tile = sh.row_tile;
        list->key_tile = sh.key_tile;
        const std::int64_t tiles = (rows + sh.row_tile - 1) / sh.row_tile;
        const std::int64_t kt = (keys + sh.key_tile - 1) / sh.key_tile;
        list->run_ptr.assign(1, 0);
        for (std::int64_t t = 0; t < tiles; ++t) {
          for (std::int64_t k = t % 2; k < kt; k += 2) {
            list->runs.push_back(std::int32_t(k));
            list->runs.push_back(std::int32_t(k + 1));
          }
          list->run_ptr.push_back(std::int64_t(list->runs.size() / 2));
        }
      }
      one->set_block_lists(&lf, &lg);
      two->set_block_lists(&lf, &lg);
    }
    struct State {
      Buffer<float> f, g, pf, pg;
      Buffer<double> err;
    };
    auto state = [&]() {
      State st{Buffer<float>(gpu, c.n), Buffer<float>(gpu, c.m), Buffer<float>(gpu, c.n),
               Buffer<float>(gpu, c.m), Buffer<double>(gpu, 4)};
      detail::fill_bytes(gpu, st.f.data(), MemorySpace::kDevice, 0,
                         sizeof(float) * std::size_t(c.n));
      detail::fill_bytes(gpu, st.g.data(), MemorySpace::kDevice, 0,
                         sizeof(float) * std::size_t(c.m));
      return st;
    };
    State a = state(), b = state();
    const double w = 1.3;
    // One relaxed alternating step with its column residual (the blends as vector operations),
    // then a fused relaxed f update.
    auto step = [&](Oracle<float>& o, State& st, float eps, bool sync) {
      auto v = [&](Buffer<float>& x) {
        return MatrixView<float>{x.data(), x.size(), 1, 1, MemorySpace::kDevice};
      };
      VectorOps<float>& ops = o.ops();
      ops.axpby(1.0, v(st.f), 0.0, v(st.pf));
      o.update_f(eps, st.g.data(), st.f.data(), nullptr);
      ops.axpby(1 - w, v(st.pf), w, v(st.f));
      ops.axpby(1.0, v(st.g), 0.0, v(st.pg));
      o.update_g(eps, st.f.data(), st.g.data(), st.err.data());
      ops.axpby(1 - w, v(st.pg), w, v(st.g));
      o.relaxed_update(0, eps, 1.2f, st.g.data(), st.f.data(), nullptr);  // the blend fused
      if (sync) gpu.synchronize();
    };
    for (const float eps : {0.2f, 0.05f}) {
      const std::uint64_t key = eps == 0.2f ? 1 : 2;
      one->repeat(5, key, [&] { step(*one, a, eps, false); });
      one->repeat(1, key, [&] { step(*one, a, eps, false); });  // the recorded step again
      for (int k = 0; k < 6; ++k) step(*two, b, eps, false);
      EXPECT_EQ(host_copy(gpu, a.f), host_copy(gpu, b.f)) << "eps " << eps;
      EXPECT_EQ(host_copy(gpu, a.g), host_copy(gpu, b.g)) << "eps " << eps;
      EXPECT_EQ(host_scalar(gpu, a.err), host_scalar(gpu, b.err)) << "eps " << eps;
      EXPECT_GT(host_scalar(gpu, a.err), 0.0);
    }
    if (!refuse) continue;
    // A step that synchronizes: the capture refuses it (compute-sanitizer reports the refused
    // calls as API errors: this part runs only in its own test), the steps run directly.
    one->repeat(3, 3, [&] { step(*one, a, 0.05f, true); });
    for (int k = 0; k < 3; ++k) step(*two, b, 0.05f, true);
    EXPECT_EQ(host_copy(gpu, a.f), host_copy(gpu, b.f));
    EXPECT_EQ(host_copy(gpu, a.g), host_copy(gpu, b.g));
    // And later steps still run (directly, after a refusal).
    one->repeat(2, 2, [&] { step(*one, a, 0.05f, false); });
    for (int k = 0; k < 2; ++k) step(*two, b, 0.05f, false);
    EXPECT_EQ(host_copy(gpu, a.g), host_copy(gpu, b.g));
  }
  if (!refuse) return;
  // A step with a large host copy (the size that goes through the context's pinned buffers
  // outside a capture): inside a capture it is the plain copy (a copy node from the caller's
  // memory, which CUDA 13 records; a capture that refused it would run the steps directly), the
  // data lands either way, and the staged copies work afterwards (their events were not
  // captured).
  auto three = make_oracle(gpu, ht.problem, Precision::kFp32);
  const std::size_t big = std::size_t(5) << 20;
  std::vector<float> host(big / sizeof(float));
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = float(i % 1000);
  Buffer<float> dev(gpu, std::int64_t(host.size()));
  int ran = 0;
  three->repeat(2, 7, [&] {
    ++ran;
    copy(gpu, host_vector<const float>(host.data(), std::int64_t(host.size())), dev.view());
  });
  EXPECT_TRUE(ran == 1 || ran == 3) << ran;  // recorded once, or refused and run twice
  std::vector<float> back(host.size(), -1.0f);
  copy(gpu, dev.cview(), host_vector<float>(back.data(), std::int64_t(back.size())));
  EXPECT_TRUE(back == host);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = float(i % 777) + 0.5f;
  copy(gpu, host_vector<const float>(host.data(), std::int64_t(host.size())), dev.view());
  copy(gpu, dev.cview(), host_vector<float>(back.data(), std::int64_t(back.size())));
  EXPECT_TRUE(back == host);
}

TEST(CudaSinkhorn, RepeatedStepsReplayTheSameBits) {
  SKIP_WITHOUT_GPU();
  check_repeat(false);
}

TEST(CudaSinkhorn, RepeatedStepsTheCaptureRefusesRunDirectly) {
  SKIP_WITHOUT_GPU();
  check_repeat(true);
}

TEST(CudaSinkhorn, DeviceResidentProblemMatchesHost) {
  SKIP_WITHOUT_GPU();
  const Case c{150, 97, 5, 0.2, 1.0, true};
  const HostData h = make_data(c, 4242);
  Cast<float> ht = cast<float>(h, c);
  Context gpu({Backend::kCuda});
  Context cpu({Backend::kCpu});
  // x with row stride d + 3 (padding filled with NaN: never read), y, a, b contiguous.
  const std::int64_t sx = c.d + 3;
  std::vector<float> xs(std::size_t(c.n * sx), std::numeric_limits<float>::quiet_NaN());
  for (std::int64_t i = 0; i < c.n; ++i)
    for (std::int64_t k = 0; k < c.d; ++k)
      xs[std::size_t(i * sx + k)] = ht.x[std::size_t(i * c.d + k)];
  auto upload = [&](const std::vector<float>& v) {
    Buffer<float> b(gpu, std::int64_t(v.size()), MemorySpace::kDevice);
    copy(gpu, host_vector<const float>(v.data(), std::int64_t(v.size())), b.view());
    return b;
  };
  const Buffer<float> dx = upload(xs), dy = upload(ht.y), da = upload(ht.a), db = upload(ht.b);
  gpu.synchronize();
  Problem<float> dp = ht.problem;
  dp.features().x = {dx.data(), c.n, c.d, sx, MemorySpace::kDevice};
  dp.features().y = {dy.data(), c.m, c.d, c.d, MemorySpace::kDevice};
  dp.a = {da.data(), c.n, MemorySpace::kDevice};
  dp.b = {db.data(), c.m, MemorySpace::kDevice};
  SinkhornOptions o;
  o.max_iterations = 30;
  o.tolerance = 1e-300;
  for (Precision p : {Precision::kTf32, Precision::kFp32}) {
    for (const Context* ctx : {&gpu, &cpu}) {
      if (ctx == &cpu && p != Precision::kFp32) continue;
      SCOPED_TRACE(to_string(p) + (ctx == &gpu ? " cuda" : " cpu"));
      o.precision = p;
      Potentials<float> ph, pd;
      const SinkhornSummary sh = solve_sinkhorn(*ctx, ht.problem, o, &ph);
      const SinkhornSummary sd = solve_sinkhorn(*ctx, dp, o, &pd);
      EXPECT_EQ(sd.iterations, sh.iterations);
      EXPECT_EQ(sd.dual_cost, sh.dual_cost);
      EXPECT_EQ(sd.primal_cost, sh.primal_cost);
      EXPECT_EQ(host_copy(*ctx, pd.f), host_copy(*ctx, ph.f));
      EXPECT_EQ(host_copy(*ctx, pd.g), host_copy(*ctx, ph.g));
    }
  }
  // A NaN coordinate inside the rows (not the stride padding) is found after the copy.
  std::vector<float> bad = ht.y;
  bad[7] = std::numeric_limits<float>::quiet_NaN();
  const Buffer<float> dbad = upload(bad);
  gpu.synchronize();
  Problem<float> bp = dp;
  bp.features().y = {dbad.data(), c.m, c.d, c.d, MemorySpace::kDevice};
  try {
    solve_sinkhorn(gpu, bp, o);
    ADD_FAILURE() << "a NaN coordinate in device data was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("problem.y"), std::string::npos) << e.what();
  }
}

// Host problems are built on the device from one upload of each view (prepare_problem_scalars,
// lib/cuda/operands.hpp), device problems through the host's copies (prepare_problem_data): the
// same problem either way must solve to the same bits (the certificate to its atomics' order),
// for every kind the first path takes
// (uniform and masked weights, unbalanced weights as given, a reference for the certificate, one
// cloud as both sides; float and double; fp32, tf32 and fp64).
template <class T>
void check_device_built_like_host(Precision precision) {
  const Case c{130, 90, 3, 0.3, 0.0, true};
  const HostData h = make_data(c, 777);
  Cast<T> ht = cast<T>(h, c);
  std::vector<double> rx(h.x), ry(h.y);
  for (auto& v : rx) v += 1e-9;  // a reference that differs from the engine's coordinates
  for (auto& v : ry) v -= 1e-9;
  Context gpu({Backend::kCuda});
  auto up = [&](const auto& v) {
    using U = typename std::decay_t<decltype(v)>::value_type;
    Buffer<U> b(gpu, std::int64_t(v.size()), MemorySpace::kDevice);
    copy(gpu, host_vector<const U>(v.data(), std::int64_t(v.size())), b.view());
    return b;
  };
  const Buffer<T> dx = up(ht.x), dy = up(ht.y), da = up(ht.a), db = up(ht.b);
  const Buffer<double> drx = up(rx), dry = up(ry);
  gpu.synchronize();
  auto on_device = [&](Problem<T> p) {
    SqEuclidean<T>& f = p.features();
    const bool self = f.x.data == f.y.data;
    f.x = {dx.data(), c.n, c.d, c.d, MemorySpace::kDevice};
    f.y = self ? f.x : MatrixView<const T>{dy.data(), c.m, c.d, c.d, MemorySpace::kDevice};
    if (p.a.data) p.a = {da.data(), c.n, MemorySpace::kDevice};
    if (p.b.data) p.b = {db.data(), c.m, MemorySpace::kDevice};
    if (p.reference_x.data) p.reference_x = {drx.data(), c.n, c.d, c.d, MemorySpace::kDevice};
    if (p.reference_y.data) p.reference_y = {dry.data(), c.m, c.d, c.d, MemorySpace::kDevice};
    return p;
  };
  std::vector<std::pair<std::string, Problem<T>>> kinds;
  kinds.emplace_back("masked weights", ht.problem);
  Problem<T> u = ht.problem;
  u.a = {};
  u.b = {};
  kinds.emplace_back("uniform weights", u);
  Problem<T> ub = ht.problem;
  ub.rho_a = 0.7;
  ub.rho_b = 1.5;
  kinds.emplace_back("unbalanced", ub);
  Problem<T> r = ht.problem;
  r.reference_x = host_matrix<const double>(rx.data(), c.n, c.d);
  r.reference_y = host_matrix<const double>(ry.data(), c.m, c.d);
  kinds.emplace_back("reference", r);
  Problem<T> self = u;
  self.features().y = self.features().x;
  kinds.emplace_back("one cloud", self);
  SinkhornOptions o;
  o.max_iterations = 25;
  o.tolerance = 1e-300;
  o.precision = precision;
  for (const auto& [what, hp] : kinds) {
    SCOPED_TRACE(what + " " + to_string(precision));
    Potentials<T> ph, pd;
    const SinkhornSummary sh = solve_sinkhorn(gpu, hp, o, &ph);
    const SinkhornSummary sd = solve_sinkhorn(gpu, on_device(hp), o, &pd);
    EXPECT_EQ(sh.iterations, sd.iterations);
    EXPECT_EQ(sh.dual_cost, sd.dual_cost);
    EXPECT_EQ(sh.primal_cost, sd.primal_cost);
    // The certificate's sums end in double atomics (lib/cuda/certify.cu): their order, and so
    // the last bits, vary from run to run; everything else is bitwise.
    EXPECT_NEAR(sh.marginal_error, sd.marginal_error, 1e-12 * sh.marginal_error);
    EXPECT_TRUE(std::isfinite(sh.dual_cost));
    EXPECT_EQ(host_copy(gpu, ph.f), host_copy(gpu, pd.f));
    EXPECT_EQ(host_copy(gpu, ph.g), host_copy(gpu, pd.g));
  }
}

TEST(CudaSinkhorn, HostProblemsBuiltOnTheDeviceMatchTheHostPath) {
  SKIP_WITHOUT_GPU();
  check_device_built_like_host<float>(Precision::kFp32);
  check_device_built_like_host<float>(Precision::kTf32);
  check_device_built_like_host<double>(Precision::kFp64);
}

// bf16 against the unrounded inputs: bound tol_potentials(kBf16) = 2^-8 of the RMS cost (the
// derivation is at tol_potentials), the eps / RMS cost ratios of the tf32 test (~0.05), where
// the first-order analysis holds (|dC| / eps stays well below 1).
TEST(CudaSinkhorn, Bf16AccuracyAgainstUnroundedFp64) {
  SKIP_WITHOUT_GPU();
  const std::vector<Case> cases = {{211, 173, 3, 0.5, 4.0}, {90, 120, 16, 2.0}, {80, 64, 64, 8.0}};
  unsigned seed = 650;
  for (const Case& c : cases) {
    check_solve<float>(c, Precision::kBf16, Schedule::kAlternating, 40, seed++, false);
    check_solve<float>(c, Precision::kBf16, Schedule::kSymmetric, 40, seed++, false);
  }
}

// TF32 against the unrounded inputs: the rounding of the coordinates to 10 mantissa bits moves
// each cost by ~2^-11 of its scale, so potentials (in units of the RMS cost) and costs agree to
// ~3e-4 when eps is not far below that scale (here eps / RMS cost ~ 0.05).
TEST(CudaSinkhorn, Tf32AccuracyAgainstUnroundedFp64) {
  SKIP_WITHOUT_GPU();
  const std::vector<Case> cases = {{211, 173, 3, 0.5, 4.0}, {90, 120, 16, 2.0}, {80, 64, 64, 8.0}};
  unsigned seed = 600;
  for (const Case& c : cases) {
    check_solve<float>(c, Precision::kTf32, Schedule::kAlternating, 40, seed++, false);
    check_solve<float>(c, Precision::kTf32, Schedule::kSymmetric, 40, seed++, false);
  }
}

// n = m = 100,000: one f-update on the GPU against a float64 recomputation of sampled rows on the
// host, f_i = -eps LSE_j [log b_j + (g_j - |x_i - y_j|^2)/eps], from the inputs the engine sees
// (float; for tf32/bf16 the rounded centred coordinates): relative error <= 1e-5. Against the
// unrounded inputs, a rigorous per-row bound: f_i is eps * LSE_j of terms in which the cost enters
// as -C_ij/eps, and LSE is 1-Lipschitz in the max norm, so rounding the coordinates moves f_i by
// at most max_j |C~_ij - C_ij| (C~ = cost of the rounded points, computed here in float64); the
// kernel's own error (the 1e-5 above) comes on top. tf32 must also stay within 2^-10 relative (the
// first-order effect of 10 mantissa bits on these clouds, measured 2e-4..7e-4).
void check_large(std::int64_t d, Precision p) {
  SCOPED_TRACE("d=" + std::to_string(d) + " " + to_string(p));
  const std::int64_t n = 100000, m = 100000;
  const double eps = 0.1 * double(d);  // keeps many keys active per row at every d
  std::mt19937_64 rng(42 + unsigned(d));
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> ud(0.1f, 1.1f);
  std::vector<float> x(static_cast<std::size_t>(n * d)), y(static_cast<std::size_t>(m * d)),
      a(static_cast<std::size_t>(n)), b(static_cast<std::size_t>(m)),
      g(static_cast<std::size_t>(m));
  for (auto& v : x) v = nd(rng) + 1.f;
  for (auto& v : y) v = nd(rng);
  for (auto& v : a) v = ud(rng);
  for (auto& v : b) v = ud(rng);
  for (auto& v : g) v = float(d) * 0.5f * nd(rng);
  double sa = 0, sb = 0;
  for (float v : a) sa += v;
  for (float v : b) sb += v;
  for (auto& v : a) v = float(v / sa);
  for (auto& v : b) v = float(v / sb);
  Problem<float> pr;
  pr.features().x = host_matrix<const float>(x.data(), n, d);
  pr.features().y = host_matrix<const float>(y.data(), m, d);
  pr.a = host_vector<const float>(a.data(), n);
  pr.b = host_vector<const float>(b.data(), m);
  pr.epsilon = eps;
  Context gpu({Backend::kCuda});
  auto dev = make_oracle(gpu, pr, p);
  Buffer<float> gd(gpu, m), fd(gpu, n);
  copy(gpu, VectorView<const float>{g.data(), m, MemorySpace::kHost}, gd.view());
  dev->update_f(float(eps), gd.data(), fd.data(), nullptr);
  const std::vector<float> f = to_host(gpu, fd.cview());
  // Coordinates as the engine sees them (tf32/bf16: rounded after centring on the box midpoint).
  std::vector<double> xe(x.begin(), x.end()), ye(y.begin(), y.end());
  if (rounds_inputs(p)) {
    for (std::int64_t k = 0; k < d; ++k) {
      double lo = 1e300, hi = -1e300;
      for (std::int64_t i = 0; i < n; ++i)
        lo = std::min(lo, xe[std::size_t(i * d + k)]),
        hi = std::max(hi, xe[std::size_t(i * d + k)]);
      for (std::int64_t j = 0; j < m; ++j)
        lo = std::min(lo, ye[std::size_t(j * d + k)]),
        hi = std::max(hi, ye[std::size_t(j * d + k)]);
      const double ctr = 0.5 * (lo + hi);
      for (std::int64_t i = 0; i < n; ++i)
        xe[std::size_t(i * d + k)] =
            double(engine_round(p, float(xe[std::size_t(i * d + k)] - ctr)));
      for (std::int64_t j = 0; j < m; ++j)
        ye[std::size_t(j * d + k)] =
            double(engine_round(p, float(ye[std::size_t(j * d + k)] - ctr)));
    }
  }
  double bsum = 0;
  for (float v : b) bsum += v;
  auto row_ref = [&](const std::vector<double>& X, const std::vector<double>& Y, std::int64_t i) {
    std::vector<double> sc(static_cast<std::size_t>(m));
    double mx = -1e300;
    for (std::int64_t j = 0; j < m; ++j) {
      double c2 = 0;
      for (std::int64_t k = 0; k < d; ++k) {
        const double df = X[std::size_t(i * d + k)] - Y[std::size_t(j * d + k)];
        c2 += df * df;
      }
      sc[std::size_t(j)] =
          std::log(double(b[std::size_t(j)]) / bsum) + (double(g[std::size_t(j)]) - c2) / eps;
      mx = std::max(mx, sc[std::size_t(j)]);
    }
    double sum = 0;
    for (double v : sc) sum += std::exp(v - mx);
    return -eps * (mx + std::log(sum));
  };
  const std::vector<double> xo(x.begin(), x.end()), yo(y.begin(), y.end());
  // max_j |C~_ij - C_ij| for row i (C translation invariant: the centring cancels).
  auto rounding_bound = [&](std::int64_t i) {
    double bound = 0;
    for (std::int64_t j = 0; j < m; ++j) {
      double ce = 0, co = 0;
      for (std::int64_t k = 0; k < d; ++k) {
        const double de = xe[std::size_t(i * d + k)] - ye[std::size_t(j * d + k)];
        const double dq = xo[std::size_t(i * d + k)] - yo[std::size_t(j * d + k)];
        ce += de * de;
        co += dq * dq;
      }
      bound = std::max(bound, std::abs(ce - co));
    }
    return bound;
  };
  double worst = 0, worst_unrounded = 0, worst_bound_ratio = 0;
  for (int s = 0; s < 48; ++s) {
    const std::int64_t i = (s * 2083) % n;
    ASSERT_TRUE(std::isfinite(f[std::size_t(i)])) << "row " << i;
    const double fi = double(f[std::size_t(i)]);
    const double r = row_ref(xe, ye, i);
    worst = std::max(worst, std::abs(fi - r) / std::max(std::abs(r), 1.0));
    if (rounds_inputs(p)) {
      const double ru = row_ref(xo, yo, i);
      worst_unrounded = std::max(worst_unrounded, std::abs(fi - ru) / std::max(std::abs(ru), 1.0));
      const double allowed = rounding_bound(i) + 1e-5 * std::max(std::abs(ru), 1.0);
      EXPECT_LE(std::abs(fi - ru), allowed) << "row " << i << " against the unrounded inputs";
      worst_bound_ratio = std::max(worst_bound_ratio, std::abs(fi - ru) / allowed);
    }
  }
  EXPECT_LE(worst, 1e-5) << "max relative row error over 48 sampled rows";
  if (p == Precision::kTf32)
    EXPECT_LE(worst_unrounded, std::ldexp(1.0, -10)) << "tf32 against the unrounded inputs";
  std::printf(
      "[ info     ] d=%lld %s: max row error %.3g (engine inputs), %.3g (unrounded; "
      "%.2g of the rounding bound)\n",
      (long long)d, to_string(p).c_str(), worst, rounds_inputs(p) ? worst_unrounded : worst,
      worst_bound_ratio);
}

TEST(CudaLarge, UpdateRowsMatchHostFloat64) {
  SKIP_WITHOUT_GPU();
  for (std::int64_t d : {3, 64}) {
    check_large(d, Precision::kFp32);
    check_large(d, Precision::kTf32);
  }
}

TEST(CudaLarge, UpdateRowsMatchHostFloat64Bf16) {
  SKIP_WITHOUT_GPU();
  for (std::int64_t d : {3, 64}) check_large(d, Precision::kBf16);
}

}  // namespace
}  // namespace kantor
