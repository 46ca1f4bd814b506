// VectorOps (include/kantor/oracle.hpp) of every engine against plain host loops: backend (cpu,
// cuda) x precision (fp64, fp32), the ops obtained from an oracle of a small problem, buffers in
// the context's memory space. Covers odd sizes (1, 17, 1000003 for the reductions), strided
// views whose padding holds NaN (must not be read) or a sentinel (must not be written), division
// by zero, the ratio guards (den = 0, NaN, ratio 0), aliasing (dst == src), and run-to-run
// identical reductions. CUDA cases skip without a GPU.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kantor/buffer.hpp"
#include "kantor/context.hpp"
#include "kantor/error.hpp"
#include "kantor/oracle.hpp"
#include "support/compare.hpp"
#include "support/gpu.hpp"
#include "support/random_problems.hpp"

namespace kantor::testing {
namespace {

struct OpsParam {
  Backend backend;
  Precision precision;
};

std::string param_name(const ::testing::TestParamInfo<OpsParam>& i) {
  return to_string(i.param.backend) + "_" + to_string(i.param.precision);
}

std::size_t sz(std::int64_t n) { return std::size_t(n); }

/// The ops of an oracle over a small problem, and host <-> context-space helpers.
template <class T>
struct Env {
  Context ctx;
  std::vector<T> x, y;
  std::unique_ptr<Oracle<T>> oracle;
  VectorOps<T>* ops = nullptr;
  Rng rng{12345};

  static ContextOptions options(const OpsParam& p) {
    ContextOptions co;
    co.backend = p.backend;
    co.threads = 2;
    return co;
  }
  explicit Env(const OpsParam& p) : ctx(options(p)) {
    Rng r(3);
    const std::vector<double> xd = gaussian_cloud(r, 5, 2), yd = gaussian_cloud(r, 4, 2);
    x.assign(xd.begin(), xd.end());
    y.assign(yd.begin(), yd.end());
    Problem<T> prob;
    prob.features().x = host_matrix<const T>(x.data(), 5, 2);
    prob.features().y = host_matrix<const T>(y.data(), 4, 2);
    prob.epsilon = 0.5;
    oracle = make_oracle(ctx, prob, p.precision);
    ops = &oracle->ops();
  }

  template <class U>
  Buffer<U> up(const std::vector<U>& h) {
    Buffer<U> b(ctx, std::int64_t(h.size()));
    copy(ctx, host_vector<const U>(h.data(), std::int64_t(h.size())), b.view());
    return b;
  }
  template <class U>
  std::vector<U> down(const Buffer<U>& b) {
    return to_host(ctx, b.cview());
  }
  std::vector<T> uniform(std::int64_t n, double lo = -1, double hi = 1) {
    std::uniform_real_distribution<double> u(lo, hi);
    std::vector<T> v(sz(n));
    for (T& e : v) e = T(u(rng));
    return v;
  }
};

/// A rows x cols matrix at row stride `stride` in context memory; the padding entries hold
/// `pad` (NaN for inputs: never read; a sentinel for outputs: never written).
template <class T>
struct Strided {
  std::int64_t rows, cols, stride;
  std::vector<T> host;  // rows x stride
  Buffer<T> dev;

  Strided(Env<T>& e, std::int64_t r, std::int64_t c, std::int64_t s, T pad)
      : rows(r), cols(c), stride(s), host(std::size_t(r * s), pad) {
    std::uniform_real_distribution<double> u(-1, 1);
    for (std::int64_t i = 0; i < r; ++i)
      for (std::int64_t k = 0; k < c; ++k) host[std::size_t(i * s + k)] = T(u(e.rng));
    dev = e.up(host);
  }
  T at(std::int64_t i, std::int64_t k) const { return host[std::size_t(i * stride + k)]; }
  MatrixView<T> view() { return {dev.data(), rows, cols, stride, dev.space()}; }
  MatrixView<const T> cview() { return {dev.data(), rows, cols, stride, dev.space()}; }
};

template <class T>
constexpr double ulp() {
  return double(std::numeric_limits<T>::epsilon());
}
template <class T>
constexpr T nan_v() {
  return std::numeric_limits<T>::quiet_NaN();
}
constexpr double kSentinel = -777.0;

using Shapes3 = std::vector<std::array<std::int64_t, 3>>;
using Shapes2 = std::vector<std::array<std::int64_t, 2>>;
using Pairs = std::vector<std::array<double, 2>>;

/// Compares the result entries of `got` (rows x stride, device copy) with `want` (rows x cols)
/// within `bound`, and checks that the padding still holds the sentinel.
template <class T>
void expect_matrix(const std::vector<T>& got, std::int64_t rows, std::int64_t cols,
                   std::int64_t stride, const std::vector<double>& want,
                   const std::vector<double>& bound, const char* what) {
  std::vector<T> entries(std::size_t(rows * cols));
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t k = 0; k < stride; ++k) {
      const T v = got[std::size_t(i * stride + k)];
      if (k < cols)
        entries[std::size_t(i * cols + k)] = v;
      else
        EXPECT_EQ(double(v), kSentinel)
            << what << ": padding entry (" << i << ", " << k << ") written";
    }
  EXPECT_TRUE(all_close(entries, want, bound)) << what;
}

class VectorOpsTest : public ::testing::TestWithParam<OpsParam> {};

// One TEST_P per op; the body is a template over the data type of the precision.
#define KANTOR_VECTOR_OPS_TEST(Name)                                              \
  template <class T>                                                              \
  void Name##_body(Env<T>& e);                                                    \
  TEST_P(VectorOpsTest, Name) {                                                   \
    const OpsParam p = GetParam();                                                \
    if (p.backend == Backend::kCuda && !have_gpu()) GTEST_SKIP() << "no CUDA device"; \
    if (p.precision == Precision::kFp64) {                                        \
      Env<double> e(p);                                                           \
      Name##_body(e);                                                             \
    } else {                                                                      \
      Env<float> e(p);                                                            \
      Name##_body(e);                                                             \
    }                                                                             \
  }                                                                               \
  template <class T>                                                              \
  void Name##_body(Env<T>& e)

KANTOR_VECTOR_OPS_TEST(Fill) {
  for (auto [r, c, s] : Shapes3{{7, 3, 5}, {1, 1, 1}, {1000003, 1, 1}, {4, 6, 6}}) {
    Strided<T> d(e, r, c, s, T(kSentinel));
    e.ops->fill(d.view(), T(2.5));
    expect_matrix(e.down(d.dev), r, c, s, std::vector<double>(std::size_t(r * c), 2.5),
                  std::vector<double>(std::size_t(r * c), 0.0), "fill");
  }
  // An empty view is a no-op.
  e.ops->fill(MatrixView<T>{nullptr, 0, 3, 3, e.ctx.memory_space()}, T(1));
}

KANTOR_VECTOR_OPS_TEST(Axpby) {
  const std::int64_t r = 13, c = 3;
  for (double beta : {-1.25, 0.0}) {
    Strided<T> src(e, r, c, 4, nan_v<T>());
    Strided<T> dst(e, r, c, 6, T(kSentinel));
    if (beta == 0) {  // beta = 0 ignores dst's old entries, NaN included
      for (std::int64_t i = 0; i < r; ++i) dst.host[std::size_t(i * 6 + 1)] = nan_v<T>();
      dst.dev = e.up(dst.host);
    }
    const double alpha = 0.75;
    e.ops->axpby(alpha, src.cview(), beta, dst.view());
    std::vector<double> want, bound;
    for (std::int64_t i = 0; i < r; ++i)
      for (std::int64_t k = 0; k < c; ++k) {
        const double a = alpha * double(src.at(i, k));
        const double b = beta == 0 ? 0.0 : beta * double(dst.at(i, k));
        want.push_back(a + b);
        bound.push_back(3 * ulp<T>() * (std::abs(a) + std::abs(b)));
      }
    expect_matrix(e.down(dst.dev), r, c, 6, want, bound, beta == 0 ? "axpby beta 0" : "axpby");
  }
  // In place: dst = 2 dst + 0.5 dst.
  Strided<T> d(e, r, c, 5, T(kSentinel));
  e.ops->axpby(2.0, d.cview(), 0.5, d.view());
  std::vector<double> want, bound;
  for (std::int64_t i = 0; i < r; ++i)
    for (std::int64_t k = 0; k < c; ++k) {
      want.push_back(2.5 * double(d.at(i, k)));
      bound.push_back(3 * ulp<T>() * 2.5 * std::abs(double(d.at(i, k))));
    }
  expect_matrix(e.down(d.dev), r, c, 5, want, bound, "axpby in place");
  // The CUDA launchers check shapes before launching (the CPU loops trust the caller).
  if (e.ctx.memory_space() == MemorySpace::kDevice) {
    Strided<T> other(e, r + 1, c, 5, T(0));
    EXPECT_THROW(e.ops->axpby(1.0, other.cview(), 1.0, d.view()), InvalidArgument);
  }
}

KANTOR_VECTOR_OPS_TEST(ScaleRows) {
  const std::int64_t r = 11, c = 4;
  const std::vector<T> s = e.uniform(r);
  Buffer<T> sb = e.up(s);
  Strided<T> src(e, r, c, 7, nan_v<T>());
  Strided<T> dst(e, r, c, 5, T(kSentinel));
  e.ops->scale_rows(sb.data(), src.cview(), dst.view());
  std::vector<double> want;
  for (std::int64_t i = 0; i < r; ++i)
    for (std::int64_t k = 0; k < c; ++k)
      want.push_back(double(T(s[std::size_t(i)] * src.at(i, k))));
  expect_matrix(e.down(dst.dev), r, c, 5, want, std::vector<double>(want.size(), 0.0),
                "scale_rows");
  // In place (dst aliasing src).
  Strided<T> d(e, r, c, 6, T(kSentinel));
  e.ops->scale_rows(sb.data(), d.cview(), d.view());
  want.clear();
  for (std::int64_t i = 0; i < r; ++i)
    for (std::int64_t k = 0; k < c; ++k) want.push_back(double(T(s[std::size_t(i)] * d.at(i, k))));
  expect_matrix(e.down(d.dev), r, c, 6, want, std::vector<double>(want.size(), 0.0),
                "scale_rows in place");
}

KANTOR_VECTOR_OPS_TEST(MultiplyAndDivide) {
  for (std::int64_t n : std::vector<std::int64_t>{1, 17, 1000003}) {
    const std::vector<T> x = e.uniform(n);
    std::vector<T> y = e.uniform(n);
    for (std::int64_t i = 0; i < n; i += 7) y[std::size_t(i)] = T(0);  // zero divisors
    if (n > 3) y[3] = T(-0.0);
    Buffer<T> xb = e.up(x), yb = e.up(y), out(e.ctx, n);
    std::vector<double> prod(sz(n)), quot(sz(n));
    for (std::int64_t i = 0; i < n; ++i) {
      const std::size_t u = std::size_t(i);
      prod[u] = double(T(x[u] * y[u]));
      quot[u] = y[u] == T(0) ? 0.0 : double(T(x[u] / y[u]));
    }
    e.ops->multiply(n, xb.data(), yb.data(), out.data());
    EXPECT_TRUE(all_close(e.down(out), prod, 0.0)) << "multiply n = " << n;
    e.ops->divide(n, xb.data(), yb.data(), out.data());
    EXPECT_TRUE(all_close(e.down(out), quot, 0.0)) << "divide n = " << n;
    // Aliasing: dst == x, then dst == y.
    Buffer<T> xa = e.up(x);
    e.ops->multiply(n, xa.data(), yb.data(), xa.data());
    EXPECT_TRUE(all_close(e.down(xa), prod, 0.0)) << "multiply in place n = " << n;
    Buffer<T> ya = e.up(y);
    e.ops->divide(n, xb.data(), ya.data(), ya.data());
    EXPECT_TRUE(all_close(e.down(ya), quot, 0.0)) << "divide in place n = " << n;
  }
}

KANTOR_VECTOR_OPS_TEST(RowProducts) {
  for (auto [r, uc, wc] : Shapes3{{9, 3, 2}, {1, 1, 1}, {5, 2, 4}}) {
    Strided<T> U(e, r, uc, uc + 1, nan_v<T>());
    Strided<T> W(e, r, wc, wc + 3, nan_v<T>());
    const std::int64_t ds = uc * wc + 2;
    Strided<T> dst(e, r, uc * wc, ds, T(kSentinel));
    e.ops->row_products(U.cview(), W.cview(), dst.view());
    std::vector<double> want;
    for (std::int64_t i = 0; i < r; ++i)
      for (std::int64_t k = 0; k < uc; ++k)
        for (std::int64_t l = 0; l < wc; ++l) want.push_back(double(T(U.at(i, k) * W.at(i, l))));
    expect_matrix(e.down(dst.dev), r, uc * wc, ds, want, std::vector<double>(want.size(), 0.0),
                  "row_products");
  }
}

KANTOR_VECTOR_OPS_TEST(RowContract) {
  const std::int64_t r = 10, p = 3, q = 2;
  for (double beta : {0.5, 0.0}) {
    Strided<T> u(e, r, p, 4, nan_v<T>());
    Strided<T> M(e, r, p * q, p * q + 1, nan_v<T>());
    Strided<T> out(e, r, q, 3, T(kSentinel));
    if (beta == 0) {
      for (std::int64_t i = 0; i < r; ++i) out.host[std::size_t(i * 3)] = nan_v<T>();
      out.dev = e.up(out.host);
    }
    const double alpha = -1.5;
    e.ops->row_contract(alpha, u.cview(), M.cview(), beta, out.view());
    std::vector<double> want, bound;
    for (std::int64_t i = 0; i < r; ++i)
      for (std::int64_t l = 0; l < q; ++l) {
        double s = 0, sa = 0;
        for (std::int64_t k = 0; k < p; ++k) {
          s += double(u.at(i, k)) * double(M.at(i, k * q + l));
          sa += std::abs(double(u.at(i, k)) * double(M.at(i, k * q + l)));
        }
        const double old = beta == 0 ? 0.0 : beta * double(out.at(i, l));
        want.push_back(alpha * s + old);
        bound.push_back(4 * ulp<T>() * (std::abs(alpha) * sa + std::abs(old)));
      }
    expect_matrix(e.down(out.dev), r, q, 3, want, bound,
                  beta == 0 ? "row_contract beta 0" : "row_contract");
  }
}

KANTOR_VECTOR_OPS_TEST(RowDots) {
  for (auto [r, c] : Shapes2{{12, 5}, {1, 1}, {1000003, 2}}) {
    Strided<T> U(e, r, c, c + 2, nan_v<T>());
    Strided<T> W(e, r, c, c + 1, nan_v<T>());
    Buffer<T> out(e.ctx, r);
    e.ops->row_dots(U.cview(), W.cview(), out.data());
    std::vector<double> want(sz(r)), bound(sz(r));
    for (std::int64_t i = 0; i < r; ++i) {
      double s = 0, sa = 0;
      for (std::int64_t k = 0; k < c; ++k) {
        s += double(U.at(i, k)) * double(W.at(i, k));
        sa += std::abs(double(U.at(i, k)) * double(W.at(i, k)));
      }
      want[std::size_t(i)] = s;
      bound[std::size_t(i)] = 2 * ulp<T>() * sa;
    }
    EXPECT_TRUE(all_close(e.down(out), want, bound)) << "row_dots " << r << " x " << c;
  }
}

KANTOR_VECTOR_OPS_TEST(Dot) {
  Buffer<double> out(e.ctx, 2);
  for (std::int64_t n : std::vector<std::int64_t>{1, 17, 2049, 1000003}) {
    const std::vector<T> x = e.uniform(n), y = e.uniform(n);
    Buffer<T> xb = e.up(x), yb = e.up(y);
    long double s = 0;
    double sa = 0, sq = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const double t = double(x[std::size_t(i)]) * double(y[std::size_t(i)]);
      s += t;
      sa += std::abs(t);
      sq += double(x[std::size_t(i)]) * double(x[std::size_t(i)]);
    }
    // Products of T values are exact in double (fp32) or rounded once (fp64); the sum in double.
    const double tol = (double(n) + 2) * ulp<double>() * sa + 1e-300;
    e.ops->dot(n, xb.data(), yb.data(), out.data());
    const double first = e.down(out)[0];
    EXPECT_TRUE(near(first, double(s), tol)) << "dot n = " << n;
    // Run-to-run identical (fixed reduction order).
    e.ops->dot(n, xb.data(), yb.data(), out.data() + 1);
    EXPECT_EQ(e.down(out)[1], first) << "dot not deterministic, n = " << n;
    // x aliasing y.
    e.ops->dot(n, xb.data(), xb.data(), out.data());
    EXPECT_TRUE(near(e.down(out)[0], sq, (double(n) + 2) * ulp<double>() * sq)) << "dot(x, x)";
  }
  // n = 0 writes 0.
  const std::vector<double> nan2 = {std::nan(""), std::nan("")};
  Buffer<double> z = e.up(nan2);
  e.ops->dot(0, nullptr, nullptr, z.data());
  EXPECT_EQ(e.down(z)[0], 0.0);
}

KANTOR_VECTOR_OPS_TEST(SubtractMean) {
  Buffer<double> scratch(e.ctx, 1);
  for (std::int64_t n : std::vector<std::int64_t>{1, 17, 1000003}) {
    const std::vector<T> x = e.uniform(n, 0.5, 2.0);
    double sum = 0;
    for (T v : x) sum += double(v);
    const double mean = sum / double(n);
    Buffer<T> xb = e.up(x);
    e.ops->subtract_mean(n, xb.data(), scratch.data());
    const double got_mean = e.down(scratch)[0];
    EXPECT_TRUE(near(got_mean, mean, (double(n) + 2) * ulp<double>() * 2.0)) << "mean n = " << n;
    std::vector<double> want(sz(n)), bound(sz(n));
    for (std::int64_t i = 0; i < n; ++i) {
      want[std::size_t(i)] = double(x[std::size_t(i)]) - mean;
      bound[std::size_t(i)] = ulp<T>() * 4.0 + (double(n) + 2) * ulp<double>() * 2.0;
    }
    const std::vector<T> got = e.down(xb);
    EXPECT_TRUE(all_close(got, want, bound)) << "subtract_mean n = " << n;
    if (n == 1) EXPECT_EQ(double(got[0]), 0.0);
    // Run-to-run identical.
    Buffer<T> xb2 = e.up(x);
    e.ops->subtract_mean(n, xb2.data(), scratch.data());
    EXPECT_EQ(e.down(scratch)[0], got_mean);
    const std::vector<T> got2 = e.down(xb2);
    EXPECT_TRUE(got2 == got) << "subtract_mean not deterministic, n = " << n;
  }
}

/// Scalars (num, den) in context memory.
template <class T>
Buffer<double> scalars(Env<T>& e, double num, double den) {
  return e.up(std::vector<double>{num, den});
}

KANTOR_VECTOR_OPS_TEST(AxpyRatio) {
  for (std::int64_t n : std::vector<std::int64_t>{1, 1000003}) {
    const std::vector<T> x = e.uniform(n), y = e.uniform(n);
    Buffer<T> xb = e.up(x);
    // A usable ratio: y += sign (num / den) x.
    {
      Buffer<double> s = scalars(e, 3.0, 2.0);
      Buffer<T> yb = e.up(y);
      e.ops->axpy_ratio(n, s.data(), s.data() + 1, -1.0, xb.data(), yb.data());
      std::vector<double> want(sz(n)), bound(sz(n));
      for (std::int64_t i = 0; i < n; ++i) {
        const std::size_t u = std::size_t(i);
        want[u] = double(y[u]) - 1.5 * double(x[u]);
        bound[u] = 2 * ulp<T>() * (std::abs(double(y[u])) + 1.5 * std::abs(double(x[u])));
      }
      EXPECT_TRUE(all_close(e.down(yb), want, bound)) << "axpy_ratio n = " << n;
    }
    // den = 0, NaN num, 0 / 0, num = 0 (ratio 0), den = inf (ratio 0): y unchanged, bitwise.
    const double inf = std::numeric_limits<double>::infinity();
    const double nan = std::nan("");
    for (auto [num, den] :
         Pairs{{1.0, 0.0}, {nan, 1.0}, {0.0, 0.0}, {0.0, 5.0}, {1.0, inf}, {1.0, nan}}) {
      Buffer<double> s = scalars(e, num, den);
      Buffer<T> yb = e.up(y);
      e.ops->axpy_ratio(n, s.data(), s.data() + 1, 1.0, xb.data(), yb.data());
      EXPECT_TRUE(e.down(yb) == y) << "axpy_ratio changed y for num " << num << ", den " << den;
    }
    // x aliasing y: y += 0.25 y.
    {
      Buffer<double> s = scalars(e, 1.0, 4.0);
      Buffer<T> yb = e.up(y);
      e.ops->axpy_ratio(n, s.data(), s.data() + 1, 1.0, yb.data(), yb.data());
      std::vector<double> want(sz(n)), bound(sz(n));
      for (std::int64_t i = 0; i < n; ++i) {
        want[std::size_t(i)] = 1.25 * double(y[std::size_t(i)]);
        bound[std::size_t(i)] = 2 * ulp<T>() * 1.25 * std::abs(double(y[std::size_t(i)]));
      }
      EXPECT_TRUE(all_close(e.down(yb), want, bound)) << "axpy_ratio in place n = " << n;
    }
  }
}

KANTOR_VECTOR_OPS_TEST(XpayRatio) {
  for (std::int64_t n : std::vector<std::int64_t>{1, 1000003}) {
    const std::vector<T> x = e.uniform(n);
    std::vector<T> y = e.uniform(n);
    Buffer<T> xb = e.up(x);
    {
      Buffer<double> s = scalars(e, -3.0, 4.0);
      Buffer<T> yb = e.up(y);
      e.ops->xpay_ratio(n, xb.data(), s.data(), s.data() + 1, yb.data());
      std::vector<double> want(sz(n)), bound(sz(n));
      for (std::int64_t i = 0; i < n; ++i) {
        const std::size_t u = std::size_t(i);
        want[u] = double(x[u]) - 0.75 * double(y[u]);
        bound[u] = 2 * ulp<T>() * (std::abs(double(x[u])) + 0.75 * std::abs(double(y[u])));
      }
      EXPECT_TRUE(all_close(e.down(yb), want, bound)) << "xpay_ratio n = " << n;
    }
    // A zero, infinite, NaN or undefined ratio gives y = x exactly, even where y is NaN.
    y[0] = nan_v<T>();
    const double inf = std::numeric_limits<double>::infinity();
    const double nan = std::nan("");
    for (auto [num, den] : Pairs{{1.0, 0.0}, {nan, 1.0}, {0.0, 0.0}, {0.0, 5.0}, {inf, 1.0}}) {
      Buffer<double> s = scalars(e, num, den);
      Buffer<T> yb = e.up(y);
      e.ops->xpay_ratio(n, xb.data(), s.data(), s.data() + 1, yb.data());
      EXPECT_TRUE(e.down(yb) == x) << "xpay_ratio y != x for num " << num << ", den " << den;
    }
    // x aliasing y: y = y + 0.5 y.
    {
      y[0] = T(0.25);
      Buffer<double> s = scalars(e, 1.0, 2.0);
      Buffer<T> yb = e.up(y);
      e.ops->xpay_ratio(n, yb.data(), s.data(), s.data() + 1, yb.data());
      std::vector<double> want(sz(n)), bound(sz(n));
      for (std::int64_t i = 0; i < n; ++i) {
        want[std::size_t(i)] = 1.5 * double(y[std::size_t(i)]);
        bound[std::size_t(i)] = 2 * ulp<T>() * 1.5 * std::abs(double(y[std::size_t(i)]));
      }
      EXPECT_TRUE(all_close(e.down(yb), want, bound)) << "xpay_ratio in place n = " << n;
    }
  }
}

KANTOR_VECTOR_OPS_TEST(CopyScalars) {
  Buffer<double> b = e.up(std::vector<double>{1.5, -2.25, 3.0, 9.0, 9.0, 9.0, 7.0});
  e.ops->copy_scalars(b.data(), b.data() + 3, 3);
  e.ops->copy_scalars(b.data(), b.data() + 6, 0);  // no-op
  EXPECT_EQ(e.down(b), (std::vector<double>{1.5, -2.25, 3.0, 1.5, -2.25, 3.0, 7.0}));
}

// Two oracles of one context each own their ops (and the CUDA engine's reduction workspace):
// reductions issued alternately through both give both results.
KANTOR_VECTOR_OPS_TEST(OpsOfTwoOraclesAreIndependent) {
  Problem<T> prob;
  prob.features().x = host_matrix<const T>(e.x.data(), 5, 2);
  prob.features().y = host_matrix<const T>(e.y.data(), 4, 2);
  prob.epsilon = 0.5;
  std::unique_ptr<Oracle<T>> o2 = make_oracle(e.ctx, prob, e.oracle->precision());
  const std::int64_t n = 5000;
  const std::vector<T> x = e.uniform(n), y = e.uniform(n);
  Buffer<T> xb = e.up(x), yb = e.up(y);
  Buffer<double> out(e.ctx, 2);
  e.ops->dot(n, xb.data(), yb.data(), out.data());
  o2->ops().dot(n, yb.data(), yb.data(), out.data() + 1);
  double s = 0, s2 = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    s += double(x[std::size_t(i)]) * double(y[std::size_t(i)]);
    s2 += double(y[std::size_t(i)]) * double(y[std::size_t(i)]);
  }
  const std::vector<double> h = e.down(out);
  EXPECT_TRUE(near(h[0], s, 1e-12 * double(n)));
  EXPECT_TRUE(near(h[1], s2, 1e-12 * double(n)));
}

#undef KANTOR_VECTOR_OPS_TEST

INSTANTIATE_TEST_SUITE_P(Engines, VectorOpsTest,
                         ::testing::Values(OpsParam{Backend::kCpu, Precision::kFp64},
                                           OpsParam{Backend::kCpu, Precision::kFp32},
                                           OpsParam{Backend::kCuda, Precision::kFp64},
                                           OpsParam{Backend::kCuda, Precision::kFp32}),
                         param_name);

}  // namespace
}  // namespace kantor::testing
