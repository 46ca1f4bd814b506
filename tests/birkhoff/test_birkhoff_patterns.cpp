// Tests of the Birkhoff projection on -inf patterns: reducible patterns (block diagonal after
// permuting rows and columns, one gauge per block), patterns without total support, empty
// rows/columns/matrices as invalid input, and the empty batch. References: the float64 log-domain
// Sinkhorn of tests/birkhoff/reference.hpp, an independent float64 Newton solved block by block
// (below), and a brute-force total-support check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kantor/birkhoff.hpp"
#include "kantor/config.hpp"
#include "kantor/info.hpp"
#include "lib/birkhoff/algorithms.hpp"
#include "tests/birkhoff/helpers.hpp"
#include "tests/birkhoff/reference.hpp"

namespace kantor {
namespace {

using test::Mat;

using test::cpu_context;
using test::cview;
using test::matrix;
using test::max_abs_diff;
using test::view;

const float kNegInf = -INFINITY;

// The 4x4 case of issue 8: two 2x2 blocks with large logits (old Newton: Err 2e-4, entries off by
// up to 0.64).
const std::vector<float> kIssueExample = {4.8f,    -2.4f,   kNegInf, kNegInf, 0.2f,    15.5f,
                                          kNegInf, kNegInf, kNegInf, kNegInf, 19.4f,   -2.7f,
                                          kNegInf, kNegInf, -8.9f,   -2.9f};

/// B random reducible n x n logit matrices: the rows and columns are split into 2 or 3 square
/// blocks of random sizes (>= 1), the entries inside the blocks ~ N(0, scale^2), the rest -inf,
/// then rows and columns are permuted independently. Every such pattern has total support.
std::vector<float> reducible_batch(int n, int B, double scale, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> d(0, scale);
  std::vector<float> R(std::size_t(B) * n * n, kNegInf);
  for (int b = 0; b < B; ++b) {
    const int blocks = std::min(n, 2 + int(gen() % 2));
    // Block sizes: cut points in 1..n-1.
    std::vector<int> cuts(std::size_t(n - 1));
    std::iota(cuts.begin(), cuts.end(), 1);
    std::shuffle(cuts.begin(), cuts.end(), gen);
    cuts.resize(std::size_t(blocks - 1));
    cuts.push_back(0);
    cuts.push_back(n);
    std::sort(cuts.begin(), cuts.end());
    std::vector<int> block_of(static_cast<std::size_t>(n));
    for (std::size_t k = 0; k + 1 < cuts.size(); ++k)
      for (int i = cuts[k]; i < cuts[k + 1]; ++i) block_of[std::size_t(i)] = int(k);
    std::vector<int> pr(static_cast<std::size_t>(n)), pc(static_cast<std::size_t>(n));
    std::iota(pr.begin(), pr.end(), 0);
    std::iota(pc.begin(), pc.end(), 0);
    std::shuffle(pr.begin(), pr.end(), gen);
    std::shuffle(pc.begin(), pc.end(), gen);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        if (block_of[std::size_t(i)] == block_of[std::size_t(j)])
          R[std::size_t(b) * n * n + std::size_t(pr[std::size_t(i)]) * n +
            std::size_t(pc[std::size_t(j)])] = float(d(gen));
  }
  return R;
}

/// Independent float64 reference for a pattern with total support: connected components of the
/// bipartite graph of finite entries, then a damped Newton on each block's reduced dual (its
/// last column fixed), to machine precision. Returns P (and false if a block did not converge).
bool newton_reference(const Mat& R, int n, Mat& P) {
  std::vector<int> comp(std::size_t(2 * n), -1);  // rows 0..n-1, columns n..2n-1
  int ncomp = 0;
  for (int s = 0; s < 2 * n; ++s) {
    if (comp[std::size_t(s)] >= 0) continue;
    std::vector<int> stack{s};
    comp[std::size_t(s)] = ncomp;
    while (!stack.empty()) {
      const int u = stack.back();
      stack.pop_back();
      for (int v = 0; v < n; ++v) {
        const int w = u < n ? n + v : v;
        const double e = u < n ? R[std::size_t(u * n + v)] : R[std::size_t(v * n + (u - n))];
        if (e == -INFINITY || comp[std::size_t(w)] >= 0) continue;
        comp[std::size_t(w)] = ncomp;
        stack.push_back(w);
      }
    }
    ++ncomp;
  }
  P.assign(std::size_t(n * n), 0.0);
  bool ok = true;
  for (int c = 0; c < ncomp; ++c) {
    std::vector<int> rows, cols;
    for (int k = 0; k < n; ++k) {
      if (comp[std::size_t(k)] == c) rows.push_back(k);
      if (comp[std::size_t(n + k)] == c) cols.push_back(k);
    }
    const int m = int(cols.size());
    if (int(rows.size()) != m || m == 0) return false;
    std::vector<double> beta(std::size_t(m), 0.0);
    auto evaluate = [&](const std::vector<double>& bt, Mat& T, double& psi) {
      T.assign(std::size_t(m * m), 0.0);
      psi = 0;
      for (int a = 0; a < m; ++a) {
        double mx = -INFINITY;
        for (int q = 0; q < m; ++q)
          mx = std::max(mx, R[std::size_t(rows[std::size_t(a)] * n + cols[std::size_t(q)])] +
                                bt[std::size_t(q)]);
        double s = 0;
        for (int q = 0; q < m; ++q)
          s += std::exp(R[std::size_t(rows[std::size_t(a)] * n + cols[std::size_t(q)])] +
                        bt[std::size_t(q)] - mx);
        psi += mx + std::log(s);
        for (int q = 0; q < m; ++q)
          T[std::size_t(a * m + q)] =
              std::exp(R[std::size_t(rows[std::size_t(a)] * n + cols[std::size_t(q)])] +
                       bt[std::size_t(q)] - mx) /
              s;
      }
      for (int q = 0; q < m; ++q) psi -= bt[std::size_t(q)];
    };
    Mat T;
    double psi = 0, err = INFINITY;
    for (int it = 0; it < 500; ++it) {
      evaluate(beta, T, psi);
      std::vector<double> g(std::size_t(m), -1.0);
      for (int a = 0; a < m; ++a)
        for (int q = 0; q < m; ++q) g[std::size_t(q)] += T[std::size_t(a * m + q)];
      err = 0;
      for (double x : g) err += std::fabs(x);
      if (err < 1e-14 || m == 1) break;
      // H = diag(c) - T^T T on the first m-1 coordinates (diagonal as sum_a t_aj sum_{q != j} t_aq:
      // c_j - sum_a t_aj^2 cancels for near-permutations); Gaussian elimination with pivoting.
      const int k = m - 1;
      std::vector<double> A(std::size_t(k * (k + 1)), 0.0);
      for (int j = 0; j < k; ++j) {
        for (int l = 0; l < k; ++l) {
          double v = 0;
          for (int a = 0; a < m; ++a) {
            if (j != l) {
              v -= T[std::size_t(a * m + j)] * T[std::size_t(a * m + l)];
              continue;
            }
            double others = 0;
            for (int q = 0; q < m; ++q)
              if (q != j) others += T[std::size_t(a * m + q)];
            v += T[std::size_t(a * m + j)] * others;
          }
          A[std::size_t(j * (k + 1) + l)] = v;
        }
        A[std::size_t(j * (k + 1) + k)] = -g[std::size_t(j)];
      }
      for (int p = 0; p < k; ++p) {
        int piv = p;
        for (int r = p + 1; r < k; ++r)
          if (std::fabs(A[std::size_t(r * (k + 1) + p)]) >
              std::fabs(A[std::size_t(piv * (k + 1) + p)]))
            piv = r;
        for (int q = 0; q <= k; ++q)
          std::swap(A[std::size_t(p * (k + 1) + q)], A[std::size_t(piv * (k + 1) + q)]);
        for (int r = 0; r < k; ++r) {
          if (r == p) continue;
          const double f = A[std::size_t(r * (k + 1) + p)] / A[std::size_t(p * (k + 1) + p)];
          for (int q = p; q <= k; ++q)
            A[std::size_t(r * (k + 1) + q)] -= f * A[std::size_t(p * (k + 1) + q)];
        }
      }
      std::vector<double> dir(std::size_t(m), 0.0);
      double slope = 0;
      for (int j = 0; j < k; ++j) {
        dir[std::size_t(j)] = A[std::size_t(j * (k + 1) + k)] / A[std::size_t(j * (k + 1) + j)];
        if (!std::isfinite(dir[std::size_t(j)])) dir[std::size_t(j)] = 0;
        dir[std::size_t(j)] = std::max(-20.0, std::min(20.0, dir[std::size_t(j)]));
        slope += g[std::size_t(j)] * dir[std::size_t(j)];
      }
      double t = 1;
      std::vector<double> trial(static_cast<std::size_t>(m));
      for (int ls = 0; ls < 60; ++ls, t *= 0.5) {
        for (int q = 0; q < m; ++q) trial[std::size_t(q)] = beta[std::size_t(q)] + t * dir[std::size_t(q)];
        Mat T2;
        double psi2 = 0;
        evaluate(trial, T2, psi2);
        if (psi2 <= psi + 1e-4 * t * slope + 1e-14 * (1 + std::fabs(psi))) break;
      }
      beta = trial;
    }
    if (!(err < 1e-12) && m > 1) ok = false;
    for (int a = 0; a < m; ++a)
      for (int q = 0; q < m; ++q)
        P[std::size_t(rows[std::size_t(a)] * n + cols[std::size_t(q)])] = T[std::size_t(a * m + q)];
  }
  return ok;
}

// ---- forward on reducible patterns ------------------------------------------------------------

TEST(CpuBirkhoffPatterns, IssueExampleConverges) {
  Context ctx = cpu_context();
  std::vector<float> P(16, -7.f);
  BirkhoffSummary s = project_birkhoff(ctx, cview(kIssueExample, 4), view(P, 4), {});
  EXPECT_EQ(s.not_converged, 0) << s.brief_report();
  EXPECT_LE(test::marginal_error(P.data(), 4), 1e-5);
  Mat ref;
  ASSERT_TRUE(newton_reference(matrix(kIssueExample, 0, 4), 4, ref));
  EXPECT_LT(max_abs_diff(ref, P.data()), 1e-6);
  double sk_err = 0;
  const Mat sk = test::reference_projection(matrix(kIssueExample, 0, 4), 4, &sk_err);
  if (sk_err < 1e-12) EXPECT_LT(max_abs_diff(sk, P.data()), 1e-6);  // Sinkhorn is slow here
  for (int k : {2, 3, 6, 7, 8, 9, 12, 13}) EXPECT_EQ(P[std::size_t(k)], 0.f);
}

struct PatternCase {
  int n;
  double scale;
};

class CpuReducible : public ::testing::TestWithParam<PatternCase> {};

TEST_P(CpuReducible, ConvergesAndMatchesReferences) {
  const auto c = GetParam();
  const int n = c.n, B = 300;
  Context ctx = cpu_context();
  const auto R = reducible_batch(n, B, c.scale, 1000 + unsigned(n) * 7 + unsigned(c.scale));
  std::vector<float> P(R.size(), -7.f);
  BirkhoffSummary s = project_birkhoff(ctx, cview(R, n), view(P, n), {});
  EXPECT_EQ(s.not_converged, 0) << s.brief_report();
  EXPECT_EQ(s.invalid_inputs, 0);
  double worst = 0, dmax = 0;
  int compared = 0;
  for (int b = 0; b < B; ++b) {
    const float* Pb = &P[std::size_t(b) * n * n];
    worst = std::max(worst, test::marginal_error(Pb, n));
    Mat ref;
    if (!newton_reference(matrix(R, b, n), n, ref)) continue;
    ++compared;
    dmax = std::max(dmax, max_abs_diff(ref, Pb));
    for (int k = 0; k < n * n; ++k)
      if (R[std::size_t(b) * n * n + std::size_t(k)] == kNegInf) ASSERT_EQ(Pb[k], 0.f);
  }
  EXPECT_LE(worst, 1e-5) << "n=" << n << " scale=" << c.scale;
  EXPECT_GE(compared, B * 9 / 10);
  EXPECT_LT(dmax, 1e-6) << "n=" << n << " scale=" << c.scale;
  // Where the slow float64 Sinkhorn reaches 1e-12 it agrees too.
  int sk_compared = 0;
  for (int b = 0; b < B; b += 5) {
    double sk_err = 0;
    const Mat sk = test::reference_projection(matrix(R, b, n), n, &sk_err);
    if (sk_err > 1e-12) continue;
    ++sk_compared;
    EXPECT_LT(max_abs_diff(sk, &P[std::size_t(b) * n * n]), 1e-6) << "b=" << b;
  }
  if (c.scale <= 10) EXPECT_GT(sk_compared, 10);  // at scale 30 Sinkhorn rarely gets there
}
INSTANTIATE_TEST_SUITE_P(Patterns, CpuReducible,
                         ::testing::Values(PatternCase{4, 10.0}, PatternCase{4, 30.0},
                                           PatternCase{7, 10.0}, PatternCase{7, 30.0},
                                           PatternCase{3, 30.0}, PatternCase{16, 10.0}));

// ---- implicit backward on reducible patterns --------------------------------------------------

double loss(const Mat& P, const std::vector<float>& G, std::int64_t b, int n) {
  double l = 0;
  for (int k = 0; k < n * n; ++k) l += P[std::size_t(k)] * G[std::size_t(b * n * n + k)];
  return l;
}

TEST(CpuBirkhoffPatterns, ImplicitGradientOnReduciblePatternsMatchesFiniteDifferences) {
  Context ctx = cpu_context();
  for (int n : {4, 7}) {
    const int B = 8;
    // Moderate logits: central differences of the float64 reference need a smooth map.
    auto R = reducible_batch(n, B, 2.0, 77 + unsigned(n));
    if (n == 4)
      std::copy(kIssueExample.begin(), kIssueExample.end(), R.begin());  // the issue's matrix
    const auto G = test::random_logits(std::int64_t(B) * n * n, 1.0, 88 + unsigned(n));
    std::vector<float> P(R.size()), D(R.size(), NAN);
    BirkhoffSummary s = project_birkhoff(ctx, cview(R, n), view(P, n), {});
    ASSERT_EQ(s.not_converged, 0) << s.brief_report();
    project_birkhoff_backward(ctx, cview(P, n), cview(G, n), view(D, n), {});
    for (int b = 0; b < B; ++b) {
      const Mat Rb = matrix(R, b, n);
      double scale = 0;
      for (int k = 0; k < n * n; ++k)
        scale = std::max(scale, double(std::fabs(D[std::size_t(b * n * n + k)])));
      test::expect_zero_row_and_column_sums(D, b, n);
      const double h = 1e-5;
      for (int k = 0; k < n * n; ++k) {
        const float dv = D[std::size_t(b * n * n + k)];
        ASSERT_TRUE(std::isfinite(dv));
        if (Rb[std::size_t(k)] == -INFINITY) {
          EXPECT_EQ(dv, 0.f);
          continue;
        }
        Mat Rp = Rb, Rm = Rb, Pp, Pm;
        Rp[std::size_t(k)] += h;
        Rm[std::size_t(k)] -= h;
        ASSERT_TRUE(newton_reference(Rp, n, Pp));
        ASSERT_TRUE(newton_reference(Rm, n, Pm));
        const double fd = (loss(Pp, G, b, n) - loss(Pm, G, b, n)) / (2 * h);
        EXPECT_NEAR(dv, fd, 2e-5 + 1e-5 * scale) << "n=" << n << " b=" << b << " k=" << k;
      }
    }
  }
}

// ---- float32 host emulation of the device algorithms ------------------------------------------
// The CUDA kernels run lib/birkhoff/algorithms.hpp in float (n = 4: NMAX = 4; general path:
// NMAX = 16); here the same templates run on the host in float (exact exp2/log2/rcp instead of
// the SFU approximations), so reducible patterns are checked in fp32 without a GPU.

template <int NMAX>
void float_forward(const std::vector<float>& R, int n, int b, float* X, int& status) {
  for (int k = 0; k < NMAX * NMAX; ++k) X[k] = 0.f;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) X[i * NMAX + j] = R[std::size_t(b) * n * n + std::size_t(i * n + j)];
  // The CUDA engine's stopping rule at the default tolerance 1e-5.
  status = birkhoff::newton_project<NMAX>(X, n, 1e-6f, 5e-6f, 30).status;
}

template <int NMAX>
void check_float_engine(int n, double scale) {
  const int B = 2000;
  const auto R = reducible_batch(n, B, scale, 4000 + unsigned(n) + unsigned(scale));
  const auto G = test::random_logits(std::int64_t(B) * n * n, 1.0, 5000 + unsigned(n));
  Context ctx = cpu_context();
  std::vector<float> Pd(R.size()), Dd(R.size());
  project_birkhoff(ctx, cview(R, n), view(Pd, n), {});
  project_birkhoff_backward(ctx, cview(Pd, n), cview(G, n), view(Dd, n), {});
  double worst = 0, dP = 0, dD = 0;
  int failed = 0;
  for (int b = 0; b < B; ++b) {
    float X[NMAX * NMAX];
    int st = 0;
    float_forward<NMAX>(R, n, b, X, st);
    ASSERT_EQ(st, birkhoff::kOk);
    double P[NMAX * NMAX] = {};
    float Pf[NMAX * NMAX] = {}, Gf[NMAX * NMAX] = {};
    std::vector<float> out(std::size_t(n * n));
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        out[std::size_t(i * n + j)] = X[i * NMAX + j];
        dP = std::max(dP, std::fabs(double(X[i * NMAX + j]) - Pd[std::size_t(b * n * n + i * n + j)]));
        // Backward in float on the float64 engine's (float-stored) P.
        Pf[i * NMAX + j] = Pd[std::size_t(b * n * n + i * n + j)];
        Gf[i * NMAX + j] = G[std::size_t(b * n * n + i * n + j)];
        P[i * NMAX + j] = Pf[i * NMAX + j];
      }
    const double e = test::marginal_error(out.data(), n);
    worst = std::max(worst, e);
    if (!(e <= 1e-5)) ++failed;
    birkhoff::implicit_backward<NMAX>(Pf, Gf, n);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        const float v = Gf[i * NMAX + j];
        ASSERT_TRUE(std::isfinite(v));
        dD = std::max(dD, std::fabs(double(v) - Dd[std::size_t(b * n * n + i * n + j)]));
      }
  }
  EXPECT_EQ(failed, 0) << "n=" << n << " scale=" << scale << " worst Err " << worst;
  // As in CudaBirkhoffSizes: at large logit scales fp32 entries may differ by ~1e-5 from float64.
  EXPECT_LT(dP, 5e-5) << "n=" << n << " scale=" << scale;
  EXPECT_LT(dD, 5e-5) << "n=" << n << " scale=" << scale;
}

TEST(CpuBirkhoffPatterns, Float32AlgorithmsConvergeOnReduciblePatterns) {
  for (double scale : {10.0, 30.0}) {
    check_float_engine<4>(4, scale);
    check_float_engine<birkhoff::kMaxN>(4, scale);
    check_float_engine<birkhoff::kMaxN>(7, scale);
  }
  // The issue's matrix in the n = 4 float path.
  float X[16];
  int st = 0;
  float_forward<4>(kIssueExample, 4, 0, X, st);
  ASSERT_EQ(st, birkhoff::kOk);
  EXPECT_LE(test::marginal_error(X, 4), 1e-5);
}

// ---- patterns without total support, invalid inputs, empty batch ------------------------------

/// Brute force: the union of the supports of the permutations inside the pattern (rowm[i] bit j:
/// entry (i, j) finite) equals the pattern.
bool brute_total_support(const unsigned* rowm, int n) {
  std::vector<int> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  std::vector<unsigned> covered(static_cast<std::size_t>(n), 0u);
  do {
    bool inside = true;
    for (int i = 0; i < n && inside; ++i) inside = (rowm[i] >> perm[std::size_t(i)]) & 1u;
    if (!inside) continue;
    for (int i = 0; i < n; ++i) covered[std::size_t(i)] |= 1u << perm[std::size_t(i)];
  } while (std::next_permutation(perm.begin(), perm.end()));
  for (int i = 0; i < n; ++i)
    if (covered[std::size_t(i)] != rowm[i]) return false;
  return true;
}

/// Connected component of every column in the bipartite graph (by flooding).
std::vector<int> column_components(const unsigned* rowm, int n) {
  std::vector<int> comp(static_cast<std::size_t>(n), -1);
  int next = 0;
  for (int j0 = 0; j0 < n; ++j0) {
    if (comp[std::size_t(j0)] >= 0) continue;
    unsigned cols = 1u << j0;
    for (bool grow = true; grow;) {
      grow = false;
      for (int i = 0; i < n; ++i)
        if ((rowm[i] & cols) && (rowm[i] | cols) != cols) {
          cols |= rowm[i];
          grow = true;
        }
    }
    for (int j = 0; j < n; ++j)
      if ((cols >> j) & 1u) comp[std::size_t(j)] = next;
    ++next;
  }
  return comp;
}

template <int NMAX>
void check_all_patterns(int n) {
  const unsigned full = (1u << n) - 1u;
  int with_support = 0, without = 0, reducible = 0;
  for (unsigned code = 0; code < (1u << (n * n)); ++code) {
    unsigned rowm[NMAX] = {};
    unsigned cols = 0;
    bool empty = false;
    for (int i = 0; i < n; ++i) {
      rowm[i] = (code >> (i * n)) & full;
      cols |= rowm[i];
      empty |= rowm[i] == 0u;
    }
    if (empty || cols != full) continue;
    // Through the public entry point of the algorithms: logits 0 on the pattern, -inf elsewhere.
    double L[NMAX * NMAX];
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) L[i * NMAX + j] = ((rowm[i] >> j) & 1u) ? 0.5 * (i - j) : -INFINITY;
    unsigned pin = 77;
    const int st = birkhoff::prepare_log2<NMAX>(L, n, &pin);
    const bool ts = brute_total_support(rowm, n);
    ASSERT_EQ(st, ts ? birkhoff::kOk : birkhoff::kNoProjection) << "pattern " << code;
    if (!ts) {
      ++without;
      continue;
    }
    ++with_support;
    // One pinned column in every component except column n-1's, and nothing else.
    const auto comp = column_components(rowm, n);
    const int ncomp = *std::max_element(comp.begin(), comp.end()) + 1;
    reducible += ncomp > 1;
    std::vector<int> pins(static_cast<std::size_t>(ncomp), 0);
    for (int j = 0; j < n; ++j)
      if ((pin >> j) & 1u) ++pins[std::size_t(comp[std::size_t(j)])];
    ASSERT_EQ((pin >> (n - 1)) & 1u, 0u) << "pattern " << code;
    for (int c = 0; c < ncomp; ++c)
      ASSERT_EQ(pins[std::size_t(c)], c == comp[std::size_t(n - 1)] ? 0 : 1)
          << "pattern " << code << " component " << c;
  }
  EXPECT_GT(with_support, 0);
  EXPECT_GT(without, 0);
  EXPECT_GT(reducible, 0);
}

TEST(CpuBirkhoffPatterns, TotalSupportAndGaugesAgreeWithBruteForceOnEveryPattern) {
  check_all_patterns<4>(4);                // the n = 4 register path: all 2^16 patterns
  check_all_patterns<birkhoff::kMaxN>(4);  // the general path
  check_all_patterns<birkhoff::kMaxN>(3);
  check_all_patterns<birkhoff::kMaxN>(2);
}

TEST(CpuBirkhoffPatterns, NoTotalSupportIsReportedNotConverged) {
  Context ctx = cpu_context();
  for (int n : {4, 7}) {
    // 0: upper triangular (only the diagonal lies on a perfect matching: the Sinkhorn limit is
    // the identity, no diagonal scaling reaches it); 1: two blocks plus one entry coupling them
    // (block upper triangular); 2: no perfect matching (rows 0, 1 only in column 0).
    auto R = test::random_logits(3 * n * n, 3.0, 31 + unsigned(n));
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        if (j < i) R[std::size_t(i * n + j)] = kNegInf;
        const bool same = (i < 2) == (j < 2);
        if (!same && !(i == 0 && j == n - 1)) R[std::size_t(n * n + i * n + j)] = kNegInf;
        if (i < 2 && j > 0) R[std::size_t(2 * n * n + i * n + j)] = kNegInf;
      }
    for (BirkhoffMethod m : {BirkhoffMethod::kNewton, BirkhoffMethod::kSinkhorn}) {
      BirkhoffOptions o;
      o.method = m;
      std::vector<float> P(R.size(), -7.f);
      BirkhoffSummary s = project_birkhoff(ctx, cview(R, n), view(P, n), o);
      EXPECT_EQ(s.not_converged, 3) << s.brief_report();
      EXPECT_EQ(s.invalid_inputs, 0);
      for (float v : P) ASSERT_TRUE(std::isfinite(v));
      if (m == BirkhoffMethod::kNewton)
        for (float v : P) EXPECT_EQ(v, 0.f);  // no scaling exists: nothing to return
    }
  }
}

/// Batch of n x n matrices: 0 valid, 1 all -inf, 2 valid, 3 row 2 all -inf, 4 column 1 all -inf,
/// 5 NaN entry, 6 valid.
std::vector<float> invalid_batch(int n) {
  auto R = test::random_logits(7 * n * n, 1.0, 600 + unsigned(n));
  auto at = [&](int b, int i, int j) -> float& { return R[std::size_t((b * n + i) * n + j)]; };
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) at(1, i, j) = kNegInf;
  for (int j = 0; j < n; ++j) at(3, 2, j) = kNegInf;
  for (int i = 0; i < n; ++i) at(4, i, 1) = kNegInf;
  at(5, 1, 1) = NAN;
  return R;
}

TEST(CpuBirkhoffPatterns, EmptyRowsColumnsAndMatricesAreInvalidInputs) {
  Context ctx = cpu_context();
  for (int n : {4, 5}) {
    const auto R = invalid_batch(n);
    for (BirkhoffMethod m :
         {BirkhoffMethod::kNewton, BirkhoffMethod::kSinkhorn, BirkhoffMethod::kDeepSeek}) {
      BirkhoffOptions o;
      o.method = m;
      std::vector<float> P(R.size(), -7.f);
      BirkhoffSummary s = project_birkhoff(ctx, cview(R, n), view(P, n), o);
      const std::string what = to_string(m) + " n=" + std::to_string(n);
      EXPECT_EQ(s.invalid_inputs, 4) << what;
      EXPECT_EQ(s.first_invalid, 1) << what;
      EXPECT_EQ(s.first_invalid_reason, "every logit is -inf") << what;
      EXPECT_GE(s.not_converged, 4) << what;
      EXPECT_NE(s.brief_report().find("first: matrix 1"), std::string::npos) << s.brief_report();
      for (int b : {1, 3, 4, 5})
        for (int k = 0; k < n * n; ++k) EXPECT_EQ(P[std::size_t(b * n * n + k)], 0.f) << what;
      try {
        s.throw_if_invalid("--input 'x.npy'");
        ADD_FAILURE() << "no exception: " << what;
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("--input 'x.npy': matrix 1 of 7"), std::string::npos)
            << e.what();
      }
      // The reason of each kind, as the first invalid matrix of a batch.
      const std::pair<int, const char*> kinds[] = {{3, "a row has every logit -inf"},
                                                   {4, "a column has every logit -inf"},
                                                   {5, "a logit is NaN or +inf"}};
      for (const auto& kind : kinds) {
        std::vector<float> one(R.begin(), R.begin() + std::ptrdiff_t(n * n));  // matrix 0, valid
        one.insert(one.end(), R.begin() + std::ptrdiff_t(kind.first * n * n),
                   R.begin() + std::ptrdiff_t((kind.first + 1) * n * n));
        std::vector<float> Q(one.size());
        BirkhoffSummary s1 = project_birkhoff(ctx, cview(one, n), view(Q, n), o);
        EXPECT_EQ(s1.invalid_inputs, 1) << what;
        EXPECT_EQ(s1.first_invalid, 1) << what;
        EXPECT_EQ(s1.first_invalid_reason, kind.second) << what;
      }
    }
    // Valid batches do not throw; their first_invalid is -1.
    std::vector<float> ok(R.begin(), R.begin() + std::ptrdiff_t(n * n)), Q(std::size_t(n * n));
    BirkhoffSummary s = project_birkhoff(ctx, cview(ok, n), view(Q, n), {});
    EXPECT_EQ(s.first_invalid, -1);
    EXPECT_NO_THROW(s.throw_if_invalid());
  }
}

TEST(CpuBirkhoffPatterns, EmptyBatchIsANoOp) {
  Context ctx = cpu_context();
  for (int n : {4, 5}) {
    BatchView<const float> in{nullptr, 0, n, MemorySpace::kHost};
    BatchView<float> out{nullptr, 0, n, MemorySpace::kHost};
    for (BirkhoffMethod m : {BirkhoffMethod::kNewton, BirkhoffMethod::kSinkhorn}) {
      BirkhoffOptions o;
      o.method = m;
      BirkhoffSummary s;
      ASSERT_NO_THROW(s = project_birkhoff(ctx, in, out, o));
      EXPECT_TRUE(s.computed);
      EXPECT_EQ(s.batch, 0);
      EXPECT_EQ(s.not_converged, 0);
      EXPECT_EQ(s.invalid_inputs, 0);
      EXPECT_EQ(s.worst_error, 0);
      EXPECT_EQ(s.median_error, 0);
      o.compute_summary = false;
      EXPECT_FALSE(project_birkhoff(ctx, in, out, o).computed);
    }
    EXPECT_NO_THROW(project_birkhoff_backward(ctx, in, in, out, {}));
  }
}

// ---- CUDA engine on the same cases (skips without a device) ------------------------------------


using Device = test::DeviceCopy<float>;

TEST(CudaBirkhoffPatterns, ReduciblePatternsForwardAndBackward) {
  KANTOR_REQUIRE_CUDA();
  Context g(ContextOptions{Backend::kCuda});
  Context c = cpu_context();
  for (int n : {4, 7}) {  // n = 4: register kernels; n = 7: general path
    for (double scale : {10.0, 30.0}) {
      const int B = 20000;
      auto R = reducible_batch(n, B, scale, 9000 + unsigned(n) + unsigned(scale));
      if (n == 4) std::copy(kIssueExample.begin(), kIssueExample.end(), R.begin());
      const auto G = test::random_logits(std::int64_t(B) * n * n, 1.0, 9100 + unsigned(n));
      std::vector<float> Pc(R.size()), Dc(R.size());
      project_birkhoff(c, cview(R, n), view(Pc, n), {});
      project_birkhoff_backward(c, cview(Pc, n), cview(G, n), view(Dc, n), {});
      Device dR(g, R, n), dP(g, std::vector<float>(R.size(), NAN), n), dG(g, G, n),
          dD(g, std::vector<float>(R.size(), NAN), n);
      BirkhoffSummary s = project_birkhoff(g, dR.c(), dP.v(), {});
      EXPECT_EQ(s.not_converged, 0) << "n=" << n << " scale=" << scale << ": " << s.brief_report();
      const auto Pg = dP.host(g);
      double worst = 0, dp = 0;
      for (int b = 0; b < B; ++b)
        worst = std::max(worst, test::marginal_error(&Pg[std::size_t(b) * n * n], n));
      for (std::size_t k = 0; k < R.size(); ++k) {
        ASSERT_TRUE(std::isfinite(Pg[k]));
        dp = std::max(dp, double(std::fabs(Pg[k] - Pc[k])));
      }
      EXPECT_LE(worst, 1e-5) << "n=" << n << " scale=" << scale;
      EXPECT_LT(dp, 5e-5) << "n=" << n << " scale=" << scale;
      // Backward on the CPU engine's P (same input for both engines).
      Device dPc(g, Pc, n);
      project_birkhoff_backward(g, dPc.c(), dG.c(), dD.v(), {});
      const auto Dg = dD.host(g);
      double dd = 0;
      for (std::size_t k = 0; k < R.size(); ++k) {
        ASSERT_TRUE(std::isfinite(Dg[k]));
        dd = std::max(dd, double(std::fabs(Dg[k] - Dc[k])));
      }
      EXPECT_LT(dd, 5e-5) << "n=" << n << " scale=" << scale;
    }
  }
}

TEST(CudaBirkhoffPatterns, InvalidInputsAndNoTotalSupport) {
  KANTOR_REQUIRE_CUDA();
  Context g(ContextOptions{Backend::kCuda});
  for (int n : {4, 5}) {
    const auto R = invalid_batch(n);
    for (BirkhoffMethod m : {BirkhoffMethod::kNewton, BirkhoffMethod::kSinkhorn}) {
      BirkhoffOptions o;
      o.method = m;
      Device dR(g, R, n), dP(g, std::vector<float>(R.size(), NAN), n);
      BirkhoffSummary s = project_birkhoff(g, dR.c(), dP.v(), o);
      const auto P = dP.host(g);
      EXPECT_EQ(s.invalid_inputs, 4) << s.brief_report();
      EXPECT_EQ(s.first_invalid, 1);
      EXPECT_EQ(s.first_invalid_reason, "every logit is -inf");
      EXPECT_THROW(s.throw_if_invalid(), InvalidArgument);
      for (int b : {1, 3, 4, 5})
        for (int k = 0; k < n * n; ++k) EXPECT_EQ(P[std::size_t(b * n * n + k)], 0.f);
      for (int b : {0, 2, 6})
        EXPECT_LE(test::marginal_error(&P[std::size_t(b * n * n)], n),
                  m == BirkhoffMethod::kNewton ? 1e-5 : 1.0);
    }
  }
  // Upper triangular: valid logits, no total support: not converged, output 0.
  auto T = test::random_logits(16, 3.0, 77);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < i; ++j) T[std::size_t(i * 4 + j)] = kNegInf;
  Device dT(g, T, 4), dQ(g, std::vector<float>(16, NAN), 4);
  BirkhoffSummary s = project_birkhoff(g, dT.c(), dQ.v(), {});
  EXPECT_EQ(s.not_converged, 1);
  EXPECT_EQ(s.invalid_inputs, 0);
  for (float v : dQ.host(g)) EXPECT_EQ(v, 0.f);
  // Empty batch: a no-op.
  BirkhoffSummary e = project_birkhoff(g, BatchView<const float>{nullptr, 0, 4, MemorySpace::kDevice},
                                       BatchView<float>{nullptr, 0, 4, MemorySpace::kDevice}, {});
  EXPECT_TRUE(e.computed);
  EXPECT_EQ(e.worst_error, 0);
}

}  // namespace
}  // namespace kantor
