// Tests of the batched Birkhoff projection against independent float64 references
// (tests/birkhoff/reference.hpp) and finite differences. Cuda* suites compare the CUDA engine
// with the CPU engine and skip when no device is visible or the build has no CUDA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kantor/birkhoff.hpp"
#include "kantor/birkhoff_c.h"
#include "kantor/config.hpp"
#include "kantor/info.hpp"
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

// ---- forward, converged projection ----------------------------------------------------------

class CpuNewton : public ::testing::TestWithParam<int> {};

TEST_P(CpuNewton, MatchesFloat64Reference) {
  const int n = GetParam();
  Context ctx = cpu_context();
  int compared = 0;
  for (double scale : {1.0, 3.0}) {
    const std::int64_t B = n >= 8 ? 16 : 64;
    auto R = test::random_logits(B * n * n, scale, 11 + n);
    std::vector<float> P(R.size(), -7.f);
    BirkhoffSummary s = project_birkhoff(ctx, cview(R, n), view(P, n), {});
    ASSERT_TRUE(s.computed);
    EXPECT_EQ(s.not_converged, 0) << s.brief_report();
    EXPECT_LE(s.worst_error, 1e-5);
    for (std::int64_t b = 0; b < B; ++b) {
      double ref_err = 0;
      const Mat ref = test::reference_projection(matrix(R, b, n), n, &ref_err);
      EXPECT_LT(test::marginal_error(&P[std::size_t(b * n * n)], n), 1e-5);
      if (ref_err > 1e-12) continue;  // the slow reference did not converge on this one
      ++compared;
      EXPECT_LT(max_abs_diff(ref, &P[std::size_t(b * n * n)]), 2e-7) << "n=" << n << " b=" << b;
    }
  }
  EXPECT_GE(compared, n >= 8 ? 24 : 100);
}
INSTANTIATE_TEST_SUITE_P(Sizes, CpuNewton, ::testing::Values(2, 3, 4, 5, 8, 16));

TEST(CpuBirkhoff, RowsOfVeryDifferentScalesAndLargeLogits) {
  Context ctx = cpu_context();
  const int n = 4;
  const std::int64_t B = 200;
  auto R = test::random_logits(B * n * n, 1.0, 5);
  for (std::int64_t b = 0; b < B; ++b)
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        R[std::size_t((b * n + i) * n + j)] *= float(std::pow(10.0, i - 1));
  auto R10 = test::random_logits(B * n * n, 10.0, 6);
  R.insert(R.end(), R10.begin(), R10.end());
  std::vector<float> P(R.size());
  BirkhoffSummary s = project_birkhoff(ctx, cview(R, n), view(P, n), {});
  EXPECT_EQ(s.not_converged, 0);
  EXPECT_LE(s.worst_error, 1e-5);
  // Sinkhorn converges slowly on near-permutation problems: compare where the reference
  // reached 1e-12 (every output is held to Err <= 1e-5 above regardless).
  int compared = 0;
  for (std::int64_t b = 0; b < 2 * B; b += 7) {
    double ref_err = 0;
    const Mat ref = test::reference_projection(matrix(R, b, n), n, &ref_err);
    if (ref_err > 1e-12) continue;
    ++compared;
    EXPECT_LT(max_abs_diff(ref, &P[std::size_t(b * n * n)]), 1e-6) << "b=" << b;
  }
  EXPECT_GT(compared, 20);
}

TEST(CpuBirkhoff, SummaryStatisticsMatchTheOutput) {
  Context ctx = cpu_context();
  const int n = 5;
  auto R = test::random_logits(101 * n * n, 2.0, 8);
  std::vector<float> P(R.size());
  BirkhoffOptions o;
  o.method = BirkhoffMethod::kSinkhorn;
  o.iterations = 3;  // leaves errors of many sizes
  BirkhoffSummary s = project_birkhoff(ctx, cview(R, n), view(P, n), o);
  std::vector<double> e;
  for (int b = 0; b < 101; ++b) e.push_back(test::marginal_error(&P[std::size_t(b * n * n)], n));
  std::vector<double> sorted = e;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NEAR(s.worst_error, sorted.back(), 1e-12);
  EXPECT_NEAR(s.median_error, sorted[50], 1e-12);
  std::int64_t above = std::count_if(e.begin(), e.end(), [](double x) { return x > 1e-5; });
  EXPECT_EQ(s.not_converged, above);
  EXPECT_GT(above, 0);
}

// ---- truncated maps ------------------------------------------------------------------------

struct TruncCase {
  BirkhoffMethod method;
  SinkhornOrder order;
  int iterations;
};

Mat truncated_reference(const Mat& R, int n, const TruncCase& c) {
  if (c.method == BirkhoffMethod::kDeepSeek) return test::reference_deepseek(R, n, c.iterations);
  return test::reference_sinkhorn(R, n, c.iterations, c.order == SinkhornOrder::kRowFirst);
}

class CpuTruncated : public ::testing::TestWithParam<TruncCase> {};

TEST_P(CpuTruncated, MatchesFloat64Reference) {
  const TruncCase c = GetParam();
  Context ctx = cpu_context();
  for (int n : {2, 4, 7}) {
    auto R = test::random_logits(50 * n * n, 1.0, 3 + n);
    // A common offset of 60 would overflow exp without the per-matrix max subtraction.
    for (std::size_t k = 0; k < 25u * n * n; ++k) R[k] += 60.f;
    std::vector<float> P(R.size());
    BirkhoffOptions o;
    o.method = c.method;
    o.order = c.order;
    o.iterations = c.iterations;
    project_birkhoff(ctx, cview(R, n), view(P, n), o);
    for (int b = 0; b < 50; ++b) {
      const Mat ref = truncated_reference(matrix(R, b, n), n, c);
      EXPECT_LT(max_abs_diff(ref, &P[std::size_t(b * n * n)]), 1e-6) << "n=" << n << " b=" << b;
    }
  }
}
INSTANTIATE_TEST_SUITE_P(
    Maps, CpuTruncated,
    ::testing::Values(TruncCase{BirkhoffMethod::kSinkhorn, SinkhornOrder::kRowFirst, 20},
                      TruncCase{BirkhoffMethod::kSinkhorn, SinkhornOrder::kColumnFirst, 20},
                      TruncCase{BirkhoffMethod::kSinkhorn, SinkhornOrder::kColumnFirst, 3},
                      TruncCase{BirkhoffMethod::kDeepSeek, SinkhornOrder::kRowFirst, 10},
                      TruncCase{BirkhoffMethod::kDeepSeek, SinkhornOrder::kRowFirst, 20}));

TEST(CpuBirkhoff, TruncatedSinkhornFailsOnLargeLogitsNewtonDoesNot) {
  Context ctx = cpu_context();
  const int n = 4;
  auto R = test::random_logits(2000 * n * n, 10.0, 21);
  std::vector<float> P(R.size());
  BirkhoffOptions o;
  o.method = BirkhoffMethod::kSinkhorn;
  BirkhoffSummary sk = project_birkhoff(ctx, cview(R, n), view(P, n), o);
  BirkhoffSummary nt = project_birkhoff(ctx, cview(R, n), view(P, n), {});
  EXPECT_GT(sk.not_converged, 100);  // numerics.md: 1e-2..1 errors on many matrices
  EXPECT_EQ(nt.not_converged, 0);
  EXPECT_LE(nt.worst_error, 1e-5);
}

// ---- backward ------------------------------------------------------------------------------

double loss(const Mat& P, const std::vector<float>& G, std::int64_t b, int n) {
  double l = 0;
  for (int k = 0; k < n * n; ++k) l += P[k] * G[std::size_t(b * n * n + k)];
  return l;
}

TEST(CpuBirkhoff, ImplicitGradientMatchesFiniteDifferencesOfConvergedMap) {
  Context ctx = cpu_context();
  for (int n : {2, 3, 4, 6}) {
    const std::int64_t B = 6;
    auto R = test::random_logits(B * n * n, 1.5, 40 + n);
    auto G = test::random_logits(B * n * n, 1.0, 50 + n);
    std::vector<float> P(R.size()), D(R.size());
    project_birkhoff(ctx, cview(R, n), view(P, n), {});
    project_birkhoff_backward(ctx, cview(P, n), cview(G, n), view(D, n), {});
    for (std::int64_t b = 0; b < B; ++b) {
      const Mat Rb = matrix(R, b, n);
      test::expect_zero_row_and_column_sums(D, b, n);
      const double h = 1e-5;
      for (int k = 0; k < n * n; ++k) {
        Mat Rp = Rb, Rm = Rb;
        Rp[k] += h;
        Rm[k] -= h;
        const double fd = (loss(test::reference_projection(Rp, n), G, b, n) -
                           loss(test::reference_projection(Rm, n), G, b, n)) /
                          (2 * h);
        EXPECT_NEAR(D[std::size_t(b * n * n + k)], fd, 2e-5) << "n=" << n << " k=" << k;
      }
    }
  }
}

TEST_P(CpuTruncated, UnrolledGradientMatchesFiniteDifferencesOfTruncatedMap) {
  const TruncCase c = GetParam();
  Context ctx = cpu_context();
  for (int n : {3, 4}) {
    const std::int64_t B = 4;
    auto R = test::random_logits(B * n * n, 1.0, 60 + n);
    auto G = test::random_logits(B * n * n, 1.0, 70 + n);
    std::vector<float> D(R.size());
    BirkhoffOptions o;
    o.method = c.method;
    o.order = c.order;
    o.iterations = c.iterations;
    o.gradient = BirkhoffGradient::kUnrolled;
    project_birkhoff_backward(ctx, {}, cview(G, n), view(D, n), o, cview(R, n));
    for (std::int64_t b = 0; b < B; ++b) {
      const Mat Rb = matrix(R, b, n);
      const double h = 1e-5;
      for (int k = 0; k < n * n; ++k) {
        Mat Rp = Rb, Rm = Rb;
        Rp[k] += h;
        Rm[k] -= h;
        const double fd = (loss(truncated_reference(Rp, n, c), G, b, n) -
                           loss(truncated_reference(Rm, n, c), G, b, n)) /
                          (2 * h);
        EXPECT_NEAR(D[std::size_t(b * n * n + k)], fd, 2e-5) << "n=" << n << " k=" << k;
      }
    }
  }
}

TEST(CpuBirkhoff, ImplicitGradientOfTruncatedOutputUsesItsMarginals) {
  // For a P whose marginals are not 1 the general formula still gives rows/columns summing to 0.
  Context ctx = cpu_context();
  const int n = 4;
  auto R = test::random_logits(8 * n * n, 1.0, 81);
  auto G = test::random_logits(8 * n * n, 1.0, 82);
  std::vector<float> P(R.size()), D(R.size());
  BirkhoffOptions o;
  o.method = BirkhoffMethod::kSinkhorn;
  o.iterations = 1;
  project_birkhoff(ctx, cview(R, n), view(P, n), o);
  project_birkhoff_backward(ctx, cview(P, n), cview(G, n), view(D, n), {});
  for (int b = 0; b < 8; ++b) test::expect_zero_row_and_column_sums(D, b, n);
}

// ---- bf16, -inf, invalid input ---------------------------------------------------------------

TEST(CpuBirkhoff, Bfloat16Storage) {
  Context ctx = cpu_context();
  const int n = 4;
  auto Rf = test::random_logits(100 * n * n, 1.0, 91);
  std::vector<bfloat16> R(Rf.size()), P(Rf.size());
  for (std::size_t k = 0; k < Rf.size(); ++k) R[k] = to_bfloat16(Rf[k]);
  BirkhoffSummary s =
      project_birkhoff(ctx, BatchView<const bfloat16>{R.data(), 100, n, MemorySpace::kHost},
                       BatchView<bfloat16>{P.data(), 100, n, MemorySpace::kHost}, {});
  EXPECT_EQ(s.not_converged, 0);
  EXPECT_GT(s.worst_error, 1e-5);  // bf16 rounding is visible: the summary is of stored values
  for (int b = 0; b < 100; ++b) {
    Mat Rb(n * n);
    for (int k = 0; k < n * n; ++k) Rb[k] = to_float(R[std::size_t(b * 16 + k)]);
    const Mat ref = test::reference_projection(Rb, n);
    for (int k = 0; k < n * n; ++k)
      EXPECT_NEAR(to_float(P[std::size_t(b * 16 + k)]), ref[k], 4e-3 * ref[k] + 1e-30);
  }
}

TEST(CpuBirkhoff, Bfloat16BackwardMatchesFloat32Backward) {
  Context ctx = cpu_context();
  const int n = 4;
  auto R = test::random_logits(50 * n * n, 1.0, 93);
  auto G = test::random_logits(50 * n * n, 1.0, 94);
  std::vector<float> P(R.size()), D(R.size());
  project_birkhoff(ctx, cview(R, n), view(P, n), {});
  // Inputs rounded to bf16 once; the float32 run on the same rounded values is the reference.
  std::vector<bfloat16> Pb(R.size()), Gb(R.size()), Db(R.size());
  for (std::size_t k = 0; k < R.size(); ++k) {
    Pb[k] = to_bfloat16(P[k]);
    Gb[k] = to_bfloat16(G[k]);
    P[k] = to_float(Pb[k]);
    G[k] = to_float(Gb[k]);
  }
  project_birkhoff_backward(ctx, cview(P, n), cview(G, n), view(D, n), {});
  project_birkhoff_backward(ctx, BatchView<const bfloat16>{Pb.data(), 50, n, MemorySpace::kHost},
                            BatchView<const bfloat16>{Gb.data(), 50, n, MemorySpace::kHost},
                            BatchView<bfloat16>{Db.data(), 50, n, MemorySpace::kHost}, {});
  double scale = 0;
  for (float d : D) scale = std::max(scale, double(std::fabs(d)));
  ASSERT_GT(scale, 1e-3);
  for (std::size_t k = 0; k < D.size(); ++k)
    EXPECT_NEAR(to_float(Db[k]), D[k], 4e-3 * std::fabs(D[k]) + 1e-6);
}

// Matrices with -inf: the first has a projection (zero diagonal, derangements exist), the rest
// have none: a row of -inf, a column of -inf (invalid inputs), no positive diagonal (valid logits,
// no total support: not converged), all -inf (invalid), then one with NaN (invalid).
std::vector<float> special_matrices(int n) {
  const float ninf = -INFINITY;
  auto R = test::random_logits(6 * n * n, 1.0, 99);
  for (int i = 0; i < n; ++i) R[std::size_t(i * n + i)] = ninf;
  for (int j = 0; j < n; ++j) R[std::size_t(16 + 1 * n + j)] = ninf;
  for (int i = 0; i < n; ++i) R[std::size_t(32 + i * n + 2)] = ninf;
  // Rows 0 and 1 supported on column 0 only: no permutation fits.
  for (int j = 1; j < n; ++j) {
    R[std::size_t(48 + 0 * n + j)] = ninf;
    R[std::size_t(48 + 1 * n + j)] = ninf;
  }
  for (int k = 0; k < n * n; ++k) R[std::size_t(64 + k)] = ninf;
  R[std::size_t(80 + 5)] = NAN;
  return R;
}

void check_special(const std::vector<float>& R, const std::vector<float>& P,
                   const BirkhoffSummary& s, const std::string& what) {
  const int n = 4;
  for (float v : P) ASSERT_TRUE(std::isfinite(v)) << what;
  EXPECT_EQ(s.not_converged, 5) << what << ": " << s.brief_report();
  EXPECT_EQ(s.invalid_inputs, 4) << what;
  EXPECT_EQ(s.first_invalid, 1) << what;
  EXPECT_EQ(s.first_invalid_reason, "a row has every logit -inf") << what;
  EXPECT_FALSE(std::isfinite(s.worst_error)) << what;
  // Invalid and no-projection matrices: output 0.
  for (int k = 16; k < 6 * 16; ++k) EXPECT_EQ(P[std::size_t(k)], 0.f) << what << " k=" << k;
  // The first matrix has a projection: zero diagonal, reference match.
  const Mat ref = test::reference_projection(matrix(R, 0, n), n);
  EXPECT_LT(max_abs_diff(ref, P.data()), 1e-6) << what;
  for (int i = 0; i < n; ++i) EXPECT_EQ(P[std::size_t(i * n + i)], 0.f) << what;
}

TEST(CpuBirkhoff, MinusInfinityAndNoProjectionAreReportedNotNaN) {
  Context ctx = cpu_context();
  const auto R = special_matrices(4);
  std::vector<float> P(R.size());
  check_special(R, P, project_birkhoff(ctx, cview(R, 4), view(P, 4), {}), "newton");
  BirkhoffOptions o;
  o.method = BirkhoffMethod::kSinkhorn;
  BirkhoffSummary s = project_birkhoff(ctx, cview(R, 4), view(P, 4), o);
  for (float v : P) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(s.invalid_inputs, 4);
  EXPECT_EQ(s.first_invalid, 1);
  EXPECT_GE(s.not_converged, 5);
}

TEST(CpuBirkhoff, BadArgumentsThrow) {
  Context ctx = cpu_context();
  std::vector<float> a(16), b(32);
  EXPECT_THROW(project_birkhoff(ctx, BatchView<const float>{a.data(), 16, 1, MemorySpace::kHost},
                                BatchView<float>{b.data(), 16, 1, MemorySpace::kHost}, {}),
               InvalidArgument);
  std::vector<float> big(17 * 17);
  EXPECT_THROW(project_birkhoff(ctx, cview(big, 17), view(big, 17), {}), InvalidArgument);
  EXPECT_THROW(project_birkhoff(ctx, cview(a, 4), view(b, 4), {}), InvalidArgument);
  EXPECT_THROW(project_birkhoff(ctx, cview(a, 4),
                                BatchView<float>{a.data(), 1, 4, MemorySpace::kDevice}, {}),
               InvalidArgument);
  BirkhoffOptions o;
  o.gradient = BirkhoffGradient::kUnrolled;  // newton has no unrolled gradient
  EXPECT_THROW(project_birkhoff_backward(ctx, cview(a, 4), cview(a, 4), view(a, 4), o, cview(a, 4)),
               InvalidArgument);
  o = {};
  o.tolerance = -1;
  EXPECT_THROW(project_birkhoff(ctx, cview(a, 4), view(a, 4), o), InvalidArgument);
  // A batch whose element count overflows 64 bits is refused, not wrapped into a small one.
  BirkhoffBenchConfig huge;
  huge.n = 16;
  huge.batch = 72057594037927937LL;  // 2^56 + 1: batch * 256 wraps to 256
  EXPECT_THROW(time_birkhoff(ctx, huge), InvalidArgument);
  EXPECT_THROW(project_birkhoff(ctx, BatchView<const float>{a.data(), huge.batch, 4,
                                                            MemorySpace::kHost},
                                BatchView<float>{b.data(), huge.batch, 4, MemorySpace::kHost}, {}),
               InvalidArgument);
}

// ---- CUDA engine against the CPU engine ---------------------------------------------------

bool cuda_available() { return KANTOR_CUDA_ENABLED && !cuda_devices().empty(); }


using test::DeviceCopy;

struct GpuForward {
  std::vector<float> P;
  BirkhoffSummary s;
};

GpuForward gpu_forward(const Context& g, const std::vector<float>& R, int n,
                       const BirkhoffOptions& o) {
  DeviceCopy<float> dR(g, R, n);
  std::vector<float> poison(R.size(), NAN);
  DeviceCopy<float> dP(g, poison, n);  // every element must be written
  GpuForward r;
  r.s = project_birkhoff(g, dR.c(), dP.v(), o);
  r.P = dP.host(g);
  return r;
}

class CudaBirkhoffSizes : public ::testing::TestWithParam<int> {};

TEST_P(CudaBirkhoffSizes, ForwardMatchesCpuEngine) {
  KANTOR_REQUIRE_CUDA();
  const int n = GetParam();
  Context g(ContextOptions{Backend::kCuda});
  Context c = cpu_context();
  for (double scale : {1.0, 10.0}) {
    auto R = test::random_logits(3000 * n * n, scale, 200 + n);
    std::vector<float> Pc(R.size());
    project_birkhoff(c, cview(R, n), view(Pc, n), {});
    GpuForward r = gpu_forward(g, R, n, {});
    EXPECT_EQ(r.s.not_converged, 0) << r.s.brief_report();
    EXPECT_LE(r.s.worst_error, 1e-5);
    double d = 0, worst = 0;
    for (std::size_t k = 0; k < R.size(); ++k) {
      ASSERT_TRUE(std::isfinite(r.P[k]));
      d = std::max(d, double(std::fabs(r.P[k] - Pc[k])));
    }
    for (int b = 0; b < 3000; ++b)
      worst = std::max(worst, test::marginal_error(&r.P[std::size_t(b * n * n)], n));
    EXPECT_LT(worst, 1e-5) << "n=" << n << " scale=" << scale;
    // Where the dual is ill-conditioned (scale 10) fp32 entries may differ from float64 by
    // ~1e-5 while both are within tolerance of doubly stochastic.
    EXPECT_LT(d, scale > 1 ? 5e-5 : 2e-6) << "n=" << n << " scale=" << scale;
    // Truncated maps: fp32 on chip against the float64 CPU engine.
    for (BirkhoffMethod m : {BirkhoffMethod::kSinkhorn, BirkhoffMethod::kDeepSeek}) {
      if (scale > 1) continue;
      BirkhoffOptions o;
      o.method = m;
      o.order = SinkhornOrder::kColumnFirst;
      project_birkhoff(c, cview(R, n), view(Pc, n), o);
      GpuForward t = gpu_forward(g, R, n, o);
      double dt = 0;
      for (std::size_t k = 0; k < R.size(); ++k)
        dt = std::max(dt, double(std::fabs(t.P[k] - Pc[k])));
      EXPECT_LT(dt, 1e-6) << to_string(m) << " n=" << n;
    }
  }
}

TEST_P(CudaBirkhoffSizes, BackwardMatchesCpuEngine) {
  KANTOR_REQUIRE_CUDA();
  const int n = GetParam();
  Context g(ContextOptions{Backend::kCuda});
  Context c = cpu_context();
  auto R = test::random_logits(1000 * n * n, 1.0, 300 + n);
  auto G = test::random_logits(1000 * n * n, 1.0, 400 + n);
  std::vector<float> P(R.size()), Dc(R.size());
  project_birkhoff(c, cview(R, n), view(P, n), {});
  DeviceCopy<float> dP(g, P, n), dG(g, G, n), dR(g, R, n),
      dD(g, std::vector<float>(R.size(), NAN), n);
  for (int variant = 0; variant < 3; ++variant) {
    BirkhoffOptions o;
    if (variant > 0) {
      o.method = variant == 1 ? BirkhoffMethod::kSinkhorn : BirkhoffMethod::kDeepSeek;
      o.gradient = BirkhoffGradient::kUnrolled;
      o.iterations = 10;
    }
    project_birkhoff_backward(c, cview(P, n), cview(G, n), view(Dc, n), o, cview(R, n));
    project_birkhoff_backward(g, dP.c(), dG.c(), dD.v(), o, dR.c());
    const auto Dg = dD.host(g);
    double d = 0;
    for (std::size_t k = 0; k < R.size(); ++k) {
      ASSERT_TRUE(std::isfinite(Dg[k]));
      d = std::max(d, double(std::fabs(Dg[k] - Dc[k])));
    }
    EXPECT_LT(d, 5e-5) << "variant " << variant << " n=" << n;
  }
}
INSTANTIATE_TEST_SUITE_P(Sizes, CudaBirkhoffSizes, ::testing::Values(2, 3, 4, 5, 8, 16));

TEST(CudaBirkhoff, DeepSeekMatchesFloat64MapTo1e6) {
  KANTOR_REQUIRE_CUDA();
  Context g(ContextOptions{Backend::kCuda});
  const int n = 4;
  for (int repeat : {10, 20}) {
    auto R = test::random_logits(20000 * n * n, 1.0, 500 + repeat);
    BirkhoffOptions o;
    o.method = BirkhoffMethod::kDeepSeek;
    o.iterations = repeat;
    GpuForward r = gpu_forward(g, R, n, o);
    double d = 0;
    for (int b = 0; b < 20000; ++b)
      d = std::max(d, max_abs_diff(test::reference_deepseek(matrix(R, b, n), n, repeat),
                                   &r.P[std::size_t(b * n * n)]));
    EXPECT_LT(d, 1e-6) << "repeat " << repeat;
  }
}

TEST(CudaBirkhoff, SummaryMatchesCpuEngine) {
  KANTOR_REQUIRE_CUDA();
  Context g(ContextOptions{Backend::kCuda});
  Context c = cpu_context();
  const int n = 4;
  auto R = test::random_logits(50001 * n * n, 3.0, 600);
  BirkhoffOptions o;
  o.method = BirkhoffMethod::kSinkhorn;
  o.iterations = 4;
  std::vector<float> Pc(R.size());
  BirkhoffSummary sc = project_birkhoff(c, cview(R, n), view(Pc, n), o);
  GpuForward r = gpu_forward(g, R, n, o);
  EXPECT_NEAR(r.s.worst_error, sc.worst_error, 1e-5 * sc.worst_error + 1e-6);
  // The device median is a bin centre: within half a bin (0.125 decade) of the exact one.
  EXPECT_LT(std::fabs(std::log10(r.s.median_error) - std::log10(sc.median_error)), 0.13);
  EXPECT_NEAR(double(r.s.not_converged), double(sc.not_converged), 0.001 * 50001);
}

// bf16 storage in the backward: the device against the CPU engine on the same bf16 inputs (both
// compute in fp32 and round dR to bf16 once, so they may differ by one bf16 rounding: 2^-8
// relative, plus fp32 noise on entries that are differences of larger terms).
TEST(CudaBirkhoff, Bfloat16BackwardMatchesCpuEngine) {
  KANTOR_REQUIRE_CUDA();
  Context g(ContextOptions{Backend::kCuda});
  Context c = cpu_context();
  for (int n : {4, 5}) {  // n = 4: specialized kernel; n = 5: general path
    const std::int64_t B = 2000;
    auto R = test::random_logits(std::size_t(B * n * n), 1.0, 800 + n);
    auto G = test::random_logits(std::size_t(B * n * n), 1.0, 900 + n);
    std::vector<float> P(R.size());
    project_birkhoff(c, cview(R, n), view(P, n), {});
    std::vector<bfloat16> Pb(R.size()), Gb(R.size()), Dc(R.size());
    for (std::size_t k = 0; k < R.size(); ++k) {
      Pb[k] = to_bfloat16(P[k]);
      Gb[k] = to_bfloat16(G[k]);
    }
    project_birkhoff_backward(c, BatchView<const bfloat16>{Pb.data(), B, n, MemorySpace::kHost},
                              BatchView<const bfloat16>{Gb.data(), B, n, MemorySpace::kHost},
                              BatchView<bfloat16>{Dc.data(), B, n, MemorySpace::kHost}, {});
    DeviceCopy<bfloat16> dP(g, Pb, n), dG(g, Gb, n),
        dD(g, std::vector<bfloat16>(R.size(), to_bfloat16(NAN)), n);  // poisoned output
    project_birkhoff_backward(g, dP.c(), dG.c(), dD.v(), {});
    const auto Dg = dD.host(g);
    double scale = 0;
    for (const bfloat16 v : Dc) scale = std::max(scale, double(std::fabs(to_float(v))));
    ASSERT_GT(scale, 1e-3);
    for (std::size_t k = 0; k < Dg.size(); ++k) {
      const float gv = to_float(Dg[k]), cv = to_float(Dc[k]);
      ASSERT_TRUE(std::isfinite(gv)) << "n=" << n << " k=" << k;
      EXPECT_NEAR(gv, cv, 8e-3 * std::fabs(cv) + 1e-5 * scale) << "n=" << n << " k=" << k;
    }
  }
}

TEST(CudaBirkhoff, SpecialMatricesAndBf16AndMisalignedPointers) {
  KANTOR_REQUIRE_CUDA();
  Context g(ContextOptions{Backend::kCuda});
  const auto R = special_matrices(4);
  GpuForward r = gpu_forward(g, R, 4, {});
  check_special(R, r.P, r.s, "cuda newton");
  // bf16 on the device against the CPU engine in bf16.
  Context c = cpu_context();
  auto Rf = test::random_logits(4096 * 16, 1.0, 700);
  std::vector<bfloat16> Rb(Rf.size()), Pb(Rf.size());
  for (std::size_t k = 0; k < Rf.size(); ++k) Rb[k] = to_bfloat16(Rf[k]);
  project_birkhoff(c, BatchView<const bfloat16>{Rb.data(), 4096, 4, MemorySpace::kHost},
                   BatchView<bfloat16>{Pb.data(), 4096, 4, MemorySpace::kHost}, {});
  DeviceCopy<bfloat16> dR(g, Rb, 4), dP(g, Rb, 4);
  BirkhoffSummary s = project_birkhoff(g, dR.c(), dP.v(), {});
  EXPECT_EQ(s.not_converged, 0);
  const auto Pg = dP.host(g);
  for (std::size_t k = 0; k < Pg.size(); ++k)
    EXPECT_NEAR(to_float(Pg[k]), to_float(Pb[k]), 8e-3 * to_float(Pb[k]) + 1e-30);
  // A view starting 4 bytes into a buffer is not 16-byte aligned: the general kernel runs.
  auto R2 = test::random_logits(1001 * 16 + 1, 1.0, 701);
  DeviceCopy<float> d2(g, R2, 1), o2(g, R2, 1);
  BatchView<const float> in{d2.buf.data() + 1, 1000, 4, MemorySpace::kDevice};
  BatchView<float> out{o2.buf.data() + 1, 1000, 4, MemorySpace::kDevice};
  project_birkhoff(g, in, out, {});
  const auto P2 = o2.host(g);
  std::vector<float> Rc(R2.begin() + 1, R2.begin() + 1 + 16000), Pc(16000);
  project_birkhoff(c, cview(Rc, 4), view(Pc, 4), {});
  for (int k = 0; k < 16000; ++k) EXPECT_NEAR(P2[std::size_t(k + 1)], Pc[std::size_t(k)], 2e-6);
}

TEST(CudaBirkhoff, CApiMatchesCppApi) {
  KANTOR_REQUIRE_CUDA();
  Context g(ContextOptions{Backend::kCuda});
  const int n = 4;
  auto R = test::random_logits(777 * n * n, 1.0, 800);
  auto G = test::random_logits(777 * n * n, 1.0, 801);
  DeviceCopy<float> dR(g, R, n), dG(g, G, n), dP(g, R, n), dD(g, R, n), dP2(g, R, n), dD2(g, R, n);
  project_birkhoff(g, dR.c(), dP.v(), {});
  project_birkhoff_backward(g, dP.c(), dG.c(), dD.v(), {});
  kantor_birkhoff_options o;
  kantor_birkhoff_default_options(&o);
  kantor_birkhoff_stats st;
  ASSERT_EQ(kantor_birkhoff_forward(dR.buf.data(), dP2.buf.data(), 777, n, KANTOR_DTYPE_FLOAT32, &o,
                                    g.cuda_stream(), &st),
            KANTOR_STATUS_OK)
      << kantor_birkhoff_last_error();
  EXPECT_EQ(st.not_converged, 0);
  ASSERT_EQ(kantor_birkhoff_backward(dP2.buf.data(), nullptr, dG.buf.data(), dD2.buf.data(), 777, n,
                                     KANTOR_DTYPE_FLOAT32, &o, g.cuda_stream()),
            KANTOR_STATUS_OK);
  EXPECT_EQ(dP.host(g), dP2.host(g));
  EXPECT_EQ(dD.host(g), dD2.host(g));
  EXPECT_EQ(kantor_birkhoff_forward(dR.buf.data(), dP2.buf.data(), 777, 17, KANTOR_DTYPE_FLOAT32,
                                    &o, g.cuda_stream(), nullptr),
            KANTOR_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kantor_birkhoff_last_error()).find("2..16"), std::string::npos);
}

// The C API on the default stream (NULL), on a second caller stream, in bf16 and with the
// unrolled gradient: the same bits and statistics as the C++ calls it adapts.
TEST(CudaBirkhoff, CApiOnTheDefaultStreamAndOtherStreamsMatchesCppApi) {
  KANTOR_REQUIRE_CUDA();
  Context g(ContextOptions{Backend::kCuda});
  Context h(ContextOptions{Backend::kCuda});  // another stream
  const int n = 4;
  const std::int64_t B = 513;
  auto R = test::random_logits(B * n * n, 2.0, 810);
  auto G = test::random_logits(B * n * n, 1.0, 811);
  DeviceCopy<float> dR(g, R, n), dG(g, G, n), dP(g, R, n), dD(g, R, n), dP2(g, R, n),
      dD2(g, R, n);
  BirkhoffOptions o;
  o.method = BirkhoffMethod::kSinkhorn;
  o.order = SinkhornOrder::kColumnFirst;
  o.iterations = 7;
  o.gradient = BirkhoffGradient::kUnrolled;
  const BirkhoffSummary s = project_birkhoff(g, dR.c(), dP.v(), o);
  project_birkhoff_backward(g, {}, dG.c(), dD.v(), o, dR.c());
  // g's stream is non-blocking: the legacy default stream does not wait for it.
  g.synchronize();
  kantor_birkhoff_options c;
  kantor_birkhoff_default_options(&c);
  c.method = KANTOR_BIRKHOFF_SINKHORN;
  c.column_first = 1;
  c.iterations = 7;
  c.unrolled_gradient = 1;
  kantor_birkhoff_stats st;
  ASSERT_EQ(kantor_birkhoff_forward(dR.buf.data(), dP2.buf.data(), B, n, KANTOR_DTYPE_FLOAT32, &c,
                                    nullptr, &st),
            KANTOR_STATUS_OK)
      << kantor_birkhoff_last_error();
  ASSERT_EQ(kantor_birkhoff_backward(nullptr, dR.buf.data(), dG.buf.data(), dD2.buf.data(), B, n,
                                     KANTOR_DTYPE_FLOAT32, &c, nullptr),
            KANTOR_STATUS_OK)
      << kantor_birkhoff_last_error();
  // A forward with stats synchronizes the default stream, so the backward before it is done.
  ASSERT_EQ(kantor_birkhoff_forward(dR.buf.data(), dP2.buf.data(), B, n, KANTOR_DTYPE_FLOAT32, &c,
                                    nullptr, &st),
            KANTOR_STATUS_OK);
  EXPECT_EQ(dP.host(g), dP2.host(g));
  EXPECT_EQ(dD.host(g), dD2.host(g));
  EXPECT_EQ(st.worst_error, s.worst_error);
  EXPECT_EQ(st.median_error, s.median_error);
  EXPECT_EQ(st.not_converged, s.not_converged);
  EXPECT_EQ(st.invalid_inputs, 0);
  EXPECT_EQ(st.first_invalid, -1);
  // bf16 newton on h's stream, against the C++ call on g's.
  std::vector<bfloat16> Rb(R.size());
  for (std::size_t k = 0; k < R.size(); ++k) Rb[k] = to_bfloat16(R[k]);
  DeviceCopy<bfloat16> bR(g, Rb, n), bP(g, Rb, n), bP2(g, Rb, n);
  const BirkhoffSummary sb = project_birkhoff(g, bR.c(), bP.v(), {});
  g.synchronize();
  kantor_birkhoff_default_options(&c);
  for (int call = 0; call < 2; ++call) {  // the second call reuses the cached context
    ASSERT_EQ(kantor_birkhoff_forward(bR.buf.data(), bP2.buf.data(), B, n, KANTOR_DTYPE_BFLOAT16,
                                      &c, h.cuda_stream(), &st),
              KANTOR_STATUS_OK)
        << kantor_birkhoff_last_error();
    EXPECT_EQ(st.not_converged, sb.not_converged);
    EXPECT_EQ(st.worst_error, sb.worst_error);
  }
  const auto a = bP.host(g), b = bP2.host(g);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t k = 0; k < a.size(); ++k) ASSERT_EQ(a[k].bits, b[k].bits) << k;
}

TEST(CpuBirkhoff, CApiReportsErrorsWithoutCuda) {
  kantor_birkhoff_options o;
  kantor_birkhoff_default_options(&o);
  o.method = 7;
  float x[16] = {};
  EXPECT_EQ(kantor_birkhoff_forward(x, x, 1, 4, KANTOR_DTYPE_FLOAT32, &o, nullptr, nullptr),
            KANTOR_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kantor_birkhoff_last_error()).find("method"), std::string::npos);
  if (!KANTOR_CUDA_ENABLED) {
    kantor_birkhoff_default_options(&o);
    EXPECT_EQ(kantor_birkhoff_forward(x, x, 1, 4, KANTOR_DTYPE_FLOAT32, &o, nullptr, nullptr),
              KANTOR_STATUS_NOT_COMPILED);
  }
}

}  // namespace
}  // namespace kantor
