// Every pass of the CPU Oracle against the float64 dense reference (tests/support), in fp64
// (~1e-12 relative) and fp32 (~1e-5 relative), times the conditioning 1 + max C / eps of the
// plan entries where a pass goes through exp(C/eps). Potentials are the reference's converged
// ones plus a perturbation of order eps, so that no pass sits at a fixed point.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kantor/context.hpp"
#include "kantor/error.hpp"
#include "kantor/oracle.hpp"
#include "support/certificate_reference.hpp"
#include "support/fp32_certificate_check.hpp"
#include "support/compare.hpp"
#include "support/dense_reference.hpp"
#include "support/random_problems.hpp"
#include "support/tolerance.hpp"

namespace kantor::testing {
namespace {

enum class Cloud { kGaussian, kMixture, kFar, kUnitSquare };
enum class Weights { kUniform, kRandom, kZeros };

struct OracleCase {
  std::string name;
  std::int64_t n, m, d;
  Cloud cloud;
  Weights weights;
  double eps;
  double cost_scale = 1.0;
};

std::ostream& operator<<(std::ostream& os, const OracleCase& c) { return os << c.name; }

std::vector<double> make_cloud(Rng& rng, Cloud kind, std::int64_t count, std::int64_t d,
                               double shift) {
  switch (kind) {
    case Cloud::kGaussian:
      return gaussian_cloud(rng, count, d, shift, 1.0);
    case Cloud::kMixture:
      return mixture_cloud(rng, count, d, 3, 2.0);
    case Cloud::kFar:
      return gaussian_cloud(rng, count, d, 100.0 + shift, 1.0);
    case Cloud::kUnitSquare: {
      std::uniform_real_distribution<double> u(0.0, 1.0);
      std::vector<double> v(std::size_t(count * d));
      for (double& e : v) e = u(rng);
      return v;
    }
  }
  return {};
}

// One case: data in T, dense reference, and perturbed potentials (rounded to T).
template <class T>
struct Fixture {
  PointData<T> data;
  DenseProblem dense;
  std::vector<T> f, g;         // test potentials in T
  std::vector<double> fd, gd;  // the same numbers in double
  double eps = 0;
  double max_cost = 0;
  Context ctx{ContextOptions{Backend::kCpu, 2}};
  std::unique_ptr<Oracle<T>> oracle;

  explicit Fixture(const OracleCase& c) : eps(c.eps) {
    Rng rng(1234 + std::uint64_t(c.n * 7919 + c.m * 131 + c.d));
    std::vector<double> x = make_cloud(rng, c.cloud, c.n, c.d, 0.0);
    std::vector<double> y = make_cloud(rng, c.cloud, c.m, c.d, 0.5);
    std::vector<double> a, b;
    if (c.weights == Weights::kRandom) {
      a = random_weights(rng, c.n);
      b = same_mass(random_weights(rng, c.m), a);
    } else if (c.weights == Weights::kZeros) {
      a = with_zeros(random_weights(rng, c.n), 1, 3);
      b = same_mass(with_zeros(random_weights(rng, c.m), 0, 4), a);
    }
    data = make_point_data<T>(c.d, x, y, a, b, c.eps, c.cost_scale);
    dense = data.dense();
    max_cost = dense.max_cost();
    // Annealing plus a few hundred iterations: a well-scaled plan is all the passes need.
    const DenseSolution sol = dense_solve(dense, eps, 100);
    std::normal_distribution<double> nd(0.0, 0.5 * eps);
    f.resize(std::size_t(c.n));
    g.resize(std::size_t(c.m));
    for (std::int64_t i = 0; i < c.n; ++i) f[std::size_t(i)] = T(sol.f[std::size_t(i)] + nd(rng));
    for (std::int64_t j = 0; j < c.m; ++j) g[std::size_t(j)] = T(sol.g[std::size_t(j)] + nd(rng));
    fd.assign(f.begin(), f.end());
    gd.assign(g.begin(), g.end());
    oracle = make_oracle(ctx, data.problem(),
                         std::is_same<T, double>::value ? Precision::kFp64 : Precision::kFp32);
  }

  double plan_tol() const { return plan_rtol<T>(max_cost, eps); }
  double pot_tol() const { return potential_atol<T>(max_cost); }
  // Bound on |(P v)_i - ref_i|: plan_tol * sum_j P_ij |v_j| (+ a tiny absolute floor).
  std::vector<double> apply_bound(const std::vector<double>& P, const std::vector<double>& v,
                                  bool transpose) const {
    std::vector<double> absv(v.size());
    for (std::size_t k = 0; k < v.size(); ++k) absv[k] = std::abs(v[k]);
    std::vector<double> s = transpose ? dense_apply_t(dense, P, absv) : dense_apply(dense, P, absv);
    for (double& e : s) e = plan_tol() * e + 1e-300;
    return s;
  }
};

class CpuOracle : public ::testing::TestWithParam<OracleCase> {};

template <class T>
void check_updates(const OracleCase& c) {
  Fixture<T> fx(c);
  Oracle<T>& o = *fx.oracle;
  ASSERT_EQ(o.n(), c.n);
  ASSERT_EQ(o.m(), c.m);
  ASSERT_EQ(o.dim(), c.d);
  const T eps = T(c.eps);
  // update_f with its fused row error.
  {
    std::vector<T> f = fx.f;
    double err = -1;
    o.update_f(eps, fx.g.data(), f.data(), &err);
    EXPECT_TRUE(all_close(f, dense_update_f(fx.dense, c.eps, fx.gd), fx.pot_tol())) << "update_f";
    const double ref = dense_row_error(fx.dense, c.eps, fx.fd, fx.gd);
    EXPECT_TRUE(near(err, ref, fx.plan_tol() * (1 + ref))) << "update_f row error";
    std::vector<T> f2 = fx.f;
    o.update_f(eps, fx.g.data(), f2.data(), nullptr);  // no error requested: same potentials
    EXPECT_EQ(f, f2);
  }
  // update_g with its fused column error.
  {
    std::vector<T> g = fx.g;
    double err = -1;
    o.update_g(eps, fx.f.data(), g.data(), &err);
    EXPECT_TRUE(all_close(g, dense_update_g(fx.dense, c.eps, fx.fd), fx.pot_tol())) << "update_g";
    const double ref = dense_col_error(fx.dense, c.eps, fx.fd, fx.gd);
    EXPECT_TRUE(near(err, ref, fx.plan_tol() * (1 + ref))) << "update_g column error";
  }
  // symmetric_step: both from the old values, weights 1 and 1/2, error of the old plan.
  for (double w : {1.0, 0.5}) {
    std::vector<T> f = fx.f, g = fx.g;
    double err = -1;
    o.symmetric_step(eps, T(w), f.data(), g.data(), &err);
    std::vector<double> tf = dense_update_f(fx.dense, c.eps, fx.gd);
    std::vector<double> tg = dense_update_g(fx.dense, c.eps, fx.fd);
    for (std::size_t i = 0; i < tf.size(); ++i) tf[i] = (1 - w) * fx.fd[i] + w * tf[i];
    for (std::size_t j = 0; j < tg.size(); ++j) tg[j] = (1 - w) * fx.gd[j] + w * tg[j];
    EXPECT_TRUE(all_close(f, tf, fx.pot_tol())) << "symmetric_step f, w = " << w;
    EXPECT_TRUE(all_close(g, tg, fx.pot_tol())) << "symmetric_step g, w = " << w;
    const double ref = dense_marginal_error(fx.dense, c.eps, fx.fd, fx.gd);
    EXPECT_TRUE(near(err, ref, fx.plan_tol() * (1 + ref))) << "symmetric_step error, w = " << w;
  }
  // relaxed_update: (1 - w) old + w T(other) on either side (w = 1 is the plain update, bit for
  // bit), its residual update_f's / update_g's (of the old potential); a bad side is refused.
  for (double w : {1.0, 1.6, 0.7}) {
    std::vector<T> f = fx.f, g = fx.g, f1 = fx.f, g1 = fx.g;
    double ef = -1, eg = -1, ef1 = -1, eg1 = -1;
    o.relaxed_update(0, eps, T(w), fx.g.data(), f.data(), &ef);
    o.relaxed_update(1, eps, T(w), fx.f.data(), g.data(), &eg);
    o.update_f(eps, fx.g.data(), f1.data(), &ef1);
    o.update_g(eps, fx.f.data(), g1.data(), &eg1);
    EXPECT_EQ(ef, ef1) << "relaxed_update row error, w = " << w;
    EXPECT_EQ(eg, eg1) << "relaxed_update column error, w = " << w;
    if (w == 1.0) {
      EXPECT_EQ(f, f1);
      EXPECT_EQ(g, g1);
    }
    const double wt = double(T(w));
    std::vector<double> tf = dense_update_f(fx.dense, c.eps, fx.gd);
    std::vector<double> tg = dense_update_g(fx.dense, c.eps, fx.fd);
    for (std::size_t i = 0; i < tf.size(); ++i) tf[i] = (1 - wt) * fx.fd[i] + wt * tf[i];
    for (std::size_t j = 0; j < tg.size(); ++j) tg[j] = (1 - wt) * fx.gd[j] + wt * tg[j];
    EXPECT_TRUE(all_close(f, tf, 2 * fx.pot_tol())) << "relaxed_update f, w = " << w;
    EXPECT_TRUE(all_close(g, tg, 2 * fx.pot_tol())) << "relaxed_update g, w = " << w;
  }
  {
    std::vector<T> f = fx.f;
    EXPECT_THROW(o.relaxed_update(2, eps, T(1), fx.g.data(), f.data(), nullptr),
                 kantor::InvalidArgument);
  }
}

template <class T>
void check_transport(const OracleCase& c) {
  Fixture<T> fx(c);
  Oracle<T>& o = *fx.oracle;
  const T eps = T(c.eps);
  const std::vector<double> P = dense_plan(fx.dense, c.eps, fx.fd, fx.gd);
  Rng rng(99);
  // Signed values: sums with cancellation are covered by the |P| |v| bound.
  const std::vector<double> v = gaussian_cloud(rng, c.m, 1), u = gaussian_cloud(rng, c.n, 1);
  const std::vector<T> vt = cast_vector<T>(v), ut = cast_vector<T>(u);
  const std::vector<double> vd(vt.begin(), vt.end()), ud(ut.begin(), ut.end());
  {
    std::vector<T> out(std::size_t(c.n));
    o.apply(eps, fx.f.data(), fx.g.data(), vt.data(), out.data());
    EXPECT_TRUE(all_close(out, dense_apply(fx.dense, P, vd), fx.apply_bound(P, vd, false)))
        << "apply";
  }
  {
    std::vector<T> out(std::size_t(c.m));
    o.apply_t(eps, fx.f.data(), fx.g.data(), ut.data(), out.data());
    EXPECT_TRUE(all_close(out, dense_apply_t(fx.dense, P, ud), fx.apply_bound(P, ud, true)))
        << "apply_t";
  }
  {
    const std::int64_t k = 3;
    const std::vector<T> V = cast_vector<T>(gaussian_cloud(rng, c.m, k));
    const std::vector<double> Vd(V.begin(), V.end());
    // out with a padded stride: the view's stride must be honoured.
    const std::int64_t stride = k + 2;
    std::vector<T> out(std::size_t(c.n * stride), T(-7));
    o.apply_mat(eps, fx.f.data(), fx.g.data(), host_matrix<const T>(V.data(), c.m, k),
                MatrixView<T>{out.data(), c.n, k, stride, MemorySpace::kHost});
    const std::vector<double> ref = dense_apply_mat(fx.dense, P, Vd, k);
    std::vector<T> got(std::size_t(c.n * k));
    for (std::int64_t i = 0; i < c.n; ++i)
      for (std::int64_t q = 0; q < k; ++q) {
        got[std::size_t(i * k + q)] = out[std::size_t(i * stride + q)];
        for (std::int64_t pad = k; pad < stride; ++pad)
          EXPECT_EQ(out[std::size_t(i * stride + pad)], T(-7)) << "apply_mat wrote padding";
      }
    std::vector<double> absV(Vd.size());
    for (std::size_t q = 0; q < Vd.size(); ++q) absV[q] = std::abs(Vd[q]);
    std::vector<double> bound = dense_apply_mat(fx.dense, P, absV, k);
    for (double& e : bound) e = fx.plan_tol() * e + 1e-300;
    EXPECT_TRUE(all_close(got, ref, bound)) << "apply_mat";
  }
  {
    std::vector<T> out(std::size_t(c.n * c.d));
    o.barycentric_map(eps, fx.f.data(), fx.g.data(), host_matrix<T>(out.data(), c.n, c.d));
    // The map is a convex combination of the y_j: error relative to max |y| (original coords).
    double ymax = 0;
    for (double e : fx.dense.y) ymax = std::max(ymax, std::abs(e));
    EXPECT_TRUE(
        all_close(out, dense_barycentric_map(fx.dense, c.eps, fx.gd), fx.plan_tol() * (1 + ymax)))
        << "barycentric_map";
  }
}

template <class T>
void check_values(const OracleCase& c) {
  Fixture<T> fx(c);
  Oracle<T>& o = *fx.oracle;
  const T eps = T(c.eps);
  const std::vector<double> P = dense_plan(fx.dense, c.eps, fx.fd, fx.gd);
  {
    double out = 0;
    o.dual_value(fx.f.data(), fx.g.data(), &out);
    double scale = 0;  // sum a|f| + b|g| bounds the rounding of the weights and the sums
    for (std::int64_t i = 0; i < c.n; ++i)
      scale += fx.dense.a[std::size_t(i)] * std::abs(fx.fd[std::size_t(i)]);
    for (std::int64_t j = 0; j < c.m; ++j)
      scale += fx.dense.b[std::size_t(j)] * std::abs(fx.gd[std::size_t(j)]);
    EXPECT_TRUE(near(out, dense_dual_value(fx.dense, fx.fd, fx.gd), pass_rtol<T>() * (1 + scale)))
        << "dual_value";
  }
  {
    double out[3] = {-1, -1, -1};
    o.plan_statistics(eps, fx.f.data(), fx.g.data(), out);
    const double mass = dense_mass(P);
    EXPECT_TRUE(near(out[0], mass, fx.plan_tol() * mass)) << "plan mass";
    // <P,C> is computed from norms and dot products of the centred clouds: the rounding scales
    // with mass * max C, not with <P,C> itself.
    EXPECT_TRUE(
        near(out[1], dense_transport_cost(fx.dense, P), fx.plan_tol() * mass * (1 + fx.max_cost)))
        << "<P,C>";
    double fg_scale = 0;
    for (std::int64_t i = 0; i < c.n; ++i)
      for (std::int64_t j = 0; j < c.m; ++j)
        fg_scale += P[std::size_t(i * c.m + j)] *
                    (std::abs(fx.fd[std::size_t(i)]) + std::abs(fx.gd[std::size_t(j)]));
    EXPECT_TRUE(
        near(out[2], dense_plan_fg(fx.dense, P, fx.fd, fx.gd), fx.plan_tol() * (mass + fg_scale)))
        << "sum P (f + g)";
  }
  {
    double out = -1;
    o.marginal_error(eps, fx.f.data(), fx.g.data(), &out);
    const double ref = dense_marginal_error(fx.dense, c.eps, fx.fd, fx.gd);
    EXPECT_TRUE(near(out, ref, fx.plan_tol() * (1 + ref))) << "marginal_error";
  }
  {
    // Weights are normalized to mass 1 in the oracle's memory.
    const T* a = o.a();
    const T* b = o.b();
    std::vector<T> av(a, a + c.n), bv(b, b + c.m);
    EXPECT_TRUE(all_close(av, fx.dense.a, pass_rtol<T>())) << "normalized a";
    EXPECT_TRUE(all_close(bv, fx.dense.b, pass_rtol<T>())) << "normalized b";
  }
}

// Self-problem (y = x, b = a): symmetric_step gives what the dense reference gives and, from
// f = g, keeps f = g bitwise (both sides are the same computation; the solver relies on it when
// it runs one side per step), with f != g too.
template <class T>
void check_self_symmetric_step() {
  Rng rng(404);
  const std::vector<double> x = mixture_cloud(rng, 37, 3), a = random_weights(rng, 37);
  const double eps = 0.1;
  PointData<T> data = make_point_data<T>(3, x, x, a, a, eps);
  const DenseProblem dense = data.dense();
  const DenseSolution sol = dense_solve_self(dense, eps, 200);
  Context ctx(ContextOptions{Backend::kCpu, 2});
  auto o = make_oracle(ctx, data.problem(),
                       std::is_same<T, double>::value ? Precision::kFp64 : Precision::kFp32);
  std::normal_distribution<double> nd(0.0, 0.5 * eps);
  std::vector<T> h(37), h2(37);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = T(sol.f[i] + nd(rng));
  for (std::size_t i = 0; i < h.size(); ++i) h2[i] = T(sol.f[i] + nd(rng));
  const std::vector<double> hd(h.begin(), h.end()), h2d(h2.begin(), h2.end());
  const double max_cost = dense.max_cost();
  for (bool equal : {true, false}) {
    SCOPED_TRACE(equal ? "f = g" : "f != g");
    std::vector<T> f = h, g = equal ? h : h2;
    const std::vector<double>& gd = equal ? hd : h2d;
    double err = -1;
    o->symmetric_step(T(eps), T(0.5), f.data(), g.data(), &err);
    std::vector<double> tf = dense_update_f(dense, eps, gd), tg = dense_update_g(dense, eps, hd);
    for (std::size_t i = 0; i < tf.size(); ++i) tf[i] = 0.5 * hd[i] + 0.5 * tf[i];
    for (std::size_t i = 0; i < tg.size(); ++i) tg[i] = 0.5 * gd[i] + 0.5 * tg[i];
    EXPECT_TRUE(all_close(f, tf, potential_atol<T>(max_cost)));
    EXPECT_TRUE(all_close(g, tg, potential_atol<T>(max_cost)));
    if (equal) EXPECT_EQ(f, g);
    const double ref = dense_marginal_error(dense, eps, hd, gd);
    EXPECT_TRUE(near(err, ref, plan_rtol<T>(max_cost, eps) * (1 + ref)));
  }
}

TEST(CpuOracleSelf, SymmetricStepFp64) { check_self_symmetric_step<double>(); }
TEST(CpuOracleSelf, SymmetricStepFp32) { check_self_symmetric_step<float>(); }

TEST_P(CpuOracle, UpdatesFp64) { check_updates<double>(GetParam()); }
TEST_P(CpuOracle, UpdatesFp32) { check_updates<float>(GetParam()); }
TEST_P(CpuOracle, TransportFp64) { check_transport<double>(GetParam()); }
TEST_P(CpuOracle, TransportFp32) { check_transport<float>(GetParam()); }
TEST_P(CpuOracle, ValuesFp64) { check_values<double>(GetParam()); }
TEST_P(CpuOracle, ValuesFp32) { check_values<float>(GetParam()); }

// Sizes include 1, odd sizes, n != m, more rows and keys than one 64 x 256 tile (tile edges),
// d in {1, 2, 3, 7, 64}, uniform / random / zero weights, tiny and large eps, c = 1/2.
INSTANTIATE_TEST_SUITE_P(
    Cases, CpuOracle,
    ::testing::Values(
        OracleCase{"n1_m1_d1", 1, 1, 1, Cloud::kGaussian, Weights::kUniform, 0.1},
        OracleCase{"n1_m7_d2", 1, 7, 2, Cloud::kGaussian, Weights::kRandom, 0.1},
        OracleCase{"n5_m1_d3", 5, 1, 3, Cloud::kGaussian, Weights::kRandom, 0.1},
        OracleCase{"n17_m13_d3", 17, 13, 3, Cloud::kGaussian, Weights::kUniform, 0.1},
        OracleCase{"n31_m29_d7_random", 31, 29, 7, Cloud::kMixture, Weights::kRandom, 0.3},
        OracleCase{"n23_m41_d64_random", 23, 41, 64, Cloud::kGaussian, Weights::kRandom, 1.0},
        OracleCase{"n19_m21_d2_zeros", 19, 21, 2, Cloud::kGaussian, Weights::kZeros, 0.1},
        OracleCase{"n131_m300_d3_tiles", 131, 300, 3, Cloud::kMixture, Weights::kRandom, 0.05},
        OracleCase{"n300_m77_d1_tiles_zeros", 300, 77, 1, Cloud::kGaussian, Weights::kZeros, 0.02},
        OracleCase{"n270_m530_d9_gemm_tiles", 270, 530, 9, Cloud::kGaussian, Weights::kZeros, 0.5},
        OracleCase{"n12_m15_d2_tiny_eps", 12, 15, 2, Cloud::kUnitSquare, Weights::kRandom, 1e-3},
        OracleCase{"n13_m11_d3_large_eps", 13, 11, 3, Cloud::kGaussian, Weights::kUniform, 100.0},
        OracleCase{"n9_m10_d3_far", 9, 10, 3, Cloud::kFar, Weights::kRandom, 0.1},
        OracleCase{"n15_m16_d2_half_cost", 15, 16, 2, Cloud::kGaussian, Weights::kRandom, 0.1,
                   0.5}),
    [](const ::testing::TestParamInfo<OracleCase>& info) { return info.param.name; });

}  // namespace
}  // namespace kantor::testing

namespace kantor::testing {
namespace {

// The CPU certificate's chunked, vectorized key loop (CpuOracle::certify_keys) against the
// independent long double reference (support/certificate_reference.hpp) on potentials that take
// every branch of its selects: masked keys whose potentials are NaN and +inf (they must add
// nothing), exponents below -64 (skipped), exponents below certificate_exp's range with a huge
// t (kept: std::exp fix-up), chunks of 64 keys with a partial last one (m = 150), and rows
// whose keys are all negligible. The reported bound must hold; the computed error must match the
// reference within the bound's slack. Then one exponent above 709 (a plan entry that overflows)
// must give a non-finite bound, never a small number (the fix-up keeps std::exp's inf).
TEST(CpuCertificate, ChunkedKeyLoopMatchesTheLongDoubleReferenceOnAdversarialPotentials) {
  Rng rng(77);
  const std::int64_t n = 37, m = 150, d = 3;
  const double eps = 0.05, c = 1.0;
  const std::vector<double> x = gaussian_cloud(rng, n, d, 0.0, 1.0);
  const std::vector<double> y = gaussian_cloud(rng, m, d, 0.2, 1.0);
  std::vector<double> a = random_weights(rng, n), b = random_weights(rng, m);
  b[3] = b[70] = b[149] = 0;  // masked keys
  b = same_mass(b, a);
  PointData<double> data = make_point_data<double>(d, x, y, a, b, eps);
  Context ctx(ContextOptions{Backend::kCpu, 2});
  auto o = make_oracle(ctx, data.problem(), Precision::kFp64);
  // Potentials near a plan: a few half steps of the dense reference.
  const DenseProblem dense = data.dense();
  std::vector<double> g0(std::size_t(m), 0.0), f0;
  for (int k = 0; k < 3; ++k) {
    f0 = dense_update_f(dense, eps, g0);
    g0 = dense_update_g(dense, eps, f0);
  }
  auto check = [&](const std::vector<double>& f, const std::vector<double>& g, const char* what) {
    SCOPED_TRACE(what);
    const ReferenceError ref = true_marginal_error(data.x, data.y, d, a, b, f, g, c, eps);
    const Certificate cert = o->certify(eps, f.data(), g.data());
    ASSERT_TRUE(std::isfinite(cert.bound)) << cert.bound;
    EXPECT_GE(cert.bound, ref.error - ref.slack);
    EXPECT_NEAR(cert.computed, ref.error, cert.slack + ref.slack + 1e-12 * ref.error);
  };
  std::vector<double> f = f0, g = g0;
  g[3] = std::numeric_limits<double>::quiet_NaN();  // masked keys: anything
  g[70] = std::numeric_limits<double>::infinity();
  for (std::int64_t j = 100; j < 110; ++j) g[std::size_t(j)] -= 50.0;  // z about -1000: skipped
  f[9] -= 100.0;  // a row whose keys are all negligible
  check(f, g, "masked, skipped and negligible pairs");
  // Every potential shifted by +-K (f + g unchanged up to rounding): t / eps >= 2^44 everywhere,
  // so no pair is skipped and the keys 100..109 (z about -1000 < -708) take the std::exp fix-up.
  constexpr double K = 1e12;
  for (double& v : f) v += K;
  for (std::int64_t j = 0; j < m; ++j)
    if (b[std::size_t(j)] > 0) g[std::size_t(j)] -= K;
  check(f, g, "huge t: nothing skipped, exponents below certificate_exp's range");
  // One row whose plan entries overflow (z > 709): a non-finite bound, never a small number.
  std::vector<double> f2 = f0;
  f2[0] += 40.0;  // z gains 800
  const Certificate bad = o->certify(eps, f2.data(), g0.data());
  EXPECT_FALSE(std::isfinite(bad.bound)) << bad.bound;
}

// The CPU engine's fp32 certificate path (CpuOracle::certify_side_fast): the shared scenarios of
// support/fp32_certificate_check.hpp.
TEST(CpuCertificate, Fp32PathBoundsTheTrueErrorAndFallsBack) {
  check_fp32_certificate(Context(ContextOptions{Backend::kCpu, 2}));
}

}  // namespace
}  // namespace kantor::testing
