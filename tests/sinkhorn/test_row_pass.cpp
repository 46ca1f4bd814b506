// The CPU row pass (lib/cpu/row_pass): exp2_nonpos against std::exp2 (scalar, and the vector
// version of every ISA path this machine runs), the LSE pass against a long-double LSE (direct
// and GEMM score paths, chunk and padding edges, masked keys), the policies (pair term, block
// lists, both together, in the LSE and the value pass) against a long-double reference that
// applies them, bitwise identities (an all-tiles block list = dense, a zero pair term = plain,
// the per-block pair biases = the per-pass ones), validation messages, and bitwise determinism
// for any thread count. Every LSE test runs on every ISA path available here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "lib/cpu/row_pass.hpp"
#include "lib/core/thread_pool.hpp"
#include "support/tolerance.hpp"

namespace kantor::testing {
namespace {

using cpu::MatrixRef;
using cpu::RowPassIsa;
using cpu::RowPassPolicy;
using cpu::RowPassResult;
using cpu::RowPassTuning;

std::vector<RowPassIsa> isas() { return cpu::row_pass_supported_isas(); }

TEST(RowPassIsa, PathsAvailable) {
  const std::vector<RowPassIsa> v = isas();
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v.front(), RowPassIsa::kBaseline);
  EXPECT_TRUE(cpu::row_pass_isa_supported(cpu::row_pass_best_isa()));
  EXPECT_EQ(v.back(), cpu::row_pass_best_isa());
  std::string names;
  for (RowPassIsa isa : v) names += std::string(cpu::to_string(isa)) + " ";
  RecordProperty("isa_paths", names);
  std::printf("row_pass ISA paths on this machine: %s(auto = %s)\n", names.c_str(),
              cpu::to_string(cpu::row_pass_best_isa()));
}

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

// The vectorized exp2 inside the library, on every ISA path this machine runs.
TYPED_TEST(Exp2Test, SimdMatchesStdExp2) {
  using T = TypeParam;
  const double kUlps = 4;
  const double low = std::is_same<T, float>::value ? -126.0 : -1022.0;
  std::mt19937_64 rng(8);
  std::uniform_real_distribution<double> u(low, 0.0);
  std::vector<T> t(100003), out(t.size());  // odd count: the padded tail too
  for (std::size_t i = 0; i < t.size(); ++i)
    t[i] = T(i % 5 == 0 ? -double(i % 4000) / 1000 : u(rng));
  for (RowPassIsa isa : isas()) {
    SCOPED_TRACE(cpu::to_string(isa));
    std::fill(out.begin(), out.end(), T(-1));
    cpu::exp2_nonpos_simd<T>(t.data(), std::int64_t(t.size()), out.data(), isa);
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
    cpu::exp2_nonpos_simd<T>(special, 5, res, isa);
    EXPECT_EQ(res[0], T(1));
    EXPECT_EQ(res[1], T(0));
    EXPECT_EQ(res[2], T(0));
    EXPECT_EQ(res[3], T(0));
    EXPECT_TRUE(std::isnan(res[4]));
  }
}

// The paths with FMA compute the same polynomial with the same roundings: equal bits.
TYPED_TEST(Exp2Test, FmaPathsAgreeBitwise) {
  using T = TypeParam;
  std::vector<RowPassIsa> fma;
  for (RowPassIsa isa : isas())
    if (isa != RowPassIsa::kBaseline) fma.push_back(isa);
  if (fma.size() < 2) GTEST_SKIP() << "fewer than two FMA paths here";
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<double> u(-150.0, 0.0);
  std::vector<T> t(4099), a(t.size()), b(t.size());
  for (T& v : t) v = T(u(rng));
  cpu::exp2_nonpos_simd<T>(t.data(), std::int64_t(t.size()), a.data(), fma[0]);
  cpu::exp2_nonpos_simd<T>(t.data(), std::int64_t(t.size()), b.data(), fma[1]);
  EXPECT_EQ(a, b);
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

TEST(RowPassIsa, UnsupportedPathThrows) {
  const float t = 0;
  float o = 0;
  for (RowPassIsa isa : {RowPassIsa::kAvx2, RowPassIsa::kAvx512}) {
    if (!cpu::row_pass_isa_supported(isa)) {
      EXPECT_THROW(cpu::exp2_nonpos_simd<float>(&t, 1, &o, isa), std::invalid_argument);
    }
  }
  EXPECT_NO_THROW(cpu::exp2_nonpos_simd<float>(&t, 1, &o, RowPassIsa::kAuto));
  EXPECT_EQ(o, 1.0f);
}

// ---- data and the long-double reference -----------------------------------------------------

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

// Owning storage of a policy (the policy itself holds pointers into it).
template <class T>
struct PolicyData {
  std::vector<std::int32_t> row_labels, key_labels;
  std::vector<T> table;
  std::int64_t classes = 0;
  std::vector<std::int64_t> run_ptr;
  std::vector<std::int32_t> runs;
  std::int64_t row_tile = 0, key_tile = 0;
  RowPassPolicy<T> policy() const {
    RowPassPolicy<T> p;
    if (classes > 0) {
      p.row_labels = row_labels.data();
      p.key_labels = key_labels.data();
      p.pair_table = table.data();
      p.classes = classes;
    }
    if (!run_ptr.empty()) {
      p.run_ptr = run_ptr.data();
      p.runs = runs.data();
      p.row_tile = row_tile;
      p.key_tile = key_tile;
    }
    return p;
  }
};

template <class T>
void add_pair_term(PolicyData<T>* pd, std::int64_t rows, std::int64_t keys, std::int64_t classes,
                   std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> lab(0, std::int32_t(classes - 1));
  std::uniform_real_distribution<double> u(-4.0, 1.0);
  pd->classes = classes;
  pd->row_labels.resize(std::size_t(rows));
  pd->key_labels.resize(std::size_t(keys));
  for (auto& l : pd->row_labels) l = lab(rng);
  for (auto& l : pd->key_labels) l = lab(rng);
  pd->table.resize(std::size_t(classes * classes));
  for (auto& v : pd->table) v = T(u(rng));
}

enum class ListKind { kRandom, kAllOneRun, kAllTileRuns, kOneTile, kNoRuns };

// Random block lists: some row tiles without runs, runs of random lengths in shuffled order, an
// empty run here and there, the run holding the last key tile reaching past nk, and runs wholly
// past the last key tile (clipped to nothing).
template <class T>
void add_block_list(PolicyData<T>* pd, std::int64_t rows, std::int64_t keys, std::int64_t row_tile,
                    std::int64_t key_tile, double density, ListKind kind, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  pd->row_tile = row_tile;
  pd->key_tile = key_tile;
  const std::int64_t rt = (rows + row_tile - 1) / row_tile, kt = (keys + key_tile - 1) / key_tile;
  pd->run_ptr.assign(1, 0);
  pd->runs.clear();
  for (std::int64_t r = 0; r < rt; ++r) {
    std::vector<std::pair<std::int32_t, std::int32_t>> runs;
    if (kind == ListKind::kAllOneRun) {
      runs.push_back({0, std::int32_t(kt)});
    } else if (kind == ListKind::kAllTileRuns) {
      for (std::int32_t t = 0; t < kt; ++t) runs.push_back({t, t + 1});
      std::shuffle(runs.begin(), runs.end(), rng);
    } else if (kind == ListKind::kOneTile) {
      if (r == rt / 2) runs.push_back({std::int32_t(kt / 3), std::int32_t(kt / 3 + 1)});
    } else if (kind == ListKind::kRandom && u(rng) > 0.15) {
      std::int32_t t = 0;
      while (t < kt) {
        if (u(rng) < density) {
          std::int32_t e = t + 1;
          while (e < kt && u(rng) < 0.6) ++e;
          runs.push_back({t, e == kt ? e + 3 : e});
          t = e + 1;
        } else {
          ++t;
        }
      }
      if (u(rng) < 0.5) runs.push_back({std::int32_t(kt) + 1, std::int32_t(kt) + 4});
      if (u(rng) < 0.5) runs.push_back({std::int32_t(kt / 2), std::int32_t(kt / 2)});
      std::shuffle(runs.begin(), runs.end(), rng);
    }
    for (const auto& rr : runs) {
      pd->runs.push_back(rr.first);
      pd->runs.push_back(rr.second);
    }
    pd->run_ptr.push_back(std::int64_t(pd->runs.size() / 2));
  }
}

struct Reference {
  std::vector<long double> lse;                 // -inf: no key
  std::vector<long double> amax;                // magnitude of the scores' terms
  std::vector<std::vector<long double>> ratio;  // sum_j w_ij V_jk / sum_j w_ij
};

template <class T>
Reference reference(const PassData<T>& p, const RowPassPolicy<T>& pol, const std::vector<T>& v,
                    std::int64_t K) {
  Reference ref;
  ref.lse.assign(std::size_t(p.rows), -INFINITY);
  ref.amax.assign(std::size_t(p.rows), 0);
  ref.ratio.assign(std::size_t(p.rows), std::vector<long double>(std::size_t(K), 0));
  std::vector<char> in(std::size_t(p.keys));
  std::vector<long double> s(std::size_t(p.keys));
  for (std::int64_t i = 0; i < p.rows; ++i) {
    if (pol.run_ptr) {
      std::fill(in.begin(), in.end(), 0);
      const std::int64_t t = i / pol.row_tile;
      for (std::int64_t q = pol.run_ptr[t]; q < pol.run_ptr[t + 1]; ++q)
        for (std::int64_t kt = pol.runs[2 * q]; kt < pol.runs[2 * q + 1]; ++kt)
          for (std::int64_t j = kt * pol.key_tile; j < std::min(p.keys, (kt + 1) * pol.key_tile); ++j) {
            EXPECT_EQ(in[std::size_t(j)], 0) << "test bug: overlapping runs";
            in[std::size_t(j)] = 1;
          }
    } else {
      std::fill(in.begin(), in.end(), 1);
    }
    long double mx = -INFINITY, amax = 0;
    for (std::int64_t j = 0; j < p.keys; ++j) {
      s[std::size_t(j)] = -INFINITY;
      if (!in[std::size_t(j)]) continue;
      long double dot = 0;
      for (std::int64_t k = 0; k < p.d; ++k) dot += (long double)p.qa(i, k) * p.ka(j, k);
      const long double b = p.bias[std::size_t(j)];
      const long double pr =
          pol.pair_table ? (long double)pol.pair_table[pol.row_labels[i] * pol.classes +
                                                       pol.key_labels[j]]
                         : 0.0L;
      s[std::size_t(j)] = (long double)p.scale * dot + b + pr;
      if (std::isfinite((double)b))
        amax = std::max(amax, std::abs((long double)p.scale * dot) + std::abs(b) + std::abs(pr));
      mx = std::max(mx, s[std::size_t(j)]);
    }
    ref.amax[std::size_t(i)] = amax;
    if (mx == -INFINITY) continue;
    long double sum = 0;
    std::vector<long double> acc(std::size_t(K), 0);
    for (std::int64_t j = 0; j < p.keys; ++j) {
      if (s[std::size_t(j)] == -INFINITY) continue;
      const long double wj = std::exp(s[std::size_t(j)] - mx);
      sum += wj;
      for (std::int64_t k = 0; k < K; ++k) acc[std::size_t(k)] += wj * v[std::size_t(j * K + k)];
    }
    ref.lse[std::size_t(i)] = mx + std::log(sum);
    for (std::int64_t k = 0; k < K; ++k) ref.ratio[std::size_t(i)][std::size_t(k)] = acc[std::size_t(k)] / sum;
  }
  return ref;
}

// Checks one pass result against the reference: LSE per row (or the empty row's -inf / 0), and
// the value ratios.
template <class T>
void expect_matches(const PassData<T>& p, const Reference& ref, const RowPassResult& r,
                    std::int64_t K, const std::vector<T>& v) {
  ASSERT_EQ(std::int64_t(r.max.size()), p.rows);
  ASSERT_EQ(std::int64_t(r.sum.size()), p.rows);
  ASSERT_EQ(r.K, K);
  double vmax = 0;
  for (T x : v) vmax = std::max(vmax, std::abs(double(x)));
  for (std::int64_t i = 0; i < p.rows; ++i) {
    const std::size_t ii = std::size_t(i);
    if (ref.lse[ii] == -INFINITY) {
      EXPECT_EQ(r.max[ii], -std::numeric_limits<double>::infinity()) << "row " << i;
      EXPECT_EQ(r.sum[ii], 0.0) << "row " << i;
      for (std::int64_t k = 0; k < K; ++k) EXPECT_EQ(r.acc(i, k), 0.0) << "row " << i;
      continue;
    }
    const double got = r.max[ii] + std::log(r.sum[ii]);
    // Scores are rounded at |s| * u; the exp2 domain adds a rounding of log2(e) s.
    const double bound = tol<T>(16 * (1 + p.d)) * (1 + double(ref.amax[ii]));
    ASSERT_NEAR(got, double(ref.lse[ii]), bound) << "row " << i;
    EXPECT_GE(r.sum[ii], 1.0 - 1e-6) << "the max term contributes ~1";
    for (std::int64_t k = 0; k < K; ++k) {
      const double ratio = r.acc(i, k) / r.sum[ii];
      ASSERT_NEAR(ratio, double(ref.ratio[ii][std::size_t(k)]), 4 * bound * vmax + tol<T>(64) * vmax)
          << "row " << i << " column " << k;
    }
  }
}

template <class T>
std::vector<T> make_values(std::int64_t keys, std::int64_t K, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.5, 1.5);
  std::vector<T> v(std::size_t(keys * K));
  for (T& x : v) x = T(u(rng));
  return v;
}

template <class T>
RowPassResult run_pass(RowPassIsa isa, int threads, const PassData<T>& p,
                       const RowPassPolicy<T>& pol, const std::vector<T>& v, std::int64_t K,
                       std::int64_t pair_bytes = RowPassTuning{}.pair_bias_bytes) {
  cpu::ThreadPool pool(threads);
  RowPassResult r;
  RowPassTuning tuning;
  tuning.isa = isa;
  tuning.pair_bias_bytes = pair_bytes;
  cpu::row_pass_tuned<T>(tuning, pool, p.qref(), p.kref(), p.bias.data(), p.scale,
                         MatrixRef<T>{K ? v.data() : nullptr, K ? p.keys : 0, K}, &r, pol);
  return r;
}

void expect_same_bits(const RowPassResult& a, const RowPassResult& b, const std::string& what) {
  EXPECT_EQ(a.max, b.max) << what;
  EXPECT_EQ(a.sum, b.sum) << what;
  EXPECT_EQ(a.accum, b.accum) << what;
}

// ---- the plain pass -------------------------------------------------------------------------

class RowPass : public ::testing::TestWithParam<PassCase> {};

template <class T>
void check_lse(const PassCase& c) {
  const PassData<T> p = make_pass_data<T>(c);
  const Reference ref = reference<T>(p, RowPassPolicy<T>{}, {}, 0);
  for (RowPassIsa isa : isas()) {
    SCOPED_TRACE(cpu::to_string(isa));
    expect_matches<T>(p, ref, run_pass<T>(isa, 2, p, {}, {}, 0), 0, {});
  }
  // row_pass (kAuto) is the best path.
  cpu::ThreadPool pool(2);
  RowPassResult a;
  cpu::row_pass<T>(pool, p.qref(), p.kref(), p.bias.data(), p.scale, MatrixRef<T>{}, &a);
  expect_same_bits(a, run_pass<T>(cpu::row_pass_best_isa(), 2, p, {}, {}, 0), "auto");
}

TEST_P(RowPass, LseFp64) { check_lse<double>(GetParam()); }
TEST_P(RowPass, LseFp32) { check_lse<float>(GetParam()); }

// Same bits for 1, 2 and 3 threads, and from run to run, on every path.
TEST_P(RowPass, DeterministicForAnyThreadCount) {
  const PassData<float> p = make_pass_data<float>(GetParam());
  for (RowPassIsa isa : isas()) {
    SCOPED_TRACE(cpu::to_string(isa));
    const RowPassResult one = run_pass<float>(isa, 1, p, {}, {}, 0);
    for (int t = 1; t <= 3; ++t) expect_same_bits(run_pass<float>(isa, t, p, {}, {}, 0), one, "threads");
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

// ---- policies -------------------------------------------------------------------------------

struct PolicyCase {
  PassCase pass;
  std::int64_t classes;   // 0: no pair term
  std::int64_t row_tile;  // 0: no block list
  std::int64_t key_tile;
  double density;
  ListKind kind;
};

std::string case_name(const ::testing::TestParamInfo<PolicyCase>& info) {
  const PolicyCase& c = info.param;
  const char* kinds[] = {"random", "allonerun", "alltileruns", "onetile", "noruns"};
  std::string s = "r" + std::to_string(c.pass.rows) + "_k" + std::to_string(c.pass.keys) + "_d" +
                  std::to_string(c.pass.d) + "_m" + std::to_string(c.pass.mask) + "_c" +
                  std::to_string(c.classes);
  if (c.row_tile > 0)
    s += "_rt" + std::to_string(c.row_tile) + "_kt" + std::to_string(c.key_tile) + "_" +
         kinds[int(c.kind)];
  return s;
}

template <class T>
PolicyData<T> make_policy(const PolicyCase& c) {
  PolicyData<T> pd;
  if (c.classes > 0) add_pair_term(&pd, c.pass.rows, c.pass.keys, c.classes, 11 + c.classes);
  if (c.row_tile > 0)
    add_block_list(&pd, c.pass.rows, c.pass.keys, c.row_tile, c.key_tile, c.density, c.kind,
                   std::uint64_t(17 + c.row_tile * 3 + c.key_tile));
  return pd;
}

class RowPassPolicies : public ::testing::TestWithParam<PolicyCase> {};

template <class T>
void check_policy(const PolicyCase& c) {
  const PassData<T> p = make_pass_data<T>(c.pass);
  const PolicyData<T> pd = make_policy<T>(c);
  const RowPassPolicy<T> pol = pd.policy();
  EXPECT_NO_THROW(cpu::validate_block_list(pol, p.rows, p.keys));
  EXPECT_NO_THROW(cpu::validate_pair_term(pol, p.rows, p.keys));
  for (std::int64_t K : {0, 1, 5}) {
    SCOPED_TRACE("K = " + std::to_string(K));
    const std::vector<T> v = make_values<T>(p.keys, K, 5 + K);
    const Reference ref = reference<T>(p, pol, v, K);
    for (RowPassIsa isa : isas()) {
      SCOPED_TRACE(cpu::to_string(isa));
      const RowPassResult r = run_pass<T>(isa, 2, p, pol, v, K);
      expect_matches<T>(p, ref, r, K, v);
      if (K == 0 && c.classes > 0)  // the per-block pair biases give the same bits
        expect_same_bits(run_pass<T>(isa, 2, p, pol, v, K, /*pair_bytes=*/0), r, "per-block");
      if (K != 1) expect_same_bits(run_pass<T>(isa, 1, p, pol, v, K), r, "threads 1 vs 2");
      if (K > 0) break;  // the value pass does not depend on the ISA path
    }
  }
}

TEST_P(RowPassPolicies, Fp64) { check_policy<double>(GetParam()); }
TEST_P(RowPassPolicies, Fp32) { check_policy<float>(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Cases, RowPassPolicies,
    ::testing::Values(
        // pair term alone: 1, 10 and 100 classes, direct and GEMM, masked keys, n = 1
        PolicyCase{{1, 1, 1, 0}, 1, 0, 0, 0, ListKind::kRandom},
        PolicyCase{{1, 700, 3, 1}, 100, 0, 0, 0, ListKind::kRandom},
        PolicyCase{{37, 1029, 3, 1}, 1, 0, 0, 0, ListKind::kRandom},
        PolicyCase{{70, 1100, 5, 2}, 10, 0, 0, 0, ListKind::kRandom},
        PolicyCase{{300, 777, 8, 0}, 100, 0, 0, 0, ListKind::kRandom},
        PolicyCase{{259, 600, 12, 1}, 10, 0, 0, 0, ListKind::kRandom},
        PolicyCase{{90, 513, 64, 3}, 100, 0, 0, 0, ListKind::kRandom},
        // block lists alone: partial tiles, odd tile sizes, key tiles not a multiple of the lanes
        PolicyCase{{300, 1300, 3, 1}, 0, 128, 64, 0.3, ListKind::kRandom},
        PolicyCase{{129, 1001, 2, 0}, 0, 16, 13, 0.4, ListKind::kRandom},
        PolicyCase{{77, 999, 7, 2}, 0, 7, 50, 0.5, ListKind::kRandom},
        PolicyCase{{1, 130, 3, 0}, 0, 128, 64, 0.9, ListKind::kRandom},
        PolicyCase{{300, 1300, 9, 1}, 0, 128, 64, 0.3, ListKind::kRandom},
        PolicyCase{{270, 700, 64, 0}, 0, 300, 37, 0.4, ListKind::kRandom},
        PolicyCase{{200, 1000, 3, 0}, 0, 128, 64, 0, ListKind::kOneTile},
        PolicyCase{{200, 1000, 16, 0}, 0, 128, 64, 0, ListKind::kOneTile},
        PolicyCase{{200, 1000, 3, 0}, 0, 128, 64, 0, ListKind::kNoRuns},
        PolicyCase{{150, 1030, 4, 1}, 0, 64, 64, 0, ListKind::kAllTileRuns},
        PolicyCase{{150, 1030, 20, 1}, 0, 64, 64, 0, ListKind::kAllTileRuns},
        // both together
        PolicyCase{{300, 1300, 3, 1}, 10, 128, 64, 0.3, ListKind::kRandom},
        PolicyCase{{129, 1001, 6, 0}, 100, 16, 13, 0.4, ListKind::kRandom},
        PolicyCase{{300, 900, 32, 1}, 10, 128, 64, 0.3, ListKind::kRandom},
        PolicyCase{{33, 257, 1, 0}, 1, 8, 5, 0.5, ListKind::kRandom}),
    case_name);

// Every row tile with the single run [0, key tiles): the dense chunks, so the dense bits.
template <class T>
void check_all_tiles_bitwise(std::int64_t d) {
  const PassData<T> p = make_pass_data<T>(PassCase{300, 1100, d, 1});
  for (std::int64_t row_tile : {128, 7, 1000}) {
    PolicyData<T> pd;
    add_block_list(&pd, p.rows, p.keys, row_tile, 64, 0, ListKind::kAllOneRun, 3);
    for (RowPassIsa isa : isas()) {
      SCOPED_TRACE(std::string(cpu::to_string(isa)) + ", row_tile " + std::to_string(row_tile));
      const RowPassResult dense = run_pass<T>(isa, 2, p, {}, {}, 0);
      expect_same_bits(run_pass<T>(isa, 2, p, pd.policy(), {}, 0), dense, "all tiles, LSE");
    }
    // The value pass's tiles are Eigen products of its row blocks (64 rows): the same bits when
    // the row tiles split into the same blocks, equal to rounding otherwise.
    const std::vector<T> v = make_values<T>(p.keys, 3, 1);
    const RowPassResult a = run_pass<T>(RowPassIsa::kAuto, 2, p, pd.policy(), v, 3);
    const RowPassResult b = run_pass<T>(RowPassIsa::kAuto, 2, p, {}, v, 3);
    if (row_tile % cpu::RowPassTile::kValueRowBlock == 0 || row_tile >= p.rows) {
      expect_same_bits(a, b, "all tiles, values");
    } else {
      EXPECT_EQ(a.max, b.max);
      for (std::size_t i = 0; i < a.sum.size(); ++i)
        ASSERT_NEAR(a.sum[i], b.sum[i], tol<T>(64) * b.sum[i]) << i;
      for (std::size_t i = 0; i < a.accum.size(); ++i)
        ASSERT_NEAR(a.accum[i], b.accum[i], tol<T>(64) * b.accum[i]) << i;
    }
  }
}
TEST(RowPassBlockList, AllTilesOneRunIsDenseBitwiseDirect) {
  check_all_tiles_bitwise<float>(3);
  check_all_tiles_bitwise<double>(3);
}
// The GEMM path: a score is the same FMA chain in any row block.
TEST(RowPassBlockList, AllTilesOneRunIsDenseBitwiseGemm) {
  const PassData<float> p = make_pass_data<float>(PassCase{300, 1100, 16, 1});
  for (std::int64_t row_tile : {512, 256, 128, 7}) {
    PolicyData<float> pd;
    add_block_list(&pd, p.rows, p.keys, row_tile, 64, 0, ListKind::kAllOneRun, 3);
    for (RowPassIsa isa : isas()) {
      SCOPED_TRACE(std::string(cpu::to_string(isa)) + ", row_tile " + std::to_string(row_tile));
      expect_same_bits(run_pass<float>(isa, 2, p, pd.policy(), {}, 0),
                       run_pass<float>(isa, 2, p, {}, {}, 0), "all tiles, GEMM");
    }
  }
}

// A pair table of zeros is the plain pass, and one class with table value t is the plain pass
// with bias + t, bitwise.
template <class T>
void check_pair_identities(std::int64_t d) {
  const PassData<T> p = make_pass_data<T>(PassCase{100, 900, d, 1});
  PolicyData<T> zero;
  add_pair_term(&zero, p.rows, p.keys, 7, 5);
  std::fill(zero.table.begin(), zero.table.end(), T(0));
  PolicyData<T> one;
  add_pair_term(&one, p.rows, p.keys, 1, 6);
  one.table[0] = T(-1.75);
  PassData<T> shifted = p;
  for (T& b : shifted.bias) b += one.table[0];
  const std::vector<T> v = make_values<T>(p.keys, 2, 2);
  for (RowPassIsa isa : isas()) {
    SCOPED_TRACE(cpu::to_string(isa));
    expect_same_bits(run_pass<T>(isa, 2, p, zero.policy(), {}, 0), run_pass<T>(isa, 2, p, {}, {}, 0),
                     "zero table");
    expect_same_bits(run_pass<T>(isa, 2, p, one.policy(), {}, 0),
                     run_pass<T>(isa, 2, shifted, {}, {}, 0), "one class");
  }
  expect_same_bits(run_pass<T>(RowPassIsa::kAuto, 2, p, zero.policy(), v, 2),
                   run_pass<T>(RowPassIsa::kAuto, 2, p, {}, v, 2), "zero table, values");
}
TEST(RowPassPairTerm, IdentitiesBitwise) {
  check_pair_identities<float>(3);
  check_pair_identities<double>(3);
  check_pair_identities<float>(24);
  check_pair_identities<double>(24);
}

// ---- validation -----------------------------------------------------------------------------

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(RowPassValidate, BlockList) {
  PolicyData<float> pd;
  pd.row_tile = 4;
  pd.key_tile = 8;
  // 10 rows: 3 row tiles; 80 keys: 10 key tiles. Tile 0: runs [3,5) [0,2); tile 1: none;
  // tile 2: [5,12) (past the last key tile) and [0,0) (empty).
  pd.run_ptr = {0, 2, 2, 4};
  pd.runs = {3, 5, 0, 2, 5, 12, 0, 0};
  auto check = [&](const PolicyData<float>& x) { cpu::validate_block_list(x.policy(), 10, 80); };
  EXPECT_NO_THROW(check(pd));
  {
    PolicyData<float> x = pd;
    x.runs[2] = 4;  // tile 0: [3,5) and [4,2) -> begin > end
    x.runs[3] = 2;
    const std::string m = message_of([&] { check(x); });
    EXPECT_NE(m.find("row tile 0, run 1"), std::string::npos) << m;
  }
  {
    PolicyData<float> x = pd;
    x.runs[6] = 6;  // tile 2: [5,12) and [6,7) overlap
    x.runs[7] = 7;
    const std::string m = message_of([&] { check(x); });
    EXPECT_NE(m.find("row tile 2"), std::string::npos) << m;
    EXPECT_NE(m.find("run 3 [6, 7) overlaps run 2 [5, 12)"), std::string::npos) << m;
  }
  {
    PolicyData<float> x = pd;
    x.runs[6] = 6;  // an empty run inside another is no overlap
    x.runs[7] = 6;
    EXPECT_NO_THROW(check(x));
  }
  {
    PolicyData<float> x = pd;
    x.runs[6] = 11;  // [11,13) and [5,12) meet only past the last key tile: no overlap
    x.runs[7] = 13;
    EXPECT_NO_THROW(check(x));
  }
  {
    PolicyData<float> x = pd;
    x.runs[0] = -1;
    const std::string m = message_of([&] { check(x); });
    EXPECT_NE(m.find("row tile 0, run 0"), std::string::npos) << m;
  }
  {
    PolicyData<float> x = pd;
    x.run_ptr = {0, 3, 2, 4};
    const std::string m = message_of([&] { check(x); });
    EXPECT_NE(m.find("run_ptr decreases at row tile 1"), std::string::npos) << m;
  }
  {
    PolicyData<float> x = pd;
    x.run_ptr[0] = 1;
    EXPECT_THROW(check(x), std::invalid_argument);
  }
  {
    PolicyData<float> x = pd;
    x.key_tile = 0;
    const std::string m = message_of([&] { check(x); });
    EXPECT_NE(m.find("key_tile"), std::string::npos) << m;
  }
  EXPECT_NO_THROW(cpu::validate_block_list(RowPassPolicy<float>{}, 10, 80));  // no list
}

TEST(RowPassValidate, PairTerm) {
  PolicyData<double> pd;
  add_pair_term(&pd, 5, 7, 3, 1);
  auto check = [&](const PolicyData<double>& x) { cpu::validate_pair_term(x.policy(), 5, 7); };
  EXPECT_NO_THROW(check(pd));
  {
    PolicyData<double> x = pd;
    x.key_labels[4] = 3;
    const std::string m = message_of([&] { check(x); });
    EXPECT_NE(m.find("key_labels[4] = 3"), std::string::npos) << m;
  }
  {
    PolicyData<double> x = pd;
    x.row_labels[2] = -1;
    const std::string m = message_of([&] { check(x); });
    EXPECT_NE(m.find("row_labels[2] = -1"), std::string::npos) << m;
  }
  {
    PolicyData<double> x = pd;
    x.table[5] = std::numeric_limits<double>::infinity();
    const std::string m = message_of([&] { check(x); });
    EXPECT_NE(m.find("pair_table[1, 2]"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace kantor::testing
