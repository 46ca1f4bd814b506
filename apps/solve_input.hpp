// kantor solve's input side: the problem in float64 as read from files or generated (--demo),
// its checks (the library's, kantor::validate, with the file of each array in front of its
// message), and the conversion to the solve's precision.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kantor/error.hpp"
#include "kantor/types.hpp"

namespace kantor::cli {

constexpr double kDemoEpsilon = 0.05;
constexpr std::int64_t kDemoN = 2000, kDemoM = 3000, kDemoD = 3;

/// A double with all 17 significant digits.
std::string fmt(double v);

struct Input {
  std::int64_t n = 0, m = 0, d = 0;  // d: of the source (dy: of the target, d once checked)
  std::int64_t dy = 0;
  std::vector<double> x, y;  // row-major n x d, m x d
  std::vector<double> a, b;  // empty = uniform (set by finish_weights)
  // How messages name each array, e.g. "--source 'x.npy'" or "--demo source".
  std::string x_name, y_name, a_name, b_name;
};

/// The seeded --demo problem: two Gaussian mixtures, kDemoN x kDemoD and kDemoM x kDemoD.
Input demo_input();
/// Reads the four files (weights may be empty names: uniform).
Input load_input(const std::string& source, const std::string& target,
                 const std::string& source_weights, const std::string& target_weights);
/// A missing weight file becomes uniform weights with the total mass of the other one (1 when
/// both are missing; for an unbalanced problem, rho_a or rho_b finite, a missing file is uniform
/// 1/n, the library's convention); then the float64 problem (clouds, weights, masses, cost
/// scale, epsilon, marginal penalties) goes through kantor::validate, whose errors get the file
/// or option of the field in front.
void check_and_finish(Input* in, double epsilon, double cost_scale,
                      double rho_a = std::numeric_limits<double>::infinity(),
                      double rho_b = std::numeric_limits<double>::infinity());

/// Re-throws an InvalidArgument of the library about the problem (kantor::validate, the solver's
/// setup) with the file or option its field came from in front: "--source 'x.npy': problem.x:
/// non-finite coordinate nan at point 3, coordinate 0". Other messages pass unchanged.
[[noreturn]] void rethrow_problem_error(const InvalidArgument& e, const Input& in);

/// The joint bounding box of x and y in float64: its midpoint per coordinate, its widest side.
struct Box {
  std::vector<double> mid;
  double width = 0;
};
Box bounding_box(const Input& in);
/// A float32 solve needs the total masses finite in float32.
void check_float_mass(const std::vector<double>& w, const std::string& name, Precision precision);
/// The largest cost c D^2 must be finite (<= max_value) in the arithmetic.
void check_cost_range(const Input& in, double cost_scale, double max_value, Precision precision);

/// Converts float64 data minus `shift` (per column; empty: none) to T; a finite value that
/// overflows float32 is a caller error, reported with its value as read.
template <class T>
std::vector<T> convert(const std::vector<double>& v, const std::string& name, const char* what,
                       std::int64_t cols, Precision precision,
                       const std::vector<double>& shift = {}) {
  std::vector<T> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    out[i] = T(shift.empty() ? v[i] : v[i] - shift[i % std::size_t(cols)]);
    if (!std::isfinite(double(out[i])))
      throw InvalidArgument(
          name + ": " + what + " " + fmt(v[i]) + " at index " +
          (cols > 1 ? std::to_string(i / std::size_t(cols)) + ", " +
                          std::to_string(i % std::size_t(cols))
                    : std::to_string(i)) +
          (std::is_same<T, float>::value
               ? " overflows float32 (precision " + to_string(precision) + "; use --precision fp64)"
               : std::string(" is not a finite float64 (precision ") + to_string(precision) + ")"));
  }
  return out;
}

}  // namespace kantor::cli
