// VectorOps on host memory: the CPU engine's small vector and matrix kernels (plain loops; every
// reduction accumulates in double in index order, so results do not depend on anything but the
// data). The contracts are those of kantor::VectorOps (include/kantor/oracle.hpp).
#pragma once

#include <cmath>
#include <cstdint>

#include "kantor/oracle.hpp"

namespace kantor {

template <class T>
class CpuVectorOps final : public VectorOps<T> {
 public:
  void fill(MatrixView<T> dst, T value) override {
    for (std::int64_t i = 0; i < dst.rows; ++i)
      for (std::int64_t k = 0; k < dst.cols; ++k) dst(i, k) = value;
  }
  void axpby(double alpha, MatrixView<const T> src, double beta, MatrixView<T> dst) override {
    for (std::int64_t i = 0; i < dst.rows; ++i)
      for (std::int64_t k = 0; k < dst.cols; ++k) {
        const double old = beta == 0 ? 0.0 : beta * double(dst(i, k));
        dst(i, k) = T(alpha * double(src(i, k)) + old);
      }
  }
  void scale_rows(const T* s, MatrixView<const T> src, MatrixView<T> dst) override {
    for (std::int64_t i = 0; i < dst.rows; ++i)
      for (std::int64_t k = 0; k < dst.cols; ++k) dst(i, k) = s[i] * src(i, k);
  }
  void multiply(std::int64_t n, const T* x, const T* y, T* dst) override {
    for (std::int64_t i = 0; i < n; ++i) dst[i] = x[i] * y[i];
  }
  void divide(std::int64_t n, const T* x, const T* y, T* dst) override {
    for (std::int64_t i = 0; i < n; ++i) dst[i] = y[i] == T(0) ? T(0) : x[i] / y[i];
  }
  void row_products(MatrixView<const T> U, MatrixView<const T> W, MatrixView<T> dst) override {
    for (std::int64_t i = 0; i < U.rows; ++i)
      for (std::int64_t k = 0; k < U.cols; ++k)
        for (std::int64_t l = 0; l < W.cols; ++l) dst(i, k * W.cols + l) = U(i, k) * W(i, l);
  }
  void row_contract(double alpha, MatrixView<const T> u, MatrixView<const T> M, double beta,
                    MatrixView<T> out) override {
    const std::int64_t p = u.cols, q = out.cols;
    for (std::int64_t i = 0; i < out.rows; ++i)
      for (std::int64_t l = 0; l < q; ++l) {
        double s = 0;
        for (std::int64_t k = 0; k < p; ++k) s += double(u(i, k)) * double(M(i, k * q + l));
        const double old = beta == 0 ? 0.0 : beta * double(out(i, l));
        out(i, l) = T(alpha * s + old);
      }
  }
  void row_dots(MatrixView<const T> U, MatrixView<const T> W, T* out) override {
    for (std::int64_t i = 0; i < U.rows; ++i) {
      double s = 0;
      for (std::int64_t k = 0; k < U.cols; ++k) s += double(U(i, k)) * double(W(i, k));
      out[i] = T(s);
    }
  }
  void dot(std::int64_t n, const T* x, const T* y, double* out) override {
    double s = 0;
    for (std::int64_t i = 0; i < n; ++i) s += double(x[i]) * double(y[i]);
    out[0] = s;
  }
  void subtract_mean(std::int64_t n, T* x, double* scratch) override {
    double s = 0;
    for (std::int64_t i = 0; i < n; ++i) s += double(x[i]);
    scratch[0] = n > 0 ? s / double(n) : 0.0;
    for (std::int64_t i = 0; i < n; ++i) x[i] = T(double(x[i]) - scratch[0]);
  }
  void axpy_ratio(std::int64_t n, const double* num, const double* den, double sign, const T* x,
                  T* y) override {
    const double r = sign * num[0] / den[0];
    if (!(std::isfinite(r)) || r == 0) return;
    for (std::int64_t i = 0; i < n; ++i) y[i] = T(double(y[i]) + r * double(x[i]));
  }
  void xpay_ratio(std::int64_t n, const T* x, const double* num, const double* den, T* y) override {
    const double r = num[0] / den[0];
    const bool keep = std::isfinite(r) && r != 0;
    for (std::int64_t i = 0; i < n; ++i) y[i] = keep ? T(double(x[i]) + r * double(y[i])) : x[i];
  }
  void copy_scalars(const double* src, double* dst, std::int64_t count) override {
    for (std::int64_t i = 0; i < count; ++i) dst[i] = src[i];
  }
};

}  // namespace kantor
