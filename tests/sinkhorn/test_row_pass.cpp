// The CPU row pass (lib/cpu/row_pass): exp2_nonpos against std::exp2, the LSE pass against a
// long-double LSE (direct and GEMM score paths, chunk and padding edges, masked keys), the value
// pass with masked keys, and bitwise determinism for any thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "lib/cpu/row_pass.hpp"
#include "lib/cpu/thread_pool.hpp"
#include "support/tolerance.hpp"

namespace kantor::testing {
namespace {

using cpu::MatrixRef;
using cpu::RowPassResult;

template <class T>
class Exp2Test : public ::testing::Test {};
using Precisions = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Exp2Test, Precisions);

TYPED_TEST(Exp2Test, MatchesStdExp2) {
  using T = TypeParam;
  // Relative error bound in ulps of T (Taylor truncation < 0.1 ulp, Horner and the final
  // multiply a few roundings).
  const double kUlps = 4;
  const double low = std::is_same<T, float>::value ? -126.0 : -1022.0;  // normal results
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(low, 0.0);
  double worst = 0;
  auto check = [&](T t) {
    const double got = double(cpu::exp2_nonpos<T>(t));
    const double ref = std::exp2(double(t));  // t is exact in double
    const double rel = std::abs(got - ref) / ref / double(std::numeric_limits<T>::epsilon());
    worst = std::max(worst, rel);
    ASSERT_LE(rel, kUlps) << "t = " << double(t);
  };
  for (int k = 0; k < 200000; ++k) check(T(u(rng)));
  for (int k = 0; k <= 4000; ++k) check(T(-k / 1000.0));         // the dominant terms near 0
  for (double t = -0.5; t <= 0.0; t += 1.0 / 1024) check(T(t));  // both ends of the reduction
  EXPECT_EQ(cpu::exp2_nonpos<T>(T(0)), T(1));
  EXPECT_EQ(cpu::exp2_nonpos<T>(T(-1)), T(0.5));
  EXPECT_EQ(cpu::exp2_nonpos<T>(T(-10)), T(1.0 / 1024));
  this->RecordProperty("worst_ulps", std::to_string(worst));
}

// The vectorized exp2 inside the library (compiled with the library's vector flags).
TYPED_TEST(Exp2Test, SimdMatchesStdExp2) {
  using T = TypeParam;
  const double kUlps = 4;
  const double low = std::is_same<T, float>::value ? -126.0 : -1022.0;
  std::mt19937_64 rng(8);
  std::uniform_real_distribution<double> u(low, 0.0);
  std::vector<T> t(100003), out(t.size());  // odd count: the padded tail too
  for (std::size_t i = 0; i < t.size(); ++i)
    t[i] = T(i % 5 == 0 ? -double(i % 4000) / 1000 : u(rng));
  cpu::exp2_nonpos_simd<T>(t.data(), std::int64_t(t.size()), out.data());
  for (std::size_t i = 0; i < t.size(); ++i) {
    const double ref = std::exp2(double(t[i]));
    const double rel =
        std::abs(double(out[i]) - ref) / ref / double(std::numeric_limits<T>::epsilon());
    ASSERT_LE(rel, kUlps) << "t = " << double(t[i]);
  }
  const T special[5] = {T(0), -std::numeric_limits<T>::infinity(),
                        std::is_same<T, float>::value ? T(-127) : T(-1023), T(-3000),
                        std::numeric_limits<T>::quiet_NaN()};
  T res[5];
  cpu::exp2_nonpos_simd<T>(special, 5, res);
  EXPECT_EQ(res[0], T(1));
  EXPECT_EQ(res[1], T(0));
  EXPECT_EQ(res[2], T(0));
  EXPECT_EQ(res[3], T(0));
  EXPECT_TRUE(std::isnan(res[4]));
}

TYPED_TEST(Exp2Test, UnderflowMaskAndNaN) {
  using T = TypeParam;
  const T kLow = std::is_same<T, float>::value ? T(-127) : T(-1023);
  EXPECT_EQ(cpu::exp2_nonpos<T>(-std::numeric_limits<T>::infinity()), T(0));
  EXPECT_EQ(cpu::exp2_nonpos<T>(kLow), T(0));
  EXPECT_EQ(cpu::exp2_nonpos<T>(kLow - T(1000)), T(0));
  EXPECT_EQ(cpu::exp2_nonpos<T>(-std::numeric_limits<T>::max()), T(0));
  EXPECT_TRUE(std::isnan(cpu::exp2_nonpos<T>(std::numeric_limits<T>::quiet_NaN())));
}

struct PassCase {
  std::int64_t rows, keys, d;
  int mask;  // 0: none, 1: every 3rd key, 2: the whole first chunk and more, 3: all but one
};

// Plain arrays: Eigen objects must not cross into the library, which may be compiled with other
// vector flags (see row_pass.hpp).
template <class T>
struct PassData {
  std::int64_t rows = 0, keys = 0, d = 0;
  std::vector<T> q, k, bias;
  T scale = 1;
  T qa(std::int64_t i, std::int64_t c) const { return q[std::size_t(i * d + c)]; }
  T ka(std::int64_t j, std::int64_t c) const { return k[std::size_t(j * d + c)]; }
  MatrixRef<T> qref() const { return {q.data(), rows, d}; }
  MatrixRef<T> kref() const { return {k.data(), keys, d}; }
};

template <class T>
PassData<T> make_pass_data(const PassCase& c) {
  std::mt19937_64 rng(std::uint64_t(c.rows * 1000 + c.keys * 10 + c.d));
  std::normal_distribution<double> nd(0.0, 1.0);
  PassData<T> p;
  p.rows = c.rows;
  p.keys = c.keys;
  p.d = c.d;
  p.q.resize(std::size_t(c.rows * c.d));
  p.k.resize(std::size_t(c.keys * c.d));
  p.bias.resize(std::size_t(c.keys));
  for (T& v : p.q) v = T(nd(rng));
  for (T& v : p.k) v = T(nd(rng));
  for (T& v : p.bias) v = T(3 * nd(rng));
  const T ninf = -std::numeric_limits<T>::infinity();
  for (std::int64_t j = 0; j < c.keys; ++j) {
    T& b = p.bias[std::size_t(j)];
    if (c.mask == 1 && j % 3 == 1) b = ninf;
    if (c.mask == 2 && j < std::min<std::int64_t>(c.keys - 1, 700)) b = ninf;
    if (c.mask == 3 && j != c.keys / 2) b = ninf;
  }
  p.scale = T(2.5);
  return p;
}

class RowPass : public ::testing::TestWithParam<PassCase> {};

template <class T>
void check_lse(const PassCase& c) {
  const PassData<T> p = make_pass_data<T>(c);
  cpu::ThreadPool pool(2);
  RowPassResult r;
  cpu::row_pass<T>(pool, p.qref(), p.kref(), p.bias.data(), p.scale, MatrixRef<T>{}, &r);
  ASSERT_EQ(std::int64_t(r.max.size()), c.rows);
  for (std::int64_t i = 0; i < c.rows; ++i) {
    // Reference in long double from the same (rounded) inputs.
    std::vector<long double> s(std::size_t(c.keys));
    long double mx = -INFINITY, amax = 0;
    for (std::int64_t j = 0; j < c.keys; ++j) {
      long double dot = 0;
      for (std::int64_t k = 0; k < c.d; ++k) dot += (long double)p.qa(i, k) * p.ka(j, k);
      const long double b = p.bias[std::size_t(j)];
      s[std::size_t(j)] = (long double)p.scale * dot + b;
      if (std::isfinite((double)b))
        amax = std::max(amax, std::abs((long double)p.scale * dot) + std::abs(b));
      mx = std::max(mx, s[std::size_t(j)]);
    }
    long double sum = 0;
    for (long double v : s) sum += std::exp(v - mx);
    const double ref = double(mx + std::log(sum));
    const double got = r.max[std::size_t(i)] + std::log(r.sum[std::size_t(i)]);
    // Scores are rounded at |s| * u; the exp2 domain adds a rounding of log2(e) s.
    const double bound = tol<T>(16 * (1 + c.d)) * (1 + double(amax));
    ASSERT_NEAR(got, ref, bound) << "row " << i;
    EXPECT_GE(r.sum[std::size_t(i)], 1.0 - 1e-6) << "the max term contributes ~1";
  }
}

TEST_P(RowPass, LseFp64) { check_lse<double>(GetParam()); }
TEST_P(RowPass, LseFp32) { check_lse<float>(GetParam()); }

// Same bits for 1, 2 and 3 threads, and from run to run.
TEST_P(RowPass, DeterministicForAnyThreadCount) {
  const PassData<float> p = make_pass_data<float>(GetParam());
  std::vector<RowPassResult> res(4);
  for (int t = 1; t <= 3; ++t) {
    cpu::ThreadPool pool(t);
    cpu::row_pass<float>(pool, p.qref(), p.kref(), p.bias.data(), p.scale, MatrixRef<float>{},
                         &res[t]);
  }
  cpu::ThreadPool pool(2);
  cpu::row_pass<float>(pool, p.qref(), p.kref(), p.bias.data(), p.scale, MatrixRef<float>{},
                       &res[0]);
  for (int t = 0; t <= 3; ++t) {
    EXPECT_EQ(res[t].max, res[1].max);
    EXPECT_EQ(res[t].sum, res[1].sum);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, RowPass,
                         ::testing::Values(PassCase{1, 1, 1, 0}, PassCase{3, 15, 2, 0},
                                           PassCase{33, 513, 3, 1}, PassCase{70, 1100, 7, 2},
                                           PassCase{65, 1029, 8, 3}, PassCase{31, 600, 9, 1},
                                           PassCase{300, 1300, 64, 2}, PassCase{257, 513, 64, 3},
                                           PassCase{40, 17, 5, 0}));

// Masked keys contribute exactly nothing to the value accumulators (a weight of even 1e-38 on a
// value of 1e300 would show).
TEST(RowPassValues, MaskedKeysContributeExactlyZero) {
  const std::int64_t rows = 9, keys = 300, d = 3;
  const PassData<double> p = make_pass_data<double>(PassCase{rows, keys, d, 1});
  std::vector<double> v(std::size_t(keys * 2));
  for (std::int64_t j = 0; j < keys; ++j) {
    const bool masked = p.bias[std::size_t(j)] == -std::numeric_limits<double>::infinity();
    v[std::size_t(2 * j)] = masked ? 1e300 : 1.0;
    v[std::size_t(2 * j + 1)] = masked ? -1e300 : double(j);
  }
  cpu::ThreadPool pool(2);
  RowPassResult r;
  cpu::row_pass<double>(pool, p.qref(), p.kref(), p.bias.data(), p.scale,
                        MatrixRef<double>{v.data(), keys, 2}, &r);
  for (std::int64_t i = 0; i < rows; ++i) {
    EXPECT_TRUE(std::isfinite(r.acc(i, 0)) && std::isfinite(r.acc(i, 1))) << i;
    const double sum = r.sum[std::size_t(i)];
    EXPECT_NEAR(r.acc(i, 0), sum, 1e-12 * sum) << "value 1 on every unmasked key";
    EXPECT_LT(std::abs(r.acc(i, 1)), double(keys) * sum) << "values below 300 on unmasked keys";
  }
}

}  // namespace
}  // namespace kantor::testing
