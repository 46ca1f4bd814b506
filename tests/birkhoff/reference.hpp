// Independent float64 references for the Birkhoff tests: a long log-domain Sinkhorn run to
// machine precision (the converged projection) and plain implementations of the truncated maps.
// Written without the library's per-matrix code so that the tests compare two implementations.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace kantor::test {

using Mat = std::vector<double>;  // n x n row-major

inline double lse(const double* v, int n, int stride) {
  double m = -INFINITY;
  for (int k = 0; k < n; ++k) m = std::max(m, v[k * stride]);
  if (m == -INFINITY) return -INFINITY;
  double s = 0;
  for (int k = 0; k < n; ++k) s += std::exp(v[k * stride] - m);
  return m + std::log(s);
}

/// Converged projection: alternate f_i = -LSE_j(R_ij + g_j), g_j = -LSE_i(R_ij + f_i) until the
/// row error of exp(R + f + g) is below 1e-15 (or 20000 sweeps; *err_out says which). Returns P.
inline Mat reference_projection(const Mat& R, int n, double* err_out = nullptr) {
  std::vector<double> f(n, 0.0), g(n, 0.0), t(n);
  Mat P(n * n);
  double err = INFINITY;
  for (int sweep = 0; sweep < 20000 && err > 1e-15; ++sweep) {
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) t[j] = R[i * n + j] + g[j];
      f[i] = -lse(t.data(), n, 1);
    }
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < n; ++i) t[i] = R[i * n + j] + f[i];
      g[j] = -lse(t.data(), n, 1);
    }
    // Rows are exact after the f-update up to the g change; measure both marginals.
    err = 0;
    for (int i = 0; i < n; ++i) {
      double r = 0;
      for (int j = 0; j < n; ++j) r += std::exp(R[i * n + j] + f[i] + g[j]);
      err += std::fabs(r - 1);
    }
  }
  for (int k = 0; k < n * n; ++k) P[k] = std::exp(R[k] + f[k / n] + g[k % n]);
  if (err_out) *err_out = err;
  return P;
}

/// Truncated Sinkhorn-Knopp: M = exp(R - max R), then `iters` times (row, column) or
/// (column, row) exact normalizations.
inline Mat reference_sinkhorn(const Mat& R, int n, int iters, bool row_first) {
  double mx = -INFINITY;
  for (double v : R) mx = std::max(mx, v);
  Mat M(n * n);
  for (int k = 0; k < n * n; ++k) M[k] = std::exp(R[k] - mx);
  auto rows = [&] {
    for (int i = 0; i < n; ++i) {
      double s = 0;
      for (int j = 0; j < n; ++j) s += M[i * n + j];
      for (int j = 0; j < n; ++j) M[i * n + j] /= s;
    }
  };
  auto cols = [&] {
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int i = 0; i < n; ++i) s += M[i * n + j];
      for (int i = 0; i < n; ++i) M[i * n + j] /= s;
    }
  };
  for (int it = 0; it < iters; ++it) {
    if (row_first) {
      rows();
      cols();
    } else {
      cols();
      rows();
    }
  }
  return M;
}

/// DeepSeek's released map: row softmax + 1e-6, column normalization, then (repeat - 1) times
/// row and column normalization, every denominator sum + 1e-6.
inline Mat reference_deepseek(const Mat& R, int n, int repeat) {
  const double eps = 1e-6;
  Mat M(n * n);
  for (int i = 0; i < n; ++i) {
    const double l = lse(&R[i * n], n, 1);
    for (int j = 0; j < n; ++j) M[i * n + j] = std::exp(R[i * n + j] - l) + eps;
  }
  auto rows = [&] {
    for (int i = 0; i < n; ++i) {
      double s = 0;
      for (int j = 0; j < n; ++j) s += M[i * n + j];
      for (int j = 0; j < n; ++j) M[i * n + j] /= (s + eps);
    }
  };
  auto cols = [&] {
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int i = 0; i < n; ++i) s += M[i * n + j];
      for (int i = 0; i < n; ++i) M[i * n + j] /= (s + eps);
    }
  };
  cols();
  for (int r = 1; r < repeat; ++r) {
    rows();
    cols();
  }
  return M;
}

/// Err = |P1 - 1|_1 + |P^T 1 - 1|_1 in float64.
template <class T>
double marginal_error(const T* P, int n) {
  double e = 0;
  for (int i = 0; i < n; ++i) {
    double r = 0, c = 0;
    for (int j = 0; j < n; ++j) {
      r += double(P[i * n + j]);
      c += double(P[j * n + i]);
    }
    e += std::fabs(r - 1) + std::fabs(c - 1);
  }
  return e;
}

inline std::vector<float> random_logits(std::int64_t count, double scale, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> d(0, scale);
  std::vector<float> v(static_cast<std::size_t>(count));
  for (auto& x : v) x = float(d(gen));
  return v;
}

}  // namespace kantor::test
