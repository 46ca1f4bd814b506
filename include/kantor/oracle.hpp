// Oracle<T>: the passes of the entropic dual over a point-cloud problem. Solvers call only this.
// Every pointer argument is in the oracle's memory space (device memory for the CUDA engine) and
// has length n (f, a-side vectors) or m (g, b-side vectors). Scalars are written as double into
// that memory space too; nothing here synchronizes with the host.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "kantor/context.hpp"
#include "kantor/problem.hpp"
#include "kantor/view.hpp"

namespace kantor {

/// The certificate of a pair of potentials (lib/core/certificate.hpp, docs/numerics.md): an upper
/// bound of the L1 marginal error of the plan they define on the caller's coordinates, evaluated
/// in float64 with exact differences, rounding slack included.
struct Certificate {
  double bound = std::numeric_limits<double>::quiet_NaN();      ///< computed + slack
  double computed = std::numeric_limits<double>::quiet_NaN();   ///< the float64 evaluation
  double slack = std::numeric_limits<double>::quiet_NaN();      ///< its rounding bound
  double plan_mass = std::numeric_limits<double>::quiet_NaN();  ///< sum_ij P_ij
};

template <class T>
class Oracle {
 public:
  virtual ~Oracle() = default;

  virtual std::int64_t n() const = 0;
  virtual std::int64_t m() const = 0;
  virtual std::int64_t dim() const = 0;
  virtual Precision precision() const = 0;
  virtual MemorySpace memory_space() const = 0;
  /// Engine and kernel actually used, for the Summary, e.g. "cpu lse blocked 64x256 fp64".
  virtual std::string description() const = 0;
  /// Diagonal D of the joint bounding box of x and y (host value, computed at setup).
  virtual double diameter() const = 0;
  /// Largest cost term c |x_i|^2 or c |y_j|^2 of a score on the centred clouds (host value from
  /// setup): the magnitude whose rounding in the engine's arithmetic limits the resolvable eps.
  virtual double max_score_term() const = 0;
  /// Normalized weights (total mass 1), in the oracle's memory space.
  virtual const T* a() const = 0;
  virtual const T* b() const = 0;

  /// f_i <- -eps LSE_j[log b_j + (g_j - C_ij)/eps], in place. If row_err is not null it receives
  /// |P(f_old, g) 1 - a|_1 = sum_i a_i |exp((f_old_i - f_new_i)/eps) - 1|.
  virtual void update_f(T eps, const T* g, T* f, double* row_err) = 0;
  /// g_j <- -eps LSE_i[log a_i + (f_i - C_ij)/eps], in place; col_err as for update_f.
  virtual void update_g(T eps, const T* f, T* g, double* col_err) = 0;
  /// Both from the old values: f <- (1-w) f + w T_f(g), g <- (1-w) g + w T_g(f). If err is not
  /// null it receives the L1 marginal error (rows + columns) of the plan of the old (f, g).
  virtual void symmetric_step(T eps, T w, T* f, T* g, double* err) = 0;

  /// out = P v (n), P_ij = a_i b_j exp((f_i + g_j - C_ij)/eps).
  virtual void apply(T eps, const T* f, const T* g, const T* v, T* out) = 0;
  /// out = P^T u (m).
  virtual void apply_t(T eps, const T* f, const T* g, const T* u, T* out) = 0;
  /// out = P V; V is m x k, out is n x k.
  virtual void apply_mat(T eps, const T* f, const T* g, MatrixView<const T> V,
                         MatrixView<T> out) = 0;
  /// out (n x d) = barycentric map T(x_i) = sum_j P_ij y_j / sum_j P_ij, original coordinates.
  virtual void barycentric_map(T eps, const T* f, const T* g, MatrixView<T> out) = 0;

  /// out[0] = <a, f> + <b, g>.
  virtual void dual_value(const T* f, const T* g, double* out) = 0;
  /// out[0] = sum_ij P_ij, out[1] = <P, C>, out[2] = sum_ij P_ij (f_i + g_j).
  virtual void plan_statistics(T eps, const T* f, const T* g, double* out) = 0;
  /// out[0] = |P 1 - a|_1 + |P^T 1 - b|_1, evaluated by the engine's own passes (the residual of
  /// its rounded problem: cheap, but not a certificate).
  virtual void marginal_error(T eps, const T* f, const T* g, double* out) = 0;
  /// The certificate of (f, g) at `eps`: two float64 exact-difference passes over the caller's
  /// coordinates (lib/core/certificate.hpp). Synchronizes (returns a host value).
  virtual Certificate certify(double eps, const T* f, const T* g) = 0;
};

/// The oracle for (context backend, squared-Euclidean geometry, precision). Copies, centres and
/// normalizes the problem data once. Validates the problem. Throws InvalidArgument for a
/// precision the engine or T does not support (fp64 needs T = double; fp32, tf32 and bf16 need
/// T = float; tf32 and bf16 need the CUDA engine).
template <class T>
std::unique_ptr<Oracle<T>> make_oracle(const Context& ctx, const Problem<T>& problem,
                                       Precision precision);

}  // namespace kantor
