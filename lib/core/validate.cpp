// Validation of problems at the API boundary: every message names the field, the value and what
// was expected.
#include <cmath>
#include <sstream>
#include <string>

#include "kantor/error.hpp"
#include "kantor/problem.hpp"

namespace kantor {
namespace {

template <class T>
void check_cloud(const MatrixView<const T>& v, const char* name) {
  if (v.rows <= 0)
    throw InvalidArgument(std::string("problem.") + name + ": empty point cloud (0 points)");
  if (v.cols <= 0)
    throw InvalidArgument(std::string("problem.") + name + ": points have dimension " +
                          std::to_string(v.cols) + " (expected >= 1)");
  if (v.stride < v.cols)
    throw InvalidArgument(std::string("problem.") + name + ": stride " + std::to_string(v.stride) +
                          " < cols " + std::to_string(v.cols));
  if (v.data == nullptr) throw InvalidArgument(std::string("problem.") + name + ": null data");
  if (v.space != MemorySpace::kHost) return;
  for (std::int64_t i = 0; i < v.rows; ++i)
    for (std::int64_t k = 0; k < v.cols; ++k)
      if (!std::isfinite(double(v(i, k)))) {
        std::ostringstream os;
        os << "problem." << name << ": non-finite coordinate " << double(v(i, k)) << " at point "
           << i << ", coordinate " << k;
        throw InvalidArgument(os.str());
      }
}

template <class T>
double check_weights(const VectorView<const T>& w, std::int64_t expected, const char* name) {
  if (w.data == nullptr && w.size == 0) return 1.0;  // uniform
  if (w.size != expected)
    throw InvalidArgument(std::string("problem.") + name + ": " + std::to_string(w.size) +
                          " weights for " + std::to_string(expected) + " points");
  if (w.data == nullptr)
    throw InvalidArgument(std::string("problem.") + name + ": null data for " +
                          std::to_string(w.size) + " weights (leave the view empty for uniform)");
  if (w.space != MemorySpace::kHost) return std::nan("");
  double total = 0;
  for (std::int64_t i = 0; i < w.size; ++i) {
    const double v = double(w[i]);
    if (!std::isfinite(v) || v < 0) {
      std::ostringstream os;
      os << "problem." << name << ": weight " << i << " is " << v << " (expected finite and >= 0)";
      throw InvalidArgument(os.str());
    }
    total += v;
  }
  if (!(total > 0))
    throw InvalidArgument(std::string("problem.") + name + ": total mass is 0 (all weights zero)");
  // Guard: an overflowing total would normalize every weight to 0.
  if (!std::isfinite(total))
    throw InvalidArgument(std::string("problem.") + name +
                          ": total mass overflows double (rescale the weights)");
  return total;
}

}  // namespace

template <class T>
void validate(const Problem<T>& p) {
  check_cloud(p.x, "x");
  check_cloud(p.y, "y");
  if (p.x.cols != p.y.cols)
    throw InvalidArgument("problem: dimension mismatch, x has " + std::to_string(p.x.cols) +
                          " coordinates per point and y has " + std::to_string(p.y.cols));
  const double ma = check_weights(p.a, p.x.rows, "a");
  const double mb = check_weights(p.b, p.y.rows, "b");
  if (std::isfinite(ma) && std::isfinite(mb) && std::abs(ma - mb) > 1e-6 * std::max(ma, mb)) {
    std::ostringstream os;
    os.precision(17);
    os << "problem: weights have different total mass (a: " << ma << ", b: " << mb
       << "; balanced OT needs equal mass to 1e-6 relative)";
    throw InvalidArgument(os.str());
  }
  if (!(p.cost_scale > 0) || !std::isfinite(p.cost_scale))
    throw InvalidArgument("problem.cost_scale must be finite and > 0, got " +
                          std::to_string(p.cost_scale));
  if (!(p.epsilon > 0) || !std::isfinite(p.epsilon))
    throw InvalidArgument("problem.epsilon must be finite and > 0, got " +
                          std::to_string(p.epsilon));
  const bool rx = p.reference_x.data != nullptr || p.reference_x.rows != 0;
  const bool ry = p.reference_y.data != nullptr || p.reference_y.rows != 0;
  if (rx != ry)
    throw InvalidArgument(std::string("problem.") + (rx ? "reference_y" : "reference_x") +
                          " is empty while problem." + (rx ? "reference_x" : "reference_y") +
                          " is set (give both or neither)");
  if (rx) {
    check_cloud(p.reference_x, "reference_x");
    check_cloud(p.reference_y, "reference_y");
    auto same_shape = [](const auto& r, const auto& v, const char* rn, const char* vn) {
      if (r.rows != v.rows || r.cols != v.cols)
        throw InvalidArgument(std::string("problem.") + rn + " is " + std::to_string(r.rows) +
                              " x " + std::to_string(r.cols) + " but problem." + vn + " is " +
                              std::to_string(v.rows) + " x " + std::to_string(v.cols));
    };
    same_shape(p.reference_x, p.x, "reference_x", "x");
    same_shape(p.reference_y, p.y, "reference_y", "y");
  }
}

template void validate(const Problem<float>&);
template void validate(const Problem<double>&);

}  // namespace kantor
