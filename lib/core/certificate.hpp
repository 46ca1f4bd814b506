// The certificate of a pair of potentials: an upper bound, rounding slack included, of the L1
// marginal error |P 1 - a|_1 + |P^T 1 - b|_1 of the plan
//
//   P_ij = a_i b_j exp((f_i + g_j - C_ij) / eps),   C_ij = c sum_k (x_ik - y_jk)^2,
//
// that the potentials define on the caller's coordinates as given (never the centred, rounded or
// tensor-core copies the iterations use), with a, b the caller's weights normalized in double.
// Every engine evaluates it the same way, in float64 with exact differences (docs/numerics.md,
// "Certificates"): one pass over the rows (P 1) and one over the columns (P^T 1), each producing a
// CertificateSide; certificate_bound() turns the two into the bound. The per-pair arithmetic is
// certificate_pair(), shared by the CPU engine and the CUDA kernel.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kantor/oracle.hpp"
#include "lib/core/host_device.hpp"
#include "lib/core/online_lse.hpp"

namespace kantor {

// CertificateSide (what one side's pass accumulates) lives in kantor/oracle.hpp.

/// One row's running sums over its keys (certificate_pair adds to it, certificate_row folds it).
struct CertificateRow {
  double sum = 0;    ///< sum_j v_j exp(z_ij)
  double t = 0;      ///< sum_j v_j exp(z_ij) t_ij
  double max_t = 0;  ///< max_j t_ij
  double cost = 0;   ///< sum_j v_j exp(z_ij) C_ij
  double pot = 0;    ///< sum_j v_j exp(z_ij) (p_i + p_j)
};

/// Pairs below this exponent, with t / eps below kCertificateSkipT, are bounded instead of summed.
constexpr double kCertificateSkipZ = -64.0;
constexpr double kCertificateSkipT = 0x1.0p44;

/// exp(z) in plain double arithmetic for the CPU certificate's vector loops (no library call, no
/// FMA, no branch: compilers vectorize the loops that call it). Cody-Waite reduction z = k ln2 +
/// r with fdlibm's split of ln2 (k ln2_hi exact for |k| < 2^21), |r| <= ln2 / 2 (+ rounding), the
/// degree-13 Taylor polynomial of e^r by Horner (truncation below 2^-57), and the scale 2^k
/// written into the exponent bits (k = round(z log2 e) from the low bits of z log2 e + 1.5 2^52).
/// Valid for z in [kCertificateExpMin, kCertificateExpMax] (k in [-1021, 1023]: normal results);
/// there its relative error is at most kCertificateExpUlps u (u = 2^-53), checked against long
/// double expl in tests/core/test_certificate_exp.cpp. Callers use std::exp outside the range.
constexpr double kCertificateExpMin = -708.0;
constexpr double kCertificateExpMax = 709.0;
constexpr double kCertificateExpUlps = 4.0;
inline double certificate_exp(double z) {
  constexpr double kLog2e = 1.44269504088896340736;
  constexpr double kShift = 0x1.8p52;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // 0x3FE62E42FEE00000
  constexpr double kLn2Lo = 1.90821492927058770002e-10;  // 0x3DEA39EF35793C76
  double kd = z * kLog2e + kShift;
  std::uint64_t bits;
  std::memcpy(&bits, &kd, sizeof bits);
  kd -= kShift;
  const double r = (z - kd * kLn2Hi) - kd * kLn2Lo;
  double p = 1.0 / 6227020800.0;  // 1/13!
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  const std::uint64_t sbits = (bits + 1023) << 52;  // (k + 1023) in the exponent field
  double scale;
  std::memcpy(&scale, &sbits, sizeof scale);
  return p * scale;
}

/// The fp32 certificate paths (CUDA: lib/cuda/certify.cu; CPU: oracles/cpu/cpu_oracle.cpp)
/// evaluate each pair in float32 on coordinates relative to an anchor of the row block (the
/// block's first row): xi = fl32(x_i - o), eta = fl32(y_j - o). The CPU's direct form (below):
/// sq = sum_k fl(xi_k - eta_k)^2, z2 = fl(fl(fl(f_i + g_j) - c sq) * fl(log2(e) / eps)),
/// term = fl(fl32(b_j) 2^z2), summed in float over a tile of at most 64 keys and in double across
/// tiles. CUDA's expanded form (the same model with K_Z = 0 and a K_F term; its derivation is in
/// lib/cuda/certify.cu) forms z2 from per-row and per-key terms and d FMAs.
///
/// Model (u = 2^-24). With s_k = |xi_k| + |eta_k| and S = sum_k s_k^2 (bounded over a tile t by
/// S_t = sum_k (R_k + R'_k)^2, R and R' the row block's and the key tile's largest |coordinate|
/// per axis), the exponent in natural units is off by |dz| <= u (4.01 |z| + (d + K_S) c S / eps):
/// the rounded differences are off by <= 2.0001 u s_k, the squared distance by <= (d + 4.1) u S
/// (gamma_d), fl(c) and f + g (|f + g| <= eps |z| + c S) add 2 u c S, and a product c sq rounded
/// on its own (no FMA) one more: K_S = 6.31 with an FMA (CUDA), 8.31 without (CPU); the four
/// roundings of z give the 4.01 |z|. exp2, the weight's rounding, the product and the float sum of
/// <= 64 terms add a relative K_T u. So each term is off by at most term (e^{A_t} - 1) + e^{A_t}
/// 4.02 u |z| term (for |dz| <= 0.005), A_t = u ((d + K_S) c S_t / eps + K_T), and a tile's sum T_t
/// by (rho_t T_t + c0_t), rho_t = a_t + (1 + a_t) 4.02 u Z+ with a_t = A_t + A_t^2 >= e^{A_t} - 1,
/// Z+ = max(0, max_j z_ij) (the computed maximum plus A) and c0_t = e^{A_t} 4.02 u m_t / e plus
/// the underflow allowance per key (b e^z |z| <= b / e for z < 0; m_t the tile's key weight;
/// the allowance, for a term lost below the normal range, is scaled by max(1, m_b) >= b_j).
/// Summed over the tiles, with rho_max = a_max + (1 + a_max) 4.02 u Z+ < 1/2:
///   |R - R^| <= (sum_t a_t T^_t + (1 + a_max) 4.02 u Z+ R^ + c0) / (1 - rho_max),
/// c0 = (1 + a_max) 4.02 u m_b / e + keys * underflow * max(1, m_b). Far tiles, whose sums are
/// ~0, cost nothing.
/// Largest dimension of the fp32 paths (both engines; their kernels are instantiated per d).
constexpr int kFastCertificateMaxDim = 6;

struct FastCertificateModel {
  double k_s;        ///< K_S
  double k_t;        ///< K_T
  double underflow;  ///< absolute error per key of a term below the normal range
  /// The expanded evaluation (CUDA, lib/cuda/certify.cu) adds K_F u F / eps to the exponent's
  /// error (F = |f_i - f_o| + |g_j + f_o|, the potentials shifted by the row block's anchor
  /// potential f_o) and has no relative part (K_Z = 0); the direct evaluation: K_F = 0, K_Z = 4.02.
  double k_f = 0;
  double k_z = 4.02;
};

/// The expanded evaluation's model at dimension d (lib/cuda/certify.cu: K_S = 4.01, K_T = 71,
/// K_F = d + 2.01, K_Z = 0). The multiscale points stage's fp32 pre-scan bounds its exponents
/// with the same K_S and K_F (lib/cuda/screen_descent.cu, fast_error).
KANTOR_HOST_DEVICE constexpr FastCertificateModel expanded_certificate_model(int d) {
  return FastCertificateModel{4.01, 71.0, 0x1.0p-125, double(d) + 2.01, 0.0};
}

/// a_t of the tiles of one problem: A_t = u ((d + K_S) c S_t (1 + 1e-6) / eps + K_F F_t (1 + 1e-6)
/// / eps + K_T) (F_t: the expanded evaluation's potentials term, 0 for the direct one), its
/// constants formed once (no division per tile; the (1 + 1e-9) covers their rounding order),
/// a_t = A_t + A_t^2 >= e^{A_t} - 1, inf when A_t > 1/2 (no bound).
struct FastExposure {
  double k_s_tile, k_f_tile, k_t_tile;
  KANTOR_HOST_DEVICE FastExposure(const FastCertificateModel& model, int d, double c, double eps)
      : k_s_tile(0x1.0p-24 * (double(d) + model.k_s) * c * (1 + 1e-6) / eps),
        k_f_tile(0x1.0p-24 * model.k_f * (1 + 1e-6) / eps),
        k_t_tile(0x1.0p-24 * model.k_t) {}
  /// a_t (inf when A_t > 1/2: no bound).
  KANTOR_HOST_DEVICE double operator()(double s_tile, double f_tile) const {
    const double A = (k_s_tile * s_tile + k_f_tile * f_tile) * (1 + 1e-9) + k_t_tile;
    return A <= 0.5 ? A + A * A : HUGE_VAL;
  }
};

/// a_t of one tile (FastExposure formed for it alone).
KANTOR_HOST_DEVICE inline double fast_tile_exposure(const FastCertificateModel& model, int d,
                                                    double c, double eps, double s_tile,
                                                    double f_tile = 0) {
  return FastExposure(model, d, c, eps)(s_tile, f_tile);
}

/// w |R - R^| for one row: row_sum = R^, weighted = sum_t a_t T^_t, a_max = max_t a_t, z2_max the
/// largest computed exponent (base 2), key_mass = m_b, keys = the key count. Inf when the model
/// gives no bound (rho_max >= 1/2, a non-finite sum): the caller falls back to float64.
KANTOR_HOST_DEVICE inline double fast_row_slack(const FastCertificateModel& model, double w,
                                                double row_sum, double weighted, double a_max,
                                                double z2_max, double key_mass, double keys) {
  constexpr double u = 0x1.0p-24;
  const double A = a_max;  // >= A_max: bounds the exponent error's constant part
  const double zpos = fmax(0.0, (z2_max * 0.6931471805599453 + A + 1e-6) * (1 + 1e-5));
  const double zterm = (1 + a_max) * model.k_z * u;
  const double rho = a_max + zterm * zpos;
  const double c0 =
      zterm * key_mass * 0.36787944117144233 + keys * model.underflow * fmax(1.0, key_mass);
  // Guard: rho >= 1/2 or a non-finite sum leaves no bound (NaN compares false).
  if (!(rho < 0.5) || !(row_sum < HUGE_VAL) || !(weighted < HUGE_VAL)) return HUGE_VAL;
  return w * (weighted + zterm * zpos * row_sum + c0) / (1 - rho) * (1 + 1e-6);
}

/// 2^z in float for the CPU's fp32 certificate (branch-free: compilers vectorize loops that call
/// it): k = round(z) by the 1.5 2^23 shift, r = z - k exactly (|r| <= 1/2), 2^r by the degree-7
/// Taylor polynomial of e^(r ln 2) by Horner (truncation below 1e-8 relative), scaled by 2^k
/// through the exponent bits. Its relative error is at most kCertificateExp2fU units of u = 2^-24
/// (Horner's rounding gamma_14 times sum |a_i| |r ln 2|^i / p(r) <= 2, plus the truncation and the
/// rounding of r ln 2: < 30 u). Valid for z in [-126, 127] (normal results); the caller maps
/// z < -126 to 0 and z > 127 to inf. Not instrumented by the sanitizers (float arithmetic on its
/// argument only): the fp32 certificate's chunk loop, left out of them, inlines it
/// (oracles/cpu/cpu_oracle.cpp, fast_certificate_chunk_row).
constexpr double kCertificateExp2fU = 32.0;
__attribute__((no_sanitize("address", "undefined"))) inline float certificate_exp2f(float z) {
  const float kd = (z + 12582912.0f) - 12582912.0f;  // round to nearest integer (|z| < 2^22)
  const float r = (z - kd) * 0.693147180559945309f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const std::int32_t k = std::int32_t(kd);
  const std::uint32_t bits = std::uint32_t(k + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

/// Oracle::atom_pair_maxima, the engines' shared rounding model. Each engine computes
/// w_ij = (f_i + g_j) - c' sq_ij in float64, sq_ij the sum of squared exact-difference terms, with
/// the cost scale shrunk to c' = maxima_cost_scale(c, d) = c (1 - (2 d + 16) 2^-53): then
/// c' sq^ (1 + rounding) <= c sq for every pair (sq^ carries at most (d + 3) rounding units, the
/// product and the subtraction two more, with or without fused multiply-adds), and the only
/// remaining error is that of f_i + g_j and of the final subtraction on it, at most
/// 2.01 2^-53 (|f_i| + |g_j|). So max_ij w_ij + maxima_allowance(F + G), F and G the largest |f_i|
/// and |g_j| of positive weight in the atom pair, bounds the true maximum from above.
KANTOR_HOST_DEVICE inline double maxima_cost_scale(double c, int d) {
  return c * (1.0 - (2.0 * d + 16.0) * 0x1.0p-53);
}
KANTOR_HOST_DEVICE inline double maxima_allowance(double fg_max) { return 0x1.0p-50 * fg_max; }

/// Whether a certificate decides "bound <= target": its bound is at most the target, or its
/// computed error minus its slack (a lower bound of the true error) is above it.
inline bool certificate_decides(const Certificate& c, double target) {
  if (c.bound <= target) return true;
  return std::isfinite(c.computed) && std::isfinite(c.slack) && c.computed - c.slack > target;
}

/// One pair's contribution: adds v_j exp(z) to row->sum, v_j exp(z) t to row->t (and the
/// statistics' terms) and raises row->max_t, with z = (p_q + p_k - C) / eps and C = c sq + pair computed from the squared distance
/// `sq` (double, exact differences) and the pair's label term (c_w W[l_i, l_j] in double; 0 for
/// a squared-Euclidean cost). Pairs with zero key weight are skipped by the caller (their
/// potential may be anything, even inf).
/// `exposure` (certificate_pair_expanded) replaces the cost in t where sq was not computed by exact
/// differences.
KANTOR_HOST_DEVICE inline void certificate_pair_t(double cost, double exposure, double inv_eps,
                                                  double p_q, double p_k, double v_k,
                                                  CertificateRow* row) {
  const double z = ((p_q + p_k) - cost) * inv_eps;
  const double t = fabs(p_q) + fabs(p_k) + exposure;
  // Negligible pairs skip the exponential: with z < -64 and t / eps < 2^44 the true exponent is
  // below -64 + (d + 11) / 512 (the rounding model below), so the pair holds less than
  // v_k e^(-64 + (d + 11) / 512); certificate_bound adds that much per side for all of them.
  if (z < kCertificateSkipZ && t * inv_eps < kCertificateSkipT) return;
  const double p = v_k * exp(z);
  row->sum += p;
  row->t += p * t;
  row->max_t = t > row->max_t ? t : row->max_t;
  row->cost += p * cost;
  row->pot += p * (p_q + p_k);
}

KANTOR_HOST_DEVICE inline void certificate_pair(double sq, double c, double pair, double inv_eps,
                                                double p_q, double p_k, double v_k,
                                                CertificateRow* row) {
  const double cost = c * sq + pair;
  certificate_pair_t(cost, cost, inv_eps, p_q, p_k, v_k, row);
}

/// certificate_pair for a squared distance computed by the norm expansion (the CUDA engine's
/// float64 GEMM certificate, lib/cuda/certify.cu): sq = |x'|^2 + |y'|^2 - 2 <x', y'> (clamped at
/// 0) on anchored coordinates x' = fl(x - o), y' = fl(y - o), the norms and the dot product
/// summed in double in any order (the FP64 tensor cores' DGEMM included: every product and sum
/// rounded as an IEEE double operation). Its error is then not relative to sq but to
/// R^2 = (|x'| + |y'|)^2: the anchoring perturbs each coordinate by u |x'_k| (so sq by <= 2.01 u
/// R^2), the norms and the dot product by gamma_d (|x'|^2 + |y'|^2 + 2 |x'| |y'|) = gamma_d R^2
/// and the two sums by 2 u R^2: (d + 5) u R^2 (1 + O(u)); c sq and + pair add u c R^2 and
/// u (c R^2 + pair). certificate_bound's model gives the cost (d + 6) u of its t; with
///   exposure = 1.2 (c R^2 (1 + 1e-6) + pair) >= the cost (R^2 >= sq),
/// (d + 6) u exposure >= (d + 7.2) u (c R^2 + pair) covers it for every d >= 0, and the rest of
/// the model (f + g, the division, exp) is as for certificate_pair. `rn` = (|x'| + |y'|)^2 from
/// norms computed in double (their rounding is inside the 1e-6).
KANTOR_HOST_DEVICE inline void certificate_pair_expanded(double sq, double rn, double c,
                                                         double pair, double inv_eps, double p_q,
                                                         double p_k, double v_k,
                                                         CertificateRow* row) {
  const double cost = c * (sq > 0 ? sq : 0.0) + pair;
  certificate_pair_t(cost, 1.2 * (c * rn * (1 + 1e-6) + pair), inv_eps, p_q, p_k, v_k, row);
}

/// Folds one row: r = w sum_j v_j exp(z_ij), into the side's totals. Its error is |r - w| for a
/// strict side (rho_inv = 0) and |r - w exp(-p / rho)| for a KL-relaxed one, p the row's
/// potential (the unbalanced first-order condition, docs/numerics.md section 9).
KANTOR_HOST_DEVICE inline void certificate_row(double w, double p, double rho_inv,
                                               const CertificateRow& row, CertificateSide* side) {
  const double r = w * row.sum;
  if (rho_inv == 0) {
    side->error += fabs(r - w);
  } else {
    const double target = target_mass(w, p, rho_inv);
    side->error += fabs(r - target);
    side->target_exposure += target * (fabs(p) * rho_inv + 2);
  }
  side->weight += w;
  side->mass += r;
  side->weighted_t += w * row.t;
  side->max_t = row.max_t > side->max_t ? row.max_t : side->max_t;
  side->cost += w * row.cost;
  side->potentials += w * row.pot;
}

/// The certificate side as the next potential update (Oracle::certify_kept_next's and
/// Oracle::update_f_certified's row side, Oracle::update_g_certified's column side), one row of
/// positive weight and strict marginal:
/// its sum S = sum_j v_j exp((p + p_j - C_ij) / eps) gives the relaxed update
/// *next = p - relax eps ln S (rounded once to T; relax = 1: update_f / update_g's value). With
/// `side`, the row's share of the side of the new pair (*next against the same keys) is added to
/// it: the new row sum is S phi, phi = exp(a), a = (*next - p) / eps from the stored value, and
/// its rounding bound `slack` (the old row's w |S - S^| bound) times phi, plus (1e-14 + 1e-15 |a|)
/// of the row's new mass for phi's own rounding in double (a's subtraction and division, 2^-52
/// |a|, exp's ulp and the product: below 4.5e-16 (|a| + 2)). `cost` and `pot` are the old row's
/// plan statistics (sum_j e_ij C_ij and sum_j e_ij (p + p_j), e_ij the terms of S): the new
/// row's are phi cost and phi (pot + (*next - p) S) (its terms are e_ij phi; statistics only,
/// outside the bound). Returns 0, or +inf when S is not positive and finite (*next untouched,
/// +inf added to side->extra): the side's bound is then +inf and its updates unusable.
template <class T>
KANTOR_HOST_DEVICE inline double next_update(double p, double sum, double eps, double relax,
                                             double w, double slack, T* next,
                                             CertificateSide* side, double cost = 0.0,
                                             double pot = 0.0) {
  if (!(sum > 0) || !(sum < HUGE_VAL)) {
    if (side) side->extra += HUGE_VAL;
    return HUGE_VAL;
  }
  const T v = T(p - relax * eps * log(sum));
  *next = v;
  if (side) {
    const double a = (double(v) - p) / eps;
    const double phi = exp(a);
    CertificateRow row;
    row.sum = sum * phi;
    row.cost = cost * phi;
    row.pot = phi * (pot + (double(v) - p) * sum);
    certificate_row(w, double(v), 0.0, row, side);
    side->extra += slack * phi + (1e-14 + 1e-15 * fabs(a)) * w * row.sum;
  }
  return 0.0;
}

/// The bound from the two sides' sums (n rows, m columns, dimension d, target eps).
///
/// Rounding model (u = 2^-53, every operation of certificate_pair in double): the squared
/// distance and the cost (with its label term c_w W, itself one rounding) carry a relative error
/// <= (d + 6) u, f + g - C and the division by eps
/// add u |f| + u |g| + 2 u (|f| + |g| + C) and u |z|, so |dz| <= K u t / eps with K = d + 11 and
/// t = |f| + |g| + C. exp (at most kCertificateExpUlps = 4 u: the CPU's certificate_exp; CUDA's
/// double exp is within 1 ulp), the product v exp and the weights (normalized by a sum of n or m
/// terms) add a relative (n + m + 11) u; the sums over j and i add m u and n u, in any order (the
/// CPU sums each row in 8 lanes). With delta = K u t / eps:
/// |e^dz - 1| <= 1.2975 delta for delta <= 1/2 ((e^x - 1) / x is increasing), so each side's
/// computed error is off by at most 1.2975 (1 + g) K u / eps sum P t + g (mass + 1), where
/// g = 2 (n + m + d + 19) u; beyond delta = 1/2 the bound uses expm1(delta_max) times the mass.
/// Pairs whose term underflowed to 0 hold less than 2^-1074 e^(1/2) each: m n 2^-1070 covers them.
/// Pairs skipped by certificate_pair (z < -64, t / eps < 2^44: |dz| <= (d + 11) / 512) hold less
/// than v_j e^(-64 + (d + 11) / 512) each, at most that in all per side (the v_j sum to 1 and
/// the rows' weights too; for unbalanced weights, times the product of the two totals).
/// KL-relaxed targets w exp(-p / rho): p / rho rounds by u |p| / rho, exp and the product by 2u,
/// so their error is at most (1 + g) u target (|p| / rho + 2) summed (target_exposure).
inline Certificate certificate_bound(const CertificateSide& rows, const CertificateSide& cols,
                                     std::int64_t n, std::int64_t m, std::int64_t d, double eps) {
  constexpr double u = 0x1.0p-53;
  const double K = double(d) + 11;
  const double g = 2 * (double(n) + double(m) + double(d) + 19) * u;
  auto side_slack = [&](const CertificateSide& s) {
    const double delta_max = K * u * s.max_t / eps;
    double exposure;
    if (delta_max <= 0.5)
      exposure = 1.2975 * (1 + g) * K * u / eps * s.weighted_t;
    else
      exposure = std::expm1(delta_max) * (1 + g) * s.mass;
    return exposure + g * (s.mass + std::max(1.0, s.weight)) + g * s.error +
           double(n) * double(m) * 0x1.0p-1070 +
           std::exp(kCertificateSkipZ + (double(d) + 11) / 512) *
               std::max(1.0, rows.weight * cols.weight) +
           1.01 * u * s.target_exposure + s.extra;
  };
  Certificate c;
  c.computed = rows.error + cols.error;
  c.slack = side_slack(rows) + side_slack(cols);
  c.bound = c.computed + c.slack;
  c.plan_mass = rows.mass;
  c.plan_cost = rows.cost;
  c.plan_potentials = rows.potentials;
  // Guard: a NaN anywhere (non-finite potentials) must not read as a small bound.
  if (!(c.bound >= 0)) c.bound = std::numeric_limits<double>::quiet_NaN();
  return c;
}

}  // namespace kantor
