// kantor solve's input side (apps/solve_input.hpp).
#include "apps/solve_input.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "apps/cli_common.hpp"
#include "kantor/error.hpp"
#include "kantor/io.hpp"
#include "kantor/problem.hpp"
#include "kantor/view.hpp"

namespace kantor::cli {
namespace {

// SplitMix64 (Steele, Lea, Flood 2014) + Box-Muller: the demo must not depend on the standard
// library's distributions, whose output is implementation-defined.
class DemoRandom {
 public:
  explicit DemoRandom(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in (0, 1): 53 random bits, never 0 (log(0) in Box-Muller).
  double uniform() { return (double(next() >> 11) + 0.5) * 0x1.0p-53; }
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double r = std::sqrt(-2.0 * std::log(uniform()));
    const double t = 6.283185307179586 * uniform();
    spare_ = r * std::sin(t);
    has_spare_ = true;
    return r * std::cos(t);
  }

 private:
  std::uint64_t state_;
  double spare_ = 0;
  bool has_spare_ = false;
};

// n points of a mixture of equally likely isotropic Gaussians (centers: k x d row-major).
std::vector<double> gaussian_mixture(DemoRandom& rng, std::int64_t n, std::int64_t d,
                                     const std::vector<double>& centers, double sigma) {
  const std::int64_t k = std::int64_t(centers.size()) / d;
  std::vector<double> out(std::size_t(n * d));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t c = std::int64_t(rng.next() % std::uint64_t(k));
    for (std::int64_t j = 0; j < d; ++j)
      out[std::size_t(i * d + j)] = centers[std::size_t(c * d + j)] + sigma * rng.normal();
  }
  return out;
}

// The file (or option) a library message about the problem is about, from the field it names
// first ("" when it names none of the CLI's inputs).
std::string problem_context(const std::string& message, const Input& in) {
  auto both = [](const std::string& p, const std::string& q) {
    return p.empty() || q.empty() ? p + q : p + " and " + q;
  };
  const std::string field = leading_field(message);
  if (field == "problem.x" || field == "problem.reference_x") return in.x_name;
  if (field == "problem.y" || field == "problem.reference_y") return in.y_name;
  // "problem.a: 29 weights for 30 points": the points are the other file's.
  const bool count = message.find(" weights for ") != std::string::npos;
  if (field == "problem.a") return count ? in.a_name + " for " + in.x_name : in.a_name;
  if (field == "problem.b") return count ? in.b_name + " for " + in.y_name : in.b_name;
  if (field == "problem.epsilon") return "--epsilon";
  if (field == "problem.cost.scale") return "--cost-scale";
  if (field == "problem") {  // about two arrays: "problem: dimension mismatch, x has ..."
    if (message.find("total mass") != std::string::npos) return both(in.a_name, in.b_name);
    return both(in.x_name, in.y_name);
  }
  return "";
}

/// (min, max) of coordinate k over both clouds.
std::pair<double, double> coordinate_range(const Input& in, std::int64_t k) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (std::int64_t i = 0; i < in.n; ++i) {
    lo = std::min(lo, in.x[std::size_t(i * in.d + k)]);
    hi = std::max(hi, in.x[std::size_t(i * in.d + k)]);
  }
  for (std::int64_t j = 0; j < in.m; ++j) {
    lo = std::min(lo, in.y[std::size_t(j * in.d + k)]);
    hi = std::max(hi, in.y[std::size_t(j * in.d + k)]);
  }
  return {lo, hi};
}

}  // namespace

std::string fmt(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

/// The --demo problem: 2000 points from 3 Gaussians against 3000 points from 4 Gaussians in R^3.
Input demo_input() {
  Input in;
  in.n = kDemoN;
  in.m = kDemoM;
  in.d = in.dy = kDemoD;
  DemoRandom rng(20261130);
  in.x = gaussian_mixture(rng, in.n, in.d, {0, 0, 0, 1.5, 0.5, 0, 0.5, 1.5, 1.0}, 0.30);
  in.y = gaussian_mixture(rng, in.m, in.d, {0.5, 0.5, 0.5, 2, 1, 0.5, 1, 2, 1.5, 2, 2, 0}, 0.25);
  in.x_name = "--demo source";
  in.y_name = "--demo target";
  return in;
}

void rethrow_problem_error(const InvalidArgument& e, const Input& in) {
  const std::string context = problem_context(e.what(), in);
  if (context.empty()) throw e;
  throw InvalidArgument(context + ": " + e.what());
}

void check_and_finish(Input* in, double epsilon, double cost_scale, double rho_a, double rho_b) {
  const bool has_a = !in->a_name.empty(), has_b = !in->b_name.empty();
  const bool unbalanced = std::isfinite(rho_a) || std::isfinite(rho_b) || rho_a != rho_b;
  if (has_a != has_b && !unbalanced) {  // uniform weights on the other side, with the same total
    const std::vector<double>& given = has_a ? in->a : in->b;
    double total = 0;
    for (const double w : given) total += w;
    // Only a valid total is spread; otherwise the given file is what validate reports (the
    // other side stays empty: uniform).
    if (total > 0 && std::isfinite(total)) {
      if (has_a) {
        in->b.assign(std::size_t(in->m), total / double(in->m));
        in->b_name = "uniform target weights (total mass of " + in->a_name + ")";
      } else {
        in->a.assign(std::size_t(in->n), total / double(in->n));
        in->a_name = "uniform source weights (total mass of " + in->b_name + ")";
      }
    }
  }
  // The float64 problem as read, through the library's checks.
  Problem<double> p;
  p.features().x = host_matrix(in->x.data(), in->n, in->d);
  p.features().y = host_matrix(in->y.data(), in->m, in->dy);
  p.features().scale = cost_scale;
  // A weight file with no weights is 0 weights for n points, not "uniform" (an empty view).
  static const double kNoWeights = 0;
  auto weights = [&](const std::vector<double>& w, bool given) {
    if (!given && w.empty()) return VectorView<const double>{};
    return host_vector(w.empty() ? &kNoWeights : w.data(), std::int64_t(w.size()));
  };
  p.a = weights(in->a, !in->a_name.empty());
  p.b = weights(in->b, !in->b_name.empty());
  p.epsilon = epsilon;
  p.rho_a = rho_a;
  p.rho_b = rho_b;
  try {
    validate(p);
  } catch (const InvalidArgument& e) {
    rethrow_problem_error(e, *in);
  }
}

Input load_input(const std::string& source, const std::string& target,
                 const std::string& source_weights, const std::string& target_weights) {
  Input in;
  in.x_name = "--source '" + source + "'";
  in.y_name = "--target '" + target + "'";
  io::Array x = io::read_matrix(source, "--source");
  io::Array y = io::read_matrix(target, "--target");
  in.n = x.shape[0];
  in.d = x.shape[1];
  in.m = y.shape[0];
  in.dy = y.shape[1];
  in.x = std::move(x.data);
  in.y = std::move(y.data);
  if (!source_weights.empty()) {
    in.a = io::read_vector(source_weights, "--source-weights").data;
    in.a_name = "--source-weights '" + source_weights + "'";
  }
  if (!target_weights.empty()) {
    in.b = io::read_vector(target_weights, "--target-weights").data;
    in.b_name = "--target-weights '" + target_weights + "'";
  }
  return in;
}

Box bounding_box(const Input& in) {
  Box box;
  box.mid.resize(std::size_t(in.d));
  for (std::int64_t k = 0; k < in.d; ++k) {
    const auto [lo, hi] = coordinate_range(in, k);
    box.mid[std::size_t(k)] = lo / 2 + hi / 2;  // no overflow near +-DBL_MAX
    box.width = std::max(box.width, hi - lo);
  }
  return box;
}

/// A float32 solve needs the total masses finite in float32.
void check_float_mass(const std::vector<double>& w, const std::string& name, Precision precision) {
  double total = 0;
  for (const double v : w) total += v;
  if (!(total <= double(std::numeric_limits<float>::max())))
    throw InvalidArgument(name + ": the weights sum to " + fmt(total) +
                          ", beyond the float32 range (precision " + to_string(precision) +
                          "; use --precision fp64 or rescale the weights)");
}

/// The largest cost, c * D^2 (D: diagonal of the joint bounding box), must be finite in the
/// arithmetic: otherwise every cost and the first eps of the annealing schedule overflow and the
/// solve can only end in a numerical failure.
void check_cost_range(const Input& in, double cost_scale, double max_value, Precision precision) {
  std::vector<double> range(std::size_t(in.d));
  double widest = 0;
  for (std::int64_t k = 0; k < in.d; ++k) {
    const auto [lo, hi] = coordinate_range(in, k);
    range[std::size_t(k)] = hi - lo;  // may be inf for finite lo, hi near +-DBL_MAX
    widest = std::max(widest, range[std::size_t(k)]);
  }
  // D = widest * sqrt(sum (range_k / widest)^2): no overflow before the final product.
  double sum = 0;
  for (const double r : range) sum += widest > 0 ? (r / widest) * (r / widest) : 0;
  const double diagonal = widest * std::sqrt(sum);
  const double largest = cost_scale * diagonal * diagonal;
  if (!(largest <= max_value))
    throw InvalidArgument(in.x_name + " and " + in.y_name +
                          ": the points span a box of diagonal D = " + fmt(diagonal) +
                          ", so costs up to c D^2 = " + fmt(largest) + " exceed the " +
                          (precision == Precision::kFp64 ? "float64" : "float32") +
                          " range (precision " + to_string(precision) +
                          "); rescale the coordinates");
}

}  // namespace kantor::cli
