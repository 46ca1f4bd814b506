// Test objectives of the minimizer tests: smooth functions with known minima, saddles, domains and
// deliberately wrong Hessians or gradients.
#pragma once

#include <Eigen/Dense>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "kantor/newton.hpp"

namespace kantor::testing {

using Vector = Eigen::VectorXd;
using Matrix = Eigen::MatrixXd;
inline Eigen::Map<const Vector> as_vector(const double* p, std::int64_t n) { return {p, n}; }
inline Eigen::Map<Vector> as_vector(double* p, std::int64_t n) { return {p, n}; }

/// f = x^T A x / 2 - b^T x (A symmetric).
class Quadratic : public Objective {
 public:
  Quadratic(Matrix a, Vector b) : a_(std::move(a)), b_(std::move(b)) {}
  std::int64_t num_parameters() const override { return b_.size(); }
  bool evaluate(const double* x, double* value, double* gradient) override {
    const auto xv = as_vector(x, b_.size());
    const Vector ax = a_ * xv;
    *value = 0.5 * xv.dot(ax) - b_.dot(xv);
    if (gradient) as_vector(gradient, b_.size()) = ax - b_;
    return true;
  }
  bool hessian_vector(const double* v, double* out) override {
    as_vector(out, b_.size()) = a_ * as_vector(v, b_.size());
    return true;
  }
  const Matrix& a() const { return a_; }
  const Vector& b() const { return b_; }

 private:
  Matrix a_;
  Vector b_;
};

/// f = sum_i w_i log cosh(a_i.x - c_i) + mu |x|^2 / 2 + sum_j x_j^4 / 4: smooth, strictly
/// convex (Hessian >= mu I), not quadratic, Lipschitz Hessian on bounded sets.
class LogCoshQuartic : public Objective {
 public:
  LogCoshQuartic(std::int64_t n, std::int64_t m, double mu, unsigned seed) : mu_(mu) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal;
    std::uniform_real_distribution<double> uniform(0.5, 2);
    a_ = Matrix(m, n);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) a_(i, j) = normal(rng) / std::sqrt(double(n));
    c_ = Vector(m);
    w_ = Vector(m);
    for (std::int64_t i = 0; i < m; ++i) {
      c_(i) = normal(rng);
      w_(i) = uniform(rng);
    }
  }
  std::int64_t num_parameters() const override { return a_.cols(); }
  bool evaluate(const double* x, double* value, double* gradient) override {
    const auto xv = as_vector(x, a_.cols());
    const Vector u = a_ * xv - c_;
    double f = 0.5 * mu_ * xv.squaredNorm() + 0.25 * xv.array().pow(4).sum();
    for (Eigen::Index i = 0; i < u.size(); ++i) {
      const double au = std::abs(u(i));
      f += w_(i) * (au + std::log1p(std::exp(-2 * au)) - std::log(2.0));
    }
    *value = f;
    if (gradient) {
      const Vector t = w_.array() * u.array().tanh();
      as_vector(gradient, a_.cols()) = a_.transpose() * t + mu_ * xv + xv.array().cube().matrix();
      x_ = xv;
    }
    return true;
  }
  bool hessian_vector(const double* v, double* out) override {
    const auto vv = as_vector(v, a_.cols());
    const Vector u = a_ * x_ - c_;
    const Vector sech2 = (1 - u.array().tanh().square()).matrix();
    const Vector av = a_ * vv;
    as_vector(out, a_.cols()) =
        a_.transpose() * (w_.array() * sech2.array() * av.array()).matrix() + mu_ * vv +
        (3 * x_.array().square() * vv.array()).matrix();
    return true;
  }

 private:
  Matrix a_;
  Vector c_, w_;
  double mu_;
  Vector x_;  // point of the last evaluate() with a gradient
};

/// f = x^2 - y^2 + y^4 / 4: a saddle at 0 (Hessian diag(2, -2)), minima at (0, +-sqrt 2), f = -1.
class Saddle : public Objective {
 public:
  std::int64_t num_parameters() const override { return 2; }
  bool evaluate(const double* x, double* value, double* gradient) override {
    *value = x[0] * x[0] - x[1] * x[1] + 0.25 * std::pow(x[1], 4);
    if (gradient) {
      gradient[0] = 2 * x[0];
      gradient[1] = -2 * x[1] + std::pow(x[1], 3);
      y_ = x[1];
    }
    return true;
  }
  bool hessian_vector(const double* v, double* out) override {
    out[0] = 2 * v[0];
    out[1] = (-2 + 3 * y_ * y_) * v[1];
    return true;
  }

 private:
  double y_ = 0;
};

/// Extended Rosenbrock: sum over pairs (x_2i, x_2i+1) of 100 (x_2i+1 - x_2i^2)^2 + (1 - x_2i)^2;
/// minimum 0 at all ones.
class Rosenbrock : public Objective {
 public:
  explicit Rosenbrock(std::int64_t n) : n_(n), x_(std::size_t(n)) {}
  std::int64_t num_parameters() const override { return n_; }
  bool evaluate(const double* x, double* value, double* gradient) override {
    double f = 0;
    for (std::int64_t i = 0; i + 1 < n_; i += 2) {
      const double a = x[i + 1] - x[i] * x[i], b = 1 - x[i];
      f += 100 * a * a + b * b;
      if (gradient) {
        gradient[i] = -400 * x[i] * a - 2 * b;
        gradient[i + 1] = 200 * a;
      }
    }
    *value = f;
    if (gradient) x_.assign(x, x + n_);
    return true;
  }
  bool hessian_vector(const double* v, double* out) override {
    for (std::int64_t i = 0; i + 1 < n_; i += 2) {
      const double x0 = x_[std::size_t(i)], x1 = x_[std::size_t(i) + 1];
      const double h00 = 1200 * x0 * x0 - 400 * x1 + 2, h01 = -400 * x0, h11 = 200;
      out[i] = h00 * v[i] + h01 * v[i + 1];
      out[i + 1] = h01 * v[i] + h11 * v[i + 1];
    }
    return true;
  }

 private:
  std::int64_t n_;
  std::vector<double> x_;
};

/// f = sum_i -log(1 - x_i^2) - c x_i, defined on (-1, 1)^n only (evaluate() returns false
/// elsewhere); minimum at x_i = (sqrt(1 + c^2) - 1) / c.
class BoxBarrier : public Objective {
 public:
  BoxBarrier(std::int64_t n, double c) : n_(n), c_(c), x_(std::size_t(n)) {}
  std::int64_t num_parameters() const override { return n_; }
  double minimizer() const { return (std::sqrt(1 + c_ * c_) - 1) / c_; }
  bool evaluate(const double* x, double* value, double* gradient) override {
    double f = 0;
    for (std::int64_t i = 0; i < n_; ++i) {
      if (!(std::abs(x[i]) < 1)) return false;
      f += -std::log1p(-x[i] * x[i]) - c_ * x[i];
      if (gradient) gradient[i] = 2 * x[i] / (1 - x[i] * x[i]) - c_;
    }
    *value = f;
    if (gradient) x_.assign(x, x + n_);
    return true;
  }
  bool hessian_vector(const double* v, double* out) override {
    for (std::int64_t i = 0; i < n_; ++i) {
      const double s = x_[std::size_t(i)] * x_[std::size_t(i)];
      out[i] = 2 * (1 + s) / ((1 - s) * (1 - s)) * v[i];
    }
    return true;
  }

 private:
  std::int64_t n_;
  double c_;
  std::vector<double> x_;
};

/// Forwards to `base` and counts the calls; optionally scales the Hessian-vector products (a
/// wrong, overly optimistic model when scale < 1) or overrides evaluate() through `hook`.
class Wrapped : public Objective {
 public:
  explicit Wrapped(Objective* base) : base_(base) {}
  std::int64_t num_parameters() const override { return base_->num_parameters(); }
  bool evaluate(const double* x, double* value, double* gradient) override {
    ++evaluations;
    if (gradient) ++gradients;
    if (!base_->evaluate(x, value, gradient)) return false;
    return hook ? hook(x, value, gradient) : true;
  }
  bool hessian_vector(const double* v, double* out) override {
    ++hvps;
    if (hvp_fails) return false;
    if (!base_->hessian_vector(v, out)) return false;
    for (std::int64_t i = 0; i < num_parameters(); ++i) out[i] *= hessian_scale;
    return true;
  }
  void accepted(const double* x) override {
    ++accepted_calls;
    last_accepted.assign(x, x + num_parameters());
  }

  double hessian_scale = 1;
  bool hvp_fails = false;
  /// Called after a successful base evaluation; its result is evaluate()'s.
  std::function<bool(const double*, double*, double*)> hook;
  std::int64_t evaluations = 0, gradients = 0, hvps = 0, accepted_calls = 0;
  std::vector<double> last_accepted;

 private:
  Objective* base_;
};

}  // namespace kantor::testing
