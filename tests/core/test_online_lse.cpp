// Properties of the one online (max, sum[, values]) state (lib/core/online_lse.hpp) that every
// pass of both engines merges with: it equals the direct log-sum-exp of the set it summarizes,
// merge is associative and commutative (to rounding), the empty state is its identity, -inf
// scores and all-masked sets never produce NaN, and the dual math around it (potential, marginal
// term, prefactor) matches its closed forms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "lib/core/online_lse.hpp"

namespace kantor {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct State {
  double m = -kInf, s = 0;
  std::vector<double> v;
};

// The state of scores u[b, e) (values V[j][0..K)) built by one online_raise per element.
State build(const std::vector<double>& u, const std::vector<std::vector<double>>& V, std::size_t b,
            std::size_t e, double alpha, int K) {
  State st;
  st.v.assign(std::size_t(K), 0.0);
  for (std::size_t j = b; j < e; ++j) {
    const double r = online_raise(st.m, u[j], alpha, ExactExp2{});
    st.s *= r;
    for (double& x : st.v) x *= r;
    if (st.m == -kInf) continue;  // still all masked
    const double w = std::exp2(alpha * (u[j] - st.m));
    st.s += w;
    for (int k = 0; k < K; ++k) st.v[std::size_t(k)] += w * V[j][std::size_t(k)];
  }
  return st;
}

State merged(State a, const State& b, double alpha) {
  online_merge(a.m, a.s, a.v.data(), b.m, b.s, b.v.data(), int(a.v.size()), alpha, ExactExp2{});
  return a;
}

// Direct reference in long double: LSE in natural log and the value sums scaled by exp(-LSE).
struct Direct {
  long double lse;
  std::vector<long double> v;  // sum_j exp(ln2 alpha u_j - lse) V_jk
};
Direct direct(const std::vector<double>& u, const std::vector<std::vector<double>>& V,
              double alpha, int K) {
  long double mx = -INFINITY;
  for (double x : u) mx = std::max<long double>(mx, (long double)x);
  Direct d{-INFINITY, std::vector<long double>(std::size_t(K), 0)};
  if (mx == -INFINITY) return d;
  long double s = 0;
  const long double a = (long double)alpha * std::log(2.0L);
  for (double x : u) s += std::exp(a * ((long double)x - mx));
  d.lse = a * mx + std::log(s);
  for (std::size_t j = 0; j < u.size(); ++j)
    for (int k = 0; k < K; ++k)
      d.v[std::size_t(k)] += std::exp(a * (long double)u[j] - d.lse) * V[j][std::size_t(k)];
  return d;
}

void expect_matches(const State& st, const Direct& d, double alpha) {
  const double lse = online_lse(st.m, st.s, alpha);
  if (d.lse == -INFINITY) {
    EXPECT_EQ(lse, -kInf);
    EXPECT_EQ(st.s, 0.0);
    for (double x : st.v) EXPECT_EQ(x, 0.0);
    return;
  }
  EXPECT_NEAR(lse, double(d.lse), 1e-13 * (1 + std::abs(double(d.lse))));
  for (std::size_t k = 0; k < st.v.size(); ++k) {
    const double scale = std::exp(online_lse(st.m, st.s, alpha) - std::log(st.s));  // 2^(alpha m)
    EXPECT_NEAR(st.v[k] * scale / std::exp(lse), double(d.v[k]), 1e-11 * (1 + std::abs(double(d.v[k]))))
        << "value " << k;
  }
}

TEST(OnlineLse, EqualsTheDirectSumAndMergesAssociatively) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> nd(0.0, 30.0);
  std::bernoulli_distribution masked(0.2);
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t n = 1 + std::size_t(trial % 37);
    const double alpha = trial % 2 ? 1.4426950408889634 : 0.37;
    const int K = trial % 3;
    std::vector<double> u(n);
    std::vector<std::vector<double>> V(n, std::vector<double>(std::size_t(K)));
    for (std::size_t j = 0; j < n; ++j) {
      u[j] = masked(rng) ? -kInf : nd(rng);
      for (double& x : V[j]) x = nd(rng);
    }
    if (trial % 11 == 0) std::fill(u.begin(), u.end(), -kInf);  // an all-masked set
    const Direct d = direct(u, V, alpha, K);
    const State whole = build(u, V, 0, n, alpha, K);
    expect_matches(whole, d, alpha);
    // Any split, merged either way round and in either grouping, gives the same state.
    const std::size_t i = n / 3, j = (2 * n) / 3;
    const State A = build(u, V, 0, i, alpha, K), B = build(u, V, i, j, alpha, K),
                C = build(u, V, j, n, alpha, K);
    expect_matches(merged(merged(A, B, alpha), C, alpha), d, alpha);
    expect_matches(merged(A, merged(B, C, alpha), alpha), d, alpha);
    expect_matches(merged(merged(C, A, alpha), B, alpha), d, alpha);
    // The empty state is the identity, on either side.
    State empty;
    empty.v.assign(std::size_t(K), 0.0);
    const State l = merged(empty, whole, alpha), r = merged(whole, empty, alpha);
    EXPECT_EQ(l.m, whole.m);
    EXPECT_EQ(l.s, whole.s);
    EXPECT_EQ(r.m, whole.m);
    EXPECT_EQ(r.s, whole.s);
    for (int k = 0; k < K; ++k) {
      EXPECT_EQ(l.v[std::size_t(k)], whole.v[std::size_t(k)]);
      EXPECT_EQ(r.v[std::size_t(k)], whole.v[std::size_t(k)]);
    }
  }
}

TEST(OnlineLse, EmptyAndMaskedStatesNeverProduceNaN) {
  double m = -kInf, s = 0;
  online_merge(m, s, -kInf, 0.0, 1.0, ExactExp2{});  // empty + empty
  EXPECT_EQ(m, -kInf);
  EXPECT_EQ(s, 0.0);
  EXPECT_EQ(online_raise(m, -kInf, 1.0, ExactExp2{}), 1.0);  // a masked tile
  EXPECT_EQ(m, -kInf);
  EXPECT_EQ(online_lse(m, s, 1.0), -kInf);
  EXPECT_EQ(potential_from_lse(2.0, 0.1, -kInf), kInf);  // a row without keys: +inf, as the CPU
  EXPECT_EQ(plan_prefactor(0.0, 1.0, 0.0, 0.1, -kInf, 1.0), 0.0);
  EXPECT_EQ(plan_prefactor(-kInf, 1.0, 0.0, 0.1, 3.0, 1.0), 0.0);
  EXPECT_EQ(marginal_term(0.0, kInf, 1.0, 0.1), 0.0);  // a zero weight never gives 0 * inf
  const double r = online_raise(m, 5.0, 2.0, ExactExp2{});  // first unmasked tile
  EXPECT_EQ(r, 0.0);
  EXPECT_EQ(m, 5.0);
}

TEST(OnlineLse, DualMathMatchesItsClosedForms) {
  // potential: q - eps LSE; marginal term: w |e^{(old - new)/eps} - 1|; relaxed update.
  EXPECT_DOUBLE_EQ(potential_from_lse(1.5, 0.2, 3.0), 1.5 - 0.6);
  EXPECT_DOUBLE_EQ(marginal_term(0.25, 1.0, 0.9, 0.05), 0.25 * std::abs(std::expm1(2.0)));
  EXPECT_DOUBLE_EQ(relaxed(1.0, 3.0, 1.0), 3.0);
  EXPECT_DOUBLE_EQ(relaxed(1.0, 3.0, 0.5), 2.0);
  // prefactor: exp(log w + (f - q)/eps + ln2 alpha m).
  EXPECT_NEAR(plan_prefactor(std::log(0.3), 0.7, 0.2, 0.5, 1.25, 0.8),
              0.3 * std::exp((0.7 - 0.2) / 0.5 + std::log(2.0) * 0.8 * 1.25), 1e-15);
  // online_lse(m, s, alpha) = ln(sum_j exp(ln2 alpha u_j)) for the state of {u}.
  EXPECT_NEAR(online_lse(2.0, 3.0, 1.0), std::log(2.0) * 2.0 + std::log(3.0), 1e-15);
}

}  // namespace
}  // namespace kantor
