// Device side of the atom-pair maxima (lib/cuda/pair_maxima.hpp), shared by its kernel and the
// screen descent's points stage (lib/cuda/screen_descent.cu) so that both evaluate a pair alike.
#pragma once

#include <cuda_runtime.h>

namespace kantor::cuda {

/// One pair of points of positive weight: best = max(best, (f_i + g_j) - cs |x_i - y_j|^2) and
/// mag = max(mag, |f_i| + |g_j|), in float64 with cs = maxima_cost_scale(c, d): the arithmetic
/// whose rounding lib/core/certificate.hpp bounds (maxima_allowance(mag) above best). xi and yj
/// hold the pair's d coordinates (D = d unrolled, or 0 for a run-time d).
template <int D>
__device__ __forceinline__ void maxima_pair_best(const double* xi, const double* yj, int d,
                                                 double fi, double gj, double cs, double* best) {
  double sq = 0;
  for (int e = 0; e < (D > 0 ? D : d); ++e) {
    const double u = xi[e] - yj[e];
    sq += u * u;
  }
  *best = fmax(*best, (fi + gj) - cs * sq);
}

template <int D>
__device__ __forceinline__ void maxima_pair(const double* xi, const double* yj, int d, double fi,
                                            double gj, double cs, double* best, double* mag) {
  maxima_pair_best<D>(xi, yj, d, fi, gj, cs, best);
  *mag = fmax(*mag, fabs(fi) + fabs(gj));
}

}  // namespace kantor::cuda
