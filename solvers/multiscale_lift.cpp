// The Gaussian lift's operands (solvers/multiscale_lift.hpp; docs/multiscale.md, step 3).
#include "multiscale_lift.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "parallel.hpp"

namespace kantor::multiscale {

CellKernel gaussian_cell(double c, double eps, int d, double spread) {
  CellKernel k;
  if (!(spread > 0)) return k;
  // 2 c s / eps, at most kMaxCellRatio (a cell of a few points has no Gaussian tails).
  const double r = std::min(kMaxCellRatio, 2 * c * spread / eps);
  k.kappa = c * r / (1 + r);  // = 2 c^2 s / (eps + 2 c s)
  k.shift = -0.5 * double(d) * eps * std::log1p(r);
  return k;
}

double lift_excess(const double* coarse, const double* probe, const double* row_shift,
                   const double* b, std::int64_t count, double eps) {
  constexpr double kCap = 50;  // e^50: far past any tolerance, still finite
  double excess = 0, mass = 0;
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  for (std::int64_t j = 0; j < count; ++j) {
    if (b[j] == 0) continue;  // a cell without mass is credited nothing
    const double delta = (coarse[j] - (probe[j] - row_shift[j])) / eps;
    // A NaN (inf - inf), or a weight that is not finite and positive, is no evidence for the
    // lift: NaN out, which no tolerance accepts.
    if (std::isnan(delta) || !(b[j] > 0 && b[j] < HUGE_VAL)) return kNaN;
    // Only a positive delta adds (most are negative on smooth maps: expm1 runs on few cells).
    if (delta > 0) excess += b[j] * std::expm1(std::min(delta, kCap));
    mass += b[j];
  }
  return mass > 0 ? excess / mass : kNaN;
}

double median_cell_ratio(const std::vector<double>& spread, double c, double eps) {
  if (spread.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::vector<double> r(spread);
  const auto mid = r.begin() + std::ptrdiff_t(r.size() / 2);
  std::nth_element(r.begin(), mid, r.end());
  return 2 * c * *mid / eps;
}

template <class T>
void lift_queries(const T* p, std::int64_t n, int d, const double* mid, double c, int threads,
                  detail::UninitVector<T>* queries, detail::UninitVector<T>* row_shift) {
  const int w = d + 1;
  queries->resize(std::size_t(n * w));
  row_shift->resize(std::size_t(n));
  detail::parallel_ranges(n, threads, 1 << 14, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      double n2 = 0;
      for (int a = 0; a < d; ++a) {
        const double v = double(p[i * d + a]) - mid[a];
        (*queries)[std::size_t(i * w + a)] = T(v);
        n2 += v * v;
      }
      (*queries)[std::size_t(i * w + d)] = T(n2);
      (*row_shift)[std::size_t(i)] = T(c * n2 * n2);
    }
  });
}

template <class T>
void lift_keys(const T* cells, const double* spread, const double* images, const double* mass,
               std::int64_t K, int d, const double* mid, double c, double eps, int threads,
               std::vector<T>* keys, std::vector<double>* pot_shift) {
  const int w = d + 1;
  keys->resize(std::size_t(K * w));
  pot_shift->resize(std::size_t(K));
  detail::parallel_ranges(K, threads, 1 << 12, [&](std::int64_t b, std::int64_t e) {
    std::vector<double> x(static_cast<std::size_t>(d)), t(static_cast<std::size_t>(d));
    for (std::int64_t k = b; k < e; ++k) {
      const double pm = mass[k];
      bool usable = pm > 0 && std::isfinite(pm);
      for (int a = 0; a < d; ++a) {
        x[std::size_t(a)] = double(cells[k * d + a]) - mid[a];
        t[std::size_t(a)] = usable ? images[k * d + a] / pm - mid[a] : 0.0;
        usable = usable && std::isfinite(t[std::size_t(a)]);
      }
      const CellKernel ck = usable ? gaussian_cell(c, eps, d, spread[k]) : CellKernel{};
      const double q = ck.kappa / c;
      double x2 = 0, t2 = 0, k2 = 0;
      for (int a = 0; a < d; ++a) {
        const double xa = x[std::size_t(a)], ta = usable ? t[std::size_t(a)] : 0.0;
        const double ka = xa - q * ta;
        (*keys)[std::size_t(k * w + a)] = T(ka);
        x2 += xa * xa;
        t2 += ta * ta;
        k2 += ka * ka;
      }
      const double last = 0.5 * q;
      (*keys)[std::size_t(k * w + d)] = T(last);
      k2 += last * last;
      (*pot_shift)[std::size_t(k)] = ck.shift - c * x2 + ck.kappa * t2 + c * k2;
    }
  });
}

#define KANTOR_LIFT(T)                                                                            \
  template void lift_queries<T>(const T*, std::int64_t, int, const double*, double, int,          \
                                detail::UninitVector<T>*, detail::UninitVector<T>*);              \
  template void lift_keys<T>(const T*, const double*, const double*, const double*, std::int64_t, \
                             int, const double*, double, double, int, std::vector<T>*,            \
                             std::vector<double>*);
KANTOR_LIFT(float)
KANTOR_LIFT(double)
#undef KANTOR_LIFT

}  // namespace kantor::multiscale
