// The multiscale screen's pair bound (docs/multiscale.md, "The screen"), one definition for the
// host descent (solvers/multiscale_screen.cpp) and the CUDA engine's (lib/cuda/screen_descent.cu):
// both evaluate it operation for operation in IEEE double without contraction (on the device
// through the _rn intrinsics; on the host the including file must be compiled with
// -ffp-contract=off, as CMakeLists.txt does for solvers/multiscale_screen.cpp: GCC fuses C++
// a * b + c by default wherever -march has FMA), so the two descents keep the same pairs.
// Internal (detail).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define KANTOR_SCREEN_HD __host__ __device__
#else
#define KANTOR_SCREEN_HD
#endif

namespace kantor::detail {

/// Unit roundoff of double: the rounding allowance's unit.
constexpr double kScreenRound = 0x1.0p-53;

// Rounded double operations, never fused (host: see above).
KANTOR_SCREEN_HD inline double sb_add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
KANTOR_SCREEN_HD inline double sb_sub(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
KANTOR_SCREEN_HD inline double sb_mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
KANTOR_SCREEN_HD inline double sb_div(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
// std::min / std::max's exact semantics (the first argument on ties and NaN comparisons).
KANTOR_SCREEN_HD inline double sb_min(double a, double b) { return b < a ? b : a; }
KANTOR_SCREEN_HD inline double sb_max(double a, double b) { return a < b ? b : a; }

/// An upper bound of pot_x(x) + pot_y(y) - c |x - y|^2 over the points of two cells, from their
/// packed records (3 d + 3 doubles each: lo, hi, grad, then base = value + resid - <grad,
/// center>, mag = the magnitudes behind base and the linear terms, ext = the largest
/// |coordinate|): the two linear models maximized in closed form over the two boxes, axis by
/// axis, plus a rounding allowance. D > 0: the dimension as a compile-time constant; D = 0: d.
template <int D>
KANTOR_SCREEN_HD inline double screen_pair_bound(const double* A, const double* B, int dyn_d,
                                                 double c) {
  const int d = D > 0 ? D : dyn_d;
  const double inv2c = sb_div(0.5, c);
  double bound = sb_add(A[3 * d], B[3 * d]);
  for (int k = 0; k < d; ++k) {
    const double xl = A[k], xh = A[d + k], p = A[2 * d + k];
    const double yl = B[k], yh = B[d + k], q = B[2 * d + k];
    // The maximum of a concave quadratic h(s, t) = p s + q t - c (s - t)^2 over the rectangle
    // lies on one of its four edges (an interior critical point exists only when p = -q, and
    // then h is constant along lines s - t = const, which meet the boundary); on each edge h is
    // a 1-D concave quadratic, maximized at its clamped vertex.
    const double t1 = sb_min(yh, sb_max(yl, sb_add(xl, sb_mul(q, inv2c))));
    const double t2 = sb_min(yh, sb_max(yl, sb_add(xh, sb_mul(q, inv2c))));
    const double s3 = sb_min(xh, sb_max(xl, sb_add(yl, sb_mul(p, inv2c))));
    const double s4 = sb_min(xh, sb_max(xl, sb_add(yh, sb_mul(p, inv2c))));
    auto h = [&](double s, double t) {
      const double r = sb_sub(s, t);
      return sb_sub(sb_add(sb_mul(p, s), sb_mul(q, t)), sb_mul(sb_mul(c, r), r));
    };
    bound = sb_add(bound, sb_max(sb_max(h(xl, t1), h(xh, t2)), sb_max(h(s3, yl), h(s4, yh))));
  }
  // Rounding allowance: each term carries a relative error of a few units of 2^-53 per
  // operation; (8 d + 32) u times a bound of every magnitude involved (the cells' model terms,
  // |h| <= (|p| + |q|) e + 4 c e^2 per axis with e the largest |coordinate|) covers them.
  const double e = sb_max(A[3 * d + 2], B[3 * d + 2]);
  const double dd = double(d);
  const double mag = sb_add(sb_add(A[3 * d + 1], B[3 * d + 1]),
                            sb_mul(sb_mul(sb_mul(sb_mul(8.0, dd), c), e), e));
  return sb_add(bound, sb_mul(sb_mul(sb_add(sb_mul(8.0, dd), 32.0), kScreenRound), mag));
}

// The screen's 64-bit masks of a block pair (bit 8 a + b: the block's a-th x atom with its b-th y
// atom), shared by the host's lists and the CUDA engine's (lib/cuda/screen_lists.cu).

/// The 8 x 8 bit matrix transposed (bit 8 a + b to 8 b + a): three block swaps.
KANTOR_SCREEN_HD inline std::uint64_t screen_transpose_bits(std::uint64_t v) {
  std::uint64_t t = (v ^ (v >> 7)) & 0x00AA00AA00AA00AAull;
  v ^= t ^ (t << 7);
  t = (v ^ (v >> 14)) & 0x0000CCCC0000CCCCull;
  v ^= t ^ (t << 14);
  t = (v ^ (v >> 28)) & 0x00000000F0F0F0F0ull;
  v ^= t ^ (t << 28);
  return v;
}

/// The OR of a mask's 8 bytes: bit b set when some x atom keeps the block's b-th y atom.
KANTOR_SCREEN_HD inline std::uint32_t screen_fold_bytes(std::uint64_t v) {
  v |= v >> 32;
  v |= v >> 16;
  v |= v >> 8;
  return std::uint32_t(v & 0xFFu);
}

}  // namespace kantor::detail
