// Host-side preparation shared by every engine: validate, copy to contiguous row-major storage,
// centre both clouds on the midpoint of their joint bounding box (the cost is translation
// invariant; centring limits the cancellation of c|x|^2 + c|y|^2 - 2c<x,y>), normalize the weights
// to mass 1 (empty weight views become uniform); for a LabelAugmented cost, host copies of the
// labels and of the scaled table c_w W (double).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kantor/problem.hpp"
#include "kantor/uninit_vector.hpp"

namespace kantor {

template <class T>
struct PreparedProblem {
  std::int64_t n = 0, m = 0, d = 0;
  detail::UninitVector<T> x, y;  // centred, row-major n x d and m x d (y empty: same_clouds)
  std::vector<double> center; // d: what was subtracted
  detail::UninitVector<T> a, b;  // normalized weights (as given for an unbalanced problem)
  double rho_a = 0, rho_b = 0;  // marginal penalties (infinity: strict)
  double mass_a = 0, mass_b = 0;  // totals of a and b (double; 1 for a balanced problem)
  detail::UninitVector<T> la, lb;  // their logs; -inf for a zero weight (a masked point)
  double diameter = 0;        // diagonal of the joint bounding box
  double cost_scale = 1;      // c of the squared-Euclidean part
  // LabelAugmented: L classes, labels per side, the pair term c_w W[l, l'] (L x L, double,
  // row-major). classes = 0 for a SqEuclidean cost.
  std::int64_t classes = 0;
  std::vector<std::int32_t> labels_x, labels_y;
  std::vector<double> pair;
  double max_pair = 0;        // largest entry of `pair`
  double max_cost = 0;        // c D^2 + max_pair: no C_ij exceeds it (the annealing start)
  double max_sq_norm = 0;     // max over both centred clouds of |x_i|^2 (double)
  // The certificate's data (lib/core/certificate.hpp): the caller's coordinates as given (or
  // problem.reference_x / reference_y when set), uncentred, in double, row-major; and the weights
  // normalized in double (as given for an unbalanced problem).
  detail::UninitVector<double> x_ref, y_ref;  // (y_ref empty: same_clouds)
  detail::UninitVector<double> a_ref, b_ref;
  // The problem's two clouds are one view (x and y, and their references, the same memory and
  // shape: a debiased divergence's self-problems): y and y_ref are left empty, x and x_ref serve
  // both sides, and an engine keeps one copy.
  bool same_clouds = false;
  // prepare_problem_scalars: the scalars above only (n, m, d, center, diameter, cost_scale, rho,
  // masses, max_sq_norm, max_cost, same_clouds); no copies. The engine builds its copies from the
  // caller's views: x = T(double(x) - center), x_ref = the reference when given, else double(x),
  // a_ref = double(a) / weight_total_a (1 / n for an empty view), a = T(a_ref), la = log(a)
  // (-inf for 0); the same for y and b.
  bool scalars_only = false;
  double weight_total_a = 1, weight_total_b = 1;
  const detail::UninitVector<T>& y_cloud() const { return same_clouds ? x : y; }
  const detail::UninitVector<double>& y_reference() const { return same_clouds ? x_ref : y_ref; }
};

/// Validates (kantor::validate) and prepares. Problem views must be host memory (InvalidArgument
/// otherwise). clouds_checked: the coordinates were checked already (validate_clouds_checked).
template <class T>
PreparedProblem<T> prepare_problem_data(const Problem<T>& problem, bool clouds_checked = false);

/// Validates and computes the scalars of prepare_problem_data (the same values, bit for bit)
/// without its copies (PreparedProblem::scalars_only): for an engine that builds them from the
/// caller's views on its own device (the CUDA engine: one upload of each view instead of the
/// centred, float64 and weight copies). Host views and a squared-Euclidean cost only
/// (InvalidArgument otherwise).
template <class T>
PreparedProblem<T> prepare_problem_scalars(const Problem<T>& problem, bool clouds_checked = false);

/// prepare_problem_data's normalized weight of point i (a_ref_i): 1 / count for an empty view,
/// else double(w_i) / total (total: the weights' sum, or 1 for weights as given).
template <class T>
double exact_weight(const VectorView<const T>& w, std::int64_t i, std::int64_t count,
                    double total) {
  return w.data == nullptr ? 1.0 / double(count) : double(w[i]) / total;
}

/// The log of an engine weight, -inf for a zero weight (a masked point: every engine's pass
/// treats -inf as a masked key, never as a NaN source). Formed in double and rounded once to T:
/// the CUDA engine forms it the same way on the device (lib/cuda/operands.hpp, operand_logs), so
/// that in fp32 both engines see the same log weights but in rare rounding ties (a float log of
/// the host library and the device's can differ by an ulp, and at eps = 1e-3 in fp32 an ulp of
/// the log weights moved the primal cost of 40 iterations by ~4e-6 relative); in double the two
/// logs may differ by an ulp of double.
template <class T>
T log_weight(T w) {
  return w > 0 ? T(std::log(double(w))) : -std::numeric_limits<T>::infinity();
}

/// Whether prepare_problem_scalars takes the problem: every view in host memory, a
/// squared-Euclidean cost.
template <class T>
bool scalars_preparable(const Problem<T>& problem) {
  auto host = [](const void* data, MemorySpace space) {
    return !data || space == MemorySpace::kHost;
  };
  const SqEuclidean<T>& p = problem.features();
  return !problem.labels() && host(p.x.data, p.x.space) && host(p.y.data, p.y.space) &&
         host(problem.a.data, problem.a.space) && host(problem.b.data, problem.b.space) &&
         host(problem.reference_x.data, problem.reference_x.space) &&
         host(problem.reference_y.data, problem.reference_y.space);
}

}  // namespace kantor
