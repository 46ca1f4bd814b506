// The fp32 certificate paths (Oracle::certify with a target: lib/cuda/certify.cu and the CPU
// oracle's certify_side_fast; the model in lib/core/certificate.hpp) on shared scenarios: odd
// sizes, zero weights with infinite potentials, coordinates far from the origin, potentials with
// a large gauge shift, solved and arbitrary potentials. Its bound is never below the true error
// (long double reference), its computed error is within its slack of the truth, the slack is
// small where the model says it is, and a target it cannot decide falls back to float64.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kantor/buffer.hpp"
#include "kantor/oracle.hpp"
#include "kantor/sinkhorn.hpp"
#include "support/certificate_reference.hpp"

namespace kantor::testing {

inline std::vector<double> fp32_check_cloud(std::mt19937_64& rng, std::int64_t n, std::int64_t d,
                                            double scale) {
  std::uniform_real_distribution<double> u(0, scale);
  std::vector<double> v(std::size_t(n * d));
  for (double& e : v) e = u(rng);
  return v;
}

inline std::vector<float> fp32_check_cast(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

// Uniform weights with row 1 and keys 0 and 2 masked (zero) where they exist, b scaled to a's
// total (a balanced problem with masked points on both sides).
inline void masked_test_weights(std::int64_t n, std::int64_t m, std::vector<double>* a,
                                std::vector<double>* b) {
  a->assign(std::size_t(n), 1.0);
  b->assign(std::size_t(m), 1.0);
  if (n > 2) (*a)[1] = 0;
  if (m > 2) (*b)[0] = 0, (*b)[2] = 0;
  double sa = 0, sb = 0;
  for (double v : *a) sa += v;
  for (double v : *b) sb += v;
  for (double& v : *b) v *= sa / sb;
}

// Sorts the rows of v (n x d, values in [0, 1]) by a Z-order key of 10 bits per axis.
inline void fp32_check_morton_sort(std::vector<double>* v, std::int64_t d) {
  const std::int64_t n = std::int64_t(v->size()) / d;
  std::vector<std::pair<std::uint64_t, std::int64_t>> key(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint64_t k = 0;
    for (int b = 9; b >= 0; --b)
      for (std::int64_t a = 0; a < d; ++a) {
        const auto q = std::uint64_t(std::min(1023.0, (*v)[std::size_t(i * d + a)] * 1024));
        k = (k << 1) | ((q >> b) & 1u);
      }
    key[std::size_t(i)] = {k, i};
  }
  std::sort(key.begin(), key.end());
  std::vector<double> out(v->size());
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t a = 0; a < d; ++a)
      out[std::size_t(i * d + a)] = (*v)[std::size_t(key[std::size_t(i)].second * d + a)];
  *v = out;
}

/// small_only: only the cases without a solve and below 1000 points a side (for
/// compute-sanitizer, which slows every kernel down by orders of magnitude).
inline void check_fp32_certificate(const Context& ctx, bool small_only = false) {
  std::mt19937_64 rng(14);
  std::normal_distribution<double> nd(0, 1);
  struct Shape {
    std::int64_t n, m, d;
    double eps, offset, gauge;
    bool solved;
    bool tight = false;  // Morton-sorted points: compact row blocks, a small slack expected
  };
  int decided_tight = 0;
  for (const Shape sh : {Shape{1, 1, 1, 0.3, 0, 0, false}, Shape{1, 40, 3, 0.05, 0, 0, false},
                         Shape{129, 33, 2, 0.01, 0, 0, true}, Shape{300, 257, 3, 0.01, 0, 0, true},
                         Shape{77, 5, 6, 0.1, 0, 0, true}, Shape{500, 400, 1, 1e-3, 0, 0, true},
                         Shape{700, 650, 3, 2e-3, 1000, 0, true},
                         Shape{400, 380, 3, 1e-2, 0, 50, true},
                         Shape{300, 300, 4, 0.02, 0, 0, false}, Shape{257, 129, 5, 0.5, 3, 0, true},
                         Shape{4096, 4096, 2, 0.01, 0, 0, true, true}}) {
    if (small_only && (sh.solved || sh.n > 1000)) continue;
    std::vector<double> x = fp32_check_cloud(rng, sh.n, sh.d, 1.0);
    std::vector<double> y = fp32_check_cloud(rng, sh.m, sh.d, 1.0);
    for (double& v : x) v += sh.offset;
    for (double& v : y) v += sh.offset;
    if (sh.tight) {
      fp32_check_morton_sort(&x, sh.d);
      fp32_check_morton_sort(&y, sh.d);
    }
    std::vector<double> a, b;
    masked_test_weights(sh.n, sh.m, &a, &b);
    if (sh.tight) {
      // Zero-weight first rows of every 64-row tile, their potentials far off (below): an fp32
      // path taking its gauge from such a row would get a huge F (and slack).
      double before = 0, after = 0;
      for (const double v : a) before += v;
      for (std::int64_t i = 0; i < sh.n; i += 64) a[std::size_t(i)] = 0;
      for (const double v : a) after += v;
      for (double& v : b) v *= after / before;
    }
    const std::vector<float> xf = fp32_check_cast(x), yf = fp32_check_cast(y), af = fp32_check_cast(a),
                             bf = fp32_check_cast(b);
    Problem<float> p;
    p.features().x = host_matrix<const float>(xf.data(), sh.n, sh.d);
    p.features().y = host_matrix<const float>(yf.data(), sh.m, sh.d);
    p.reference_x = host_matrix<const double>(x.data(), sh.n, sh.d);
    p.reference_y = host_matrix<const double>(y.data(), sh.m, sh.d);
    p.a = host_vector<const float>(af.data(), sh.n);
    p.b = host_vector<const float>(bf.data(), sh.m);
    p.epsilon = sh.eps;
    std::vector<float> f(std::size_t(sh.n)), g(std::size_t(sh.m));
    if (sh.solved) {
      SinkhornOptions opt;
      opt.precision = Precision::kFp32;
      opt.max_iterations = 3000;
      Potentials<float> pot;
      solve_sinkhorn(ctx, p, opt, &pot);
      f = to_host(ctx, pot.f.cview());
      g = to_host(ctx, pot.g.cview());
    } else {
      for (float& v : f) v = float(0.2 * nd(rng));
      for (float& v : g) v = float(0.2 * nd(rng));
    }
    for (float& v : f) v += float(sh.gauge);
    for (float& v : g) v -= float(sh.gauge);
    if (sh.m > 2) g[0] = std::numeric_limits<float>::infinity();  // masked key: ignored
    if (sh.n > 2) f[1] = -std::numeric_limits<float>::infinity();  // masked row: ignored
    if (sh.tight)
      for (std::int64_t i = 0; i < sh.n; i += 64) f[std::size_t(i)] = 1e4f;  // zero weight
    auto o = make_oracle(ctx, p, Precision::kFp32);
    Buffer<float> fd(ctx, sh.n), gd(ctx, sh.m);
    copy(ctx, VectorView<const float>{f.data(), sh.n, MemorySpace::kHost}, fd.view());
    copy(ctx, VectorView<const float>{g.data(), sh.m, MemorySpace::kHost}, gd.view());
    const std::string what = "n=" + std::to_string(sh.n) + " m=" + std::to_string(sh.m) +
                             " d=" + std::to_string(sh.d) + " eps=" + std::to_string(sh.eps) +
                             " offset=" + std::to_string(sh.offset) +
                             " gauge=" + std::to_string(sh.gauge);
    const Certificate c64 = o->certify(sh.eps, fd.data(), gd.data());
    const Certificate c32 = o->certify(sh.eps, fd.data(), gd.data(), 1e300);
    const ReferenceError ref = true_marginal_error(x, y, sh.d, a, b, f, g, 1.0, sh.eps);
    ASSERT_FALSE(c64.fp32) << what;
    ASSERT_TRUE(c32.fp32) << what << ": the fp32 path did not run (bound " << c32.bound << ")";
    EXPECT_GE(c32.bound, ref.error - ref.slack) << what;
    EXPECT_LE(std::fabs(c32.computed - ref.error), c32.slack + ref.slack) << what;
    EXPECT_NEAR(c32.plan_mass, c64.plan_mass, 1e-5 * (1 + c64.plan_mass)) << what;
    EXPECT_NEAR(c32.plan_cost, c64.plan_cost, 1e-5 * (1 + std::fabs(c64.plan_cost))) << what;
    EXPECT_NEAR(c32.plan_potentials, c64.plan_potentials,
                1e-5 * (1 + std::fabs(c64.plan_potentials)))
        << what;
    // Tight where the row blocks are compact (sorted points): near tiles have S ~ 0.3, so
    // a_t ~ u 8.3 * 0.3 / 0.01 ~ 1.5e-5 per side.
    if (sh.tight) {
      EXPECT_LE(c32.slack, 1e-4) << what;
      ++decided_tight;
    }
    // A target between computed - slack and the bound: the fp32 evaluation cannot decide it.
    if (c32.slack > 0 && std::isfinite(c32.bound)) {
      const Certificate c = o->certify(sh.eps, fd.data(), gd.data(), c32.computed);
      EXPECT_FALSE(c.fp32) << what;
      EXPECT_NEAR(c.bound, c64.bound, 1e-12 * c64.bound) << what;
    }
  }
  EXPECT_EQ(decided_tight, small_only ? 0 : 1);
}

}  // namespace kantor::testing
