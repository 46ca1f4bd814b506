// Per-matrix Birkhoff algorithms shared by the CPU engine (F = double) and the CUDA kernels
// (F = float): every function works on one matrix held in a local array of NMAX * NMAX entries
// (row-major with row stride NMAX, first n x n used). With NMAX = n = 4 and everything inlined,
// nvcc keeps the arrays in registers; with NMAX = 16 and a runtime n they live in local memory
// (the general path). Math: numerics.md section 5 and docs/birkhoff.md.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#if defined(__CUDACC__)
#define KANTOR_BK_HD __host__ __device__ __forceinline__
// Full unrolling only for small compile-time sizes (n = 4 kernels keep arrays in registers); the
// NMAX = 16 general path stays rolled (unrolling it cost minutes of ptxas and huge spills).
#define KANTOR_BK_UNROLL _Pragma("unroll (::kantor::birkhoff::unroll_factor<NMAX>)")
#else
#define KANTOR_BK_HD inline
#define KANTOR_BK_UNROLL
#endif

namespace kantor::birkhoff {

constexpr int kMaxN = 16;
template <int NMAX>
constexpr int unroll_factor = NMAX <= 4 ? 64 : 1;
constexpr double kLog2e = 1.4426950408889634;
constexpr double kLn2 = 0.6931471805599453;
/// DeepSeek's additive constant in every denominator (and after the softmax).
constexpr double kDeepSeekEps = 1e-6;

/// Status of one forward matrix. Statuses >= kInvalidInput are invalid inputs (their output is
/// 0), each naming its reason; kNoProjection: valid logits whose pattern of finite entries has no
/// total support (Newton only: no diagonal scaling of exp(R) is doubly stochastic).
enum MatrixStatus : int {
  kOk = 0,
  kNoProjection = 1,
  kInvalidInput = 2,  // a NaN or +inf logit
  kEmptyRow = 3,      // a row of all -inf
  kEmptyColumn = 4,   // a column of all -inf
  kAllNegInf = 5,     // every entry -inf
};
KANTOR_BK_HD bool is_invalid_status(int st) { return st >= kInvalidInput; }

template <class F>
struct Num;
template <>
struct Num<float> {
  static constexpr float tiny() { return 1e-30f; }  // pivots/denominators floor
  static constexpr float min_normal() { return 1.17549435e-38f; }
  static constexpr float eps() { return 1.1920929e-7f; }
  static constexpr float floor() { return 1e-30f; }  // Sinkhorn denominators (scale_step)
};
template <>
struct Num<double> {
  static constexpr double tiny() { return 1e-280; }
  static constexpr double min_normal() { return 2.2250738585072014e-308; }
  static constexpr double eps() { return 2.220446049250313e-16; }
  static constexpr double floor() { return 1e-300; }
};

// float on the device: the special-function unit's approximations (ex2/lg2/rcp/rsqrt .approx,
// ~1-2 ulp; flush-to-zero is harmless here: every value that could be denormal is a weight
// below 2^-126 of a row that also holds 1). Accuracy is checked against float64 in the tests.
KANTOR_BK_HD float bk_exp2(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}
KANTOR_BK_HD double bk_exp2(double x) { return exp2(x); }
KANTOR_BK_HD float bk_log2(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return log2f(x);
#endif
}
KANTOR_BK_HD double bk_log2(double x) { return log2(x); }
/// 1 / x.
KANTOR_BK_HD float bk_rcp(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return 1.0f / x;
#endif
}
KANTOR_BK_HD double bk_rcp(double x) { return 1.0 / x; }
/// 1 / sqrt(x).
KANTOR_BK_HD float bk_rsqrt(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return 1.0f / sqrtf(x);
#endif
}
KANTOR_BK_HD double bk_rsqrt(double x) { return 1.0 / sqrt(x); }
KANTOR_BK_HD float bk_exp(float x) { return expf(x); }
KANTOR_BK_HD double bk_exp(double x) { return exp(x); }
KANTOR_BK_HD float bk_abs(float x) { return fabsf(x); }
KANTOR_BK_HD double bk_abs(double x) { return fabs(x); }
// fmax/fmin (one instruction on the device); with one NaN operand they return the other.
KANTOR_BK_HD float bk_max(float a, float b) { return fmaxf(a, b); }
KANTOR_BK_HD double bk_max(double a, double b) { return fmax(a, b); }
KANTOR_BK_HD float bk_min(float a, float b) { return fminf(a, b); }
KANTOR_BK_HD double bk_min(double a, double b) { return fmin(a, b); }
template <class F>
KANTOR_BK_HD F neg_inf() {
  return -std::numeric_limits<F>::infinity();
}
template <class F>
KANTOR_BK_HD bool is_nan_or_pos_inf(F x) {
  return !(x < std::numeric_limits<F>::infinity());  // true for NaN and +inf
}

/// Reciprocals of two positive numbers with one SFU reciprocal: 1/(d0 d1) times the other.
/// Guard: only when d0 d1 stays well inside the normal range (else under/overflow); otherwise
/// two reciprocals.
template <class F>
KANTOR_BK_HD void rcp2(F d0, F d1, F& r0, F& r1) {
  const F p = d0 * d1;
  if (p > F(1e-30) && p < F(1e30)) {
    const F r = bk_rcp(p);
    r0 = r * d1;
    r1 = r * d0;
  } else {
    r0 = bk_rcp(d0);
    r1 = bk_rcp(d1);
  }
}

/// Packed upper-triangle index of (j, l), j <= l, in an (NMAX-1)-dimensional symmetric matrix.
template <int NMAX>
KANTOR_BK_HD constexpr int packed(int j, int l) {
  return j * (NMAX - 1) - j * (j - 1) / 2 + (l - j);
}

/// Highest set bit of a nonzero mask below 2^n.
KANTOR_BK_HD int highest_bit(unsigned m, int n) {
  int h = 0;
  for (int j = 0; j < n; ++j)
    if ((m >> j) & 1u) h = j;
  return h;
}

/// Pattern of the finite entries: rowm[i] bit j set when L_ij > -inf. Returns the validity:
/// kInvalidInput (a NaN or +inf), kAllNegInf, kEmptyRow, kEmptyColumn (a row / column of all -inf:
/// no matrix with that pattern has unit marginals), else kOk. The rare path of the -inf checks
/// (only matrices whose entry sum is not finite come here); loops indexed by loop counters only.
template <int NMAX, class F>
KANTOR_BK_HD int pattern_masks(const F* L, int n, unsigned* rowm) {
  bool bad = false, empty_row = false;
  unsigned cols = 0;
  for (int i = 0; i < NMAX; ++i) {
    if (i >= n) break;
    unsigned m = 0;
    for (int j = 0; j < NMAX; ++j) {
      if (j >= n) break;
      const F v = L[i * NMAX + j];
      bad |= is_nan_or_pos_inf(v);
      if (v > neg_inf<F>()) m |= 1u << j;
    }
    rowm[i] = m;
    cols |= m;
    empty_row |= m == 0u;
  }
  if (bad) return kInvalidInput;
  if (cols == 0u) return kAllNegInf;
  if (empty_row) return kEmptyRow;
  if (cols != (1u << n) - 1u) return kEmptyColumn;
  return kOk;
}

/// For a pattern without empty rows or columns (rowm from pattern_masks): kNoProjection when it
/// has no total support (no perfect matching, or a finite entry on no perfect matching: then no
/// diagonal scaling of exp(R) is doubly stochastic and Newton's dual has no minimizer), else kOk
/// and *pin = the gauges: one column per connected component of the bipartite graph of finite
/// entries (its highest index), except the component holding column n-1 (the reduced dual's
/// fixed coordinate). Each component is a block of the permuted block-diagonal pattern and adds a
/// null direction (its column indicator) to the Hessian diag(c) - T^T T; pinning one column per
/// block removes them. Method: a perfect matching by BFS augmenting paths, then the row graph
/// i -> (row matched to column j) for every finite (i, j); the pattern has total support iff every
/// such edge lies on a cycle (an alternating cycle through (i, j)), i.e. the target reaches i
/// (Warshall closure on bitmasks); the strongly connected components are then the blocks.
template <int NMAX>
KANTOR_BK_HD int total_support_gauges(const unsigned* rowm, int n, unsigned* pin) {
  int mrow[NMAX], mcol[NMAX];
  for (int k = 0; k < NMAX; ++k) mrow[k] = mcol[k] = -1;
  for (int r = 0; r < n; ++r) {
    int par[NMAX], queue[NMAX];
    unsigned seen = 0;
    int qh = 0, qt = 0, found = -1;
    queue[qt++] = r;
    while (qh < qt && found < 0) {
      const int u = queue[qh++];
      for (int j = 0; j < n; ++j) {
        if (!((rowm[u] >> j) & 1u) || ((seen >> j) & 1u)) continue;
        seen |= 1u << j;
        par[j] = u;
        if (mcol[j] < 0) {
          found = j;
          break;
        }
        queue[qt++] = mcol[j];  // each row enters the queue at most once: qt <= n
      }
    }
    if (found < 0) return kNoProjection;  // Hall's condition fails: no perfect matching
    for (int j = found;;) {  // flip the augmenting path r -> ... -> found
      const int u = par[j], pj = mrow[u];
      mcol[j] = u;
      mrow[u] = j;
      if (u == r) break;
      j = pj;
    }
  }
  unsigned reach[NMAX];
  for (int i = 0; i < n; ++i) {
    unsigned a = 1u << i;
    for (int j = 0; j < n; ++j)
      if ((rowm[i] >> j) & 1u) a |= 1u << mcol[j];
    reach[i] = a;
  }
  for (int k = 0; k < n; ++k)
    for (int i = 0; i < n; ++i)
      if ((reach[i] >> k) & 1u) reach[i] |= reach[k];
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (((rowm[i] >> j) & 1u) && !((reach[mcol[j]] >> i) & 1u)) return kNoProjection;
  unsigned done = 0, p = 0;
  for (int i = 0; i < n; ++i) {
    if ((done >> i) & 1u) continue;
    done |= reach[i];
    unsigned cols = 0;
    for (int k = 0; k < n; ++k)
      if ((reach[i] >> k) & 1u) cols |= rowm[k];
    const int h = highest_bit(cols, n);
    if (h != n - 1) p |= 1u << h;
  }
  *pin = p;
  return kOk;
}

/// Gauges of the implicit backward's system from the support of P (entries > 0; where P
/// underflowed the blocks are those of the support): one column per connected component of the
/// bipartite graph of positive entries (its highest index) except the component with column n-1,
/// and every other column without mass. 0 (nothing to pin) when every entry is positive.
/// The caller checks first that some entry is not positive (the rare path).
template <int NMAX, class F>
KANTOR_BK_HD unsigned support_gauges(const F* P, int n) {
  unsigned rowm[NMAX];
  for (int i = 0; i < NMAX; ++i) {
    rowm[i] = 0;
    if (i >= n) continue;
    for (int j = 0; j < n; ++j)
      if (P[i * NMAX + j] > F(0)) rowm[i] |= 1u << j;
  }
  unsigned done = 0, covered = 0, pin = 0;
  for (int r = 0; r < n; ++r) {
    if (((done >> r) & 1u) || rowm[r] == 0u) continue;
    unsigned rows = 1u << r, cols = rowm[r];
    for (bool grow = true; grow;) {
      grow = false;
      for (int i = 0; i < NMAX; ++i) {
        if (i >= n) break;
        if (!((rows >> i) & 1u) && (rowm[i] & cols)) {
          rows |= 1u << i;
          cols |= rowm[i];
          grow = true;
        }
      }
    }
    done |= rows;
    covered |= cols;
    const int h = highest_bit(cols, n);
    if (h != n - 1) pin |= 1u << h;
  }
  for (int j = 0; j < n - 1; ++j)
    if (!((covered >> j) & 1u)) pin |= 1u << j;
  return pin;
}

/// Fixes the pinned coordinates (bits of pin below m) of the packed SPD system A x = rhs: row and
/// column zeroed, diagonal 1, rhs 0, so x_j = 0 exactly and the other coordinates decouple (the
/// Cholesky factor keeps the zeros).
template <int NMAX, class F>
KANTOR_BK_HD void apply_pins(F* A, F* rhs, int m, unsigned pin) {
  KANTOR_BK_UNROLL
  for (int j = 0; j < NMAX - 1; ++j) {
    if (j >= m) break;
    if (!((pin >> j) & 1u)) continue;
    KANTOR_BK_UNROLL
    for (int l = 0; l < NMAX - 1; ++l) {
      if (l >= m) break;
      A[l < j ? packed<NMAX>(l, j) : packed<NMAX>(j, l)] = F(0);
    }
    A[packed<NMAX>(j, j)] = F(1);
    rhs[j] = F(0);
  }
}

/// Checks the logits and shifts them into the log2 domain: L = (R - max R) * log2(e).
/// Returns a MatrixStatus: invalid inputs (pattern_masks), kNoProjection (no total support) or
/// kOk with *pin = the gauge columns of the pattern's blocks (total_support_gauges; 0 for a
/// pattern of one block, every matrix without -inf included).
template <int NMAX, class F>
KANTOR_BK_HD int prepare_log2(F* L, int n, unsigned* pin) {
  F mx = neg_inf<F>();
  F sum = F(0);
  KANTOR_BK_UNROLL
  for (int i = 0; i < NMAX; ++i) {
    if (i >= n) break;
    KANTOR_BK_UNROLL
    for (int j = 0; j < NMAX; ++j) {
      if (j >= n) break;
      const F v = L[i * NMAX + j];
      sum += v;
      mx = bk_max(mx, v);
    }
  }
  *pin = 0u;
  // Fast check: a finite sum means no NaN and no infinity (full pattern, one block). Otherwise
  // (a -inf, NaN, +inf, or an overflowing sum) the exact pattern checks decide.
  if (!(sum > neg_inf<F>() && sum < std::numeric_limits<F>::infinity())) {
    unsigned rowm[NMAX];
    int st = pattern_masks<NMAX>(L, n, rowm);
    if (st == kOk) st = total_support_gauges<NMAX>(rowm, n, pin);
    if (st != kOk) return st;
  }
  KANTOR_BK_UNROLL
  for (int i = 0; i < NMAX; ++i) {
    if (i >= n) break;
    KANTOR_BK_UNROLL
    for (int j = 0; j < NMAX; ++j) {
      if (j >= n) break;
      L[i * NMAX + j] = (L[i * NMAX + j] - mx) * F(kLog2e);
    }
  }
  return kOk;
}

/// Scaled kernel of the row softmax: K_ij = 2^(L_ij + bK_j - m_i), m_i = max_j (L_ij + bK_j)
/// (so every row with mass has max entry 1), built at a reference bK. For b near bK the row
/// softmax at b is T_ij = K_ij v_j / sum_k K_ik v_k with v_j = 2^(b_j - bK_j): n exp2 per
/// evaluation instead of n^2. Returns msum = sum_i m_i (rows of all -inf: m_i = 0, K row 0).
template <int NMAX, class F>
KANTOR_BK_HD F build_kernel(const F* L, const F* bK, int n, F* K) {
  F msum = F(0);
  KANTOR_BK_UNROLL
  for (int i = 0; i < NMAX; ++i) {
    if (i >= n) break;
    F m = neg_inf<F>();
    KANTOR_BK_UNROLL
    for (int j = 0; j < NMAX; ++j)
      if (j < n) m = bk_max(m, L[i * NMAX + j] + bK[j]);
    // Hazard: a row of all -inf would give exp2(-inf - (-inf)) = NaN. With m = 0 its entries
    // are exp2(-inf) = 0: the row has no mass.
    m = m > neg_inf<F>() ? m : F(0);
    msum += m;
    KANTOR_BK_UNROLL
    for (int j = 0; j < NMAX; ++j)
      if (j < n) K[i * NMAX + j] = bk_exp2(L[i * NMAX + j] + bK[j] - m);
  }
  return msum;
}

/// Largest |b_j - bK_j| for which evaluations reuse K: with it every row sum s_i lies in
/// [2^-d, n 2^d] and the product of all n row sums stays inside the float range (one reciprocal
/// and one log2 per evaluation below).
KANTOR_BK_HD int kernel_drift_limit(int n) { return n <= 4 ? 16 : (n <= 8 ? 8 : 2); }

/// Evaluation at column potentials b (log2 units) from the scaled kernel K (built at bK):
///   T_ij = K_ij v_j / s_i (s_i = sum_j K_ij v_j), c_j = sum_i T_ij,
///   psi = sum_i (m_i + log2 s_i) - sum_j b_j (the reduced dual, log2 units),
///   H = diag(c) - T^T T on the first n-1 coordinates (packed upper triangle).
/// With kWriteT, T is written into T (the output) and c, H, psi are not needed.
/// psi_scale bounds |terms| of psi for the line search's rounding slack.
template <int NMAX, bool kWriteT, class F>
KANTOR_BK_HD void scaled_eval(const F* K, F msum, const F* b, const F* bK, int n, F* c, F* H,
                              F& psi, F& psi_scale, F* T) {
  constexpr int kH = (NMAX - 1) * NMAX / 2;
  F v[NMAX];
  psi = msum;
  psi_scale = bk_abs(msum);
  KANTOR_BK_UNROLL
  for (int j = 0; j < NMAX; ++j) {
    if (j >= n) break;
    v[j] = bk_exp2(b[j] - bK[j]);
    psi -= b[j];
    psi_scale += bk_abs(b[j]);
  }
  // Row sums; all in [2^-d, n 2^d] (d = kernel_drift_limit) or 0 for an empty row, which gets
  // s = 1 so the reciprocal and the log stay finite (its T row is 0 anyway).
  F sr[NMAX], pre[NMAX];
  F prod = F(1);
  KANTOR_BK_UNROLL
  for (int i = 0; i < NMAX; ++i) {
    if (i >= n) break;
    F si = F(0);
    KANTOR_BK_UNROLL
    for (int j = 0; j < NMAX; ++j)
      if (j < n) si += K[i * NMAX + j] * v[j];
    sr[i] = si > F(0) ? si : F(1);
    pre[i] = prod;
    prod *= sr[i];
  }
  // One reciprocal and one log2 for all rows: 1/s_i = prefix_i * suffix_i / prod.
  const F rprod = bk_rcp(prod);
  if (!kWriteT) {
    const F lg = bk_log2(prod);
    psi += lg;
    psi_scale += bk_abs(lg);
  }
  F inv[NMAX];
  if (NMAX <= 4) {
    F suf = rprod;
    KANTOR_BK_UNROLL
    for (int i = NMAX - 1; i >= 0; --i) {
      if (i >= n) continue;
      inv[i] = pre[i] * suf;
      suf *= sr[i];
    }
  } else {
    // The prefix/suffix products carry ~2n roundings: with n = 16 the rows then sum to 1 only
    // to ~1e-6 each (measured Err 1.00002e-5 on the H200). One reciprocal per row instead.
    for (int i = 0; i < n; ++i) inv[i] = bk_rcp(sr[i]);
  }
  if (!kWriteT) {
    KANTOR_BK_UNROLL
    for (int j = 0; j < NMAX; ++j) c[j] = F(0);
    KANTOR_BK_UNROLL
    for (int k = 0; k < kH; ++k) H[k] = F(0);
  }
  F glast[NMAX];  // sum_i t_ij t_i,n-1 for j < n-1
  KANTOR_BK_UNROLL
  for (int j = 0; j < NMAX; ++j) glast[j] = F(0);
  KANTOR_BK_UNROLL
  for (int i = 0; i < NMAX; ++i) {
    if (i >= n) break;
    F e[NMAX];
    KANTOR_BK_UNROLL
    for (int j = 0; j < NMAX; ++j) {
      if (j >= n) break;
      e[j] = K[i * NMAX + j] * v[j] * inv[i];
      if (kWriteT)
        T[i * NMAX + j] = e[j];
      else
        c[j] += e[j];
    }
    if (!kWriteT) {
      // Row i adds -t t^T off the diagonal; the products with the dropped column n-1 go to glast.
      KANTOR_BK_UNROLL
      for (int j = 0; j < NMAX - 1; ++j) {
        if (j >= n - 1) break;
        glast[j] += e[j] * e[n - 1];
        KANTOR_BK_UNROLL
        for (int l = j + 1; l < NMAX - 1; ++l)
          if (l < n - 1) H[packed<NMAX>(j, l)] -= e[j] * e[l];
      }
    }
  }
  if (!kWriteT) {
    // Diagonal: sum_i t_ij (1 - t_ij) = sum_i t_ij sum_{k != j} t_ik (rows of T sum to 1)
    // = sum_{k != j} G_jk with G = T^T T, a sum of nonnegative terms. 1 - t_ij cancels
    // catastrophically when t_ij ~ 1 (near-permutation P at large logit scales), which made the
    // fp32 Hessian singular and Newton stall at Err ~ 1e-4. The G_jk are the accumulated
    // off-diagonals (-H_jk) and glast: no per-row diagonal work (for n = 4, 9 instead of ~36
    // FADD/FFMA per evaluation).
    KANTOR_BK_UNROLL
    for (int j = 0; j < NMAX - 1; ++j) {
      if (j >= n - 1) break;
      F g = glast[j];
      KANTOR_BK_UNROLL
      for (int k = 0; k < NMAX - 1; ++k) {
        if (k >= n - 1) break;
        if (k < j) g -= H[packed<NMAX>(k, j)];
        if (k > j) g -= H[packed<NMAX>(j, k)];
      }
      H[packed<NMAX>(j, j)] = g;
    }
  }
}

/// Solves A x = rhs for the SPD (m x m, m = n-1) matrix A given as packed upper triangle (it is
/// overwritten by its Cholesky factor), in place in rhs. Pivots are floored at
/// tiny * (1 + max diagonal) + 64 eps max diagonal: rounding, or an A made singular by an input
/// the callers do not screen (a backward on a P without total support), must not give sqrt(<= 0);
/// the floor keeps the result finite (the caller clamps the step).
template <int NMAX, class F>
KANTOR_BK_HD void cholesky_solve(F* A, F* rhs, int m) {
  // Inner loops over k < j: unrolled (NMAX <= 4) they keep a fixed trip count with the guard
  // k < j inside. An early `break` there made nvcc unroll the inner loop before the outer one
  // fixed j: the loop stayed rolled and indexed the register arrays dynamically (a 12-way
  // select per access: ~100 extra SASS instructions per solve on sm_90).
  constexpr bool kRolled = unroll_factor<NMAX> == 1;
  F dmax = F(0);
  KANTOR_BK_UNROLL
  for (int j = 0; j < NMAX - 1; ++j)
    if (j < m) dmax = bk_max(dmax, A[packed<NMAX>(j, j)]);
  const F floor = Num<F>::tiny() * (F(1) + dmax) + F(64) * Num<F>::eps() * dmax;
  KANTOR_BK_UNROLL
  for (int j = 0; j < NMAX - 1; ++j) {
    if (j >= m) break;
    F d = A[packed<NMAX>(j, j)];
    KANTOR_BK_UNROLL
    for (int k = 0; k < NMAX - 1; ++k) {
      if (kRolled && k >= j) break;
      if (k < j) d -= A[packed<NMAX>(k, j)] * A[packed<NMAX>(k, j)];
    }
    d = bk_max(d, floor);  // guard: rank deficiency / rounding must not give sqrt(<=0)
    const F inv = bk_rsqrt(d);
    A[packed<NMAX>(j, j)] = inv;  // the diagonal of R is kept inverted: solves multiply
    KANTOR_BK_UNROLL
    for (int l = 0; l < NMAX - 1; ++l) {
      if (l <= j || l >= m) continue;
      F v = A[packed<NMAX>(j, l)];
      KANTOR_BK_UNROLL
      for (int k = 0; k < NMAX - 1; ++k) {
        if (kRolled && k >= j) break;
        if (k < j) v -= A[packed<NMAX>(k, j)] * A[packed<NMAX>(k, l)];
      }
      A[packed<NMAX>(j, l)] = v * inv;  // stores R with A = R^T R, R upper
    }
  }
  // R^T y = rhs (forward), then R x = y (backward).
  KANTOR_BK_UNROLL
  for (int j = 0; j < NMAX - 1; ++j) {
    if (j >= m) break;
    F v = rhs[j];
    KANTOR_BK_UNROLL
    for (int k = 0; k < NMAX - 1; ++k) {
      if (kRolled && k >= j) break;
      if (k < j) v -= A[packed<NMAX>(k, j)] * rhs[k];
    }
    rhs[j] = v * A[packed<NMAX>(j, j)];
  }
  KANTOR_BK_UNROLL
  for (int jj = NMAX - 2; jj >= 0; --jj) {
    if (jj >= m) continue;
    F v = rhs[jj];
    KANTOR_BK_UNROLL
    for (int k = 0; k < NMAX - 1; ++k) {
      if (k <= jj || k >= m) continue;
      v -= A[packed<NMAX>(jj, k)] * rhs[k];
    }
    rhs[jj] = v * A[packed<NMAX>(jj, jj)];
  }
}

struct NewtonResult {
  int status;
  int iterations;
};

/// Converged projection by Newton on the reduced dual psi(b) (b_{n-1} = 0), in place: on entry
/// L holds the raw logits, on exit the row-softmax T of the final b (rows sum to 1 to rounding,
/// columns to the Newton tolerance). tol_stop: stop when |c - 1|_1 <= tol_stop; tol_accept: also
/// stop when |c - 1|_1 <= tol_accept and the last step did not halve it (fp32 noise floor).
template <int NMAX, class F>
KANTOR_BK_HD NewtonResult newton_project(F* L, int n, F tol_stop, F tol_accept, int max_iter) {
  unsigned pin = 0;
  NewtonResult res{prepare_log2<NMAX>(L, n, &pin), 0};
  if (res.status != kOk) return res;
  constexpr int kH = (NMAX - 1) * NMAX / 2;
  F b[NMAX];
  // Start: a_i = -max_j L_ij, then a log-domain column step b_j = -LSE_i (L_ij + a_i), then the
  // shift b <- b - b_{n-1} (the dual is invariant to it; Newton fixes b_{n-1} = 0).
  {
    F a[NMAX];
    KANTOR_BK_UNROLL
    for (int i = 0; i < NMAX; ++i) {
      if (i >= n) break;
      F m = neg_inf<F>();
      KANTOR_BK_UNROLL
      for (int j = 0; j < NMAX; ++j)
        if (j < n) m = bk_max(m, L[i * NMAX + j]);
      // a_i = -max_j L_ij (row maximum at 0): as good a start as a full row LSE here (measured
      // 3.06 vs 3.00 Newton steps per warp on N(0,1)) and it saves 16 exp2 + 4 log2.
      a[i] = m > neg_inf<F>() ? -m : F(0);  // guard: an all -inf row keeps a_i = 0, not +inf
    }
    KANTOR_BK_UNROLL
    for (int j = 0; j < NMAX; ++j) {
      if (j >= n) break;
      F m = neg_inf<F>();
      KANTOR_BK_UNROLL
      for (int i = 0; i < NMAX; ++i)
        if (i < n) m = bk_max(m, L[i * NMAX + j] + a[i]);
      F s = F(0);
      if (m > neg_inf<F>()) {
        KANTOR_BK_UNROLL
        for (int i = 0; i < NMAX; ++i)
          if (i < n) s += bk_exp2(L[i * NMAX + j] + a[i] - m);
      }
      // Guard: an all -inf column (no projection) keeps b_j = 0 rather than +inf.
      b[j] = m > neg_inf<F>() ? -(m + bk_log2(s)) : F(0);
    }
    const F shift = b[n - 1];
    KANTOR_BK_UNROLL
    for (int j = 0; j < NMAX; ++j)
      if (j < n) b[j] -= shift;
  }
  F c[NMAX], H[kH], psi, psi_scale;
  F K[NMAX * NMAX], bK[NMAX];
  KANTOR_BK_UNROLL
  for (int j = 0; j < NMAX; ++j) bK[j] = b[j];
  F msum = build_kernel<NMAX>(L, bK, n, K);
  const F drift_limit = F(kernel_drift_limit(n));
  {
    // Three Sinkhorn sweeps in the linear domain on K (no exponentials: 2 n^2 FMAs and 2n
    // reciprocals each): u_i = 1 / (K v)_i, v_j = 1 / (K^T u)_j, then b_j += log2(v_j / v_{n-1}).
    // Measured on N(0,1) (float, CPU): Newton steps per warp (max over 32 matrices) 3.2 -> 2.15.
    // Guard: sums are floored at 2^-60 (a column without mass would give 1/0); the resulting
    // large b_j moves are handled by the kernel rebuild below.
    F u[NMAX], v[NMAX];
    KANTOR_BK_UNROLL
    for (int j = 0; j < NMAX; ++j) v[j] = F(1);
    for (int sweep = 0; sweep < 3; ++sweep) {
      KANTOR_BK_UNROLL
      for (int i = 0; i < NMAX; ++i) {
        if (i >= n) break;
        F r = F(0);
        KANTOR_BK_UNROLL
        for (int j = 0; j < NMAX; ++j)
          if (j < n) r += K[i * NMAX + j] * v[j];
        u[i] = bk_rcp(bk_max(r, F(8.673617379884035e-19)));
      }
      KANTOR_BK_UNROLL
      for (int j = 0; j < NMAX; ++j) {
        if (j >= n) break;
        F cs = F(0);
        KANTOR_BK_UNROLL
        for (int i = 0; i < NMAX; ++i)
          if (i < n) cs += K[i * NMAX + j] * u[i];
        v[j] = bk_rcp(bk_max(cs, F(8.673617379884035e-19)));
      }
    }
    const F ref = bk_log2(v[n - 1]);
    F drift = F(0);
    KANTOR_BK_UNROLL
    for (int j = 0; j < NMAX; ++j) {
      if (j >= n) break;
      b[j] += bk_log2(v[j]) - ref;
      drift = bk_max(drift, bk_abs(b[j] - bK[j]));
    }
    if (!(drift <= drift_limit)) {
      KANTOR_BK_UNROLL
      for (int j = 0; j < NMAX; ++j) bK[j] = b[j];
      msum = build_kernel<NMAX>(L, bK, n, K);
    }
  }
  scaled_eval<NMAX, false>(K, msum, b, bK, n, c, H, psi, psi_scale, static_cast<F*>(nullptr));
  auto col_err = [&](const F* cc) {
    F e = F(0);
    KANTOR_BK_UNROLL
    for (int j = 0; j < NMAX; ++j)
      if (j < n) e += bk_abs(cc[j] - F(1));
    return e;
  };
  F err = col_err(c);
  // Max step per iteration in log2 units: a trust bound that keeps b finite when the problem
  // has no solution (the dual is then unbounded below and Newton would step to infinity).
  const F kMaxStep = F(32);
  for (int it = 0; it < max_iter; ++it) {
    if (!(err > tol_stop)) break;
    // Newton direction: ln2 (diag(c) - T^T T) d = -(c - 1), on the first n-1 coordinates
    // (H holds diag(c) - T^T T, accumulated row by row without cancellation).
    F d[NMAX];
    F g_dot_d = F(0);
    KANTOR_BK_UNROLL
    for (int j = 0; j < NMAX - 1; ++j)
      if (j < n - 1) d[j] = (F(1) - c[j]) * F(1.0 / kLn2);
    // Reducible pattern: one fixed column per extra block (the Hessian is singular otherwise).
    if (pin) apply_pins<NMAX>(H, d, n - 1, pin);
    cholesky_solve<NMAX>(H, d, n - 1);
    KANTOR_BK_UNROLL
    for (int j = 0; j < NMAX - 1; ++j) {
      if (j >= n - 1) break;
      // Clamp (NaN-safe: max/min return the non-NaN operand) to the trust bound.
      d[j] = bk_min(bk_max(d[j], -kMaxStep), kMaxStep);
      g_dot_d += (c[j] - F(1)) * d[j];
    }
    d[n - 1] = F(0);
    // Backtracking (Armijo) line search on psi; the slack absorbs psi's rounding near the optimum,
    // where the predicted decrease is below float resolution and full steps are right. The
    // evaluation writes c, H in place (the old ones are not needed once d is known), so only
    // b and psi of the current point are kept.
    F t = F(1);
    bool accepted = false;
    F b0[NMAX];
    KANTOR_BK_UNROLL
    for (int j = 0; j < NMAX; ++j) b0[j] = b[j];
    const F psi0 = psi, scale0 = psi_scale;
    for (int ls = 0; ls < 12; ++ls) {
      F drift = F(0);
      KANTOR_BK_UNROLL
      for (int j = 0; j < NMAX; ++j) {
        if (j >= n) break;
        b[j] = b0[j] + t * d[j];
        drift = bk_max(drift, bk_abs(b[j] - bK[j]));
      }
      // Far from the kernel's reference point the row sums leave their safe range: rebuild K.
      if (!(drift <= drift_limit)) {
        KANTOR_BK_UNROLL
        for (int j = 0; j < NMAX; ++j) bK[j] = b[j];
        msum = build_kernel<NMAX>(L, bK, n, K);
      }
      scaled_eval<NMAX, false>(K, msum, b, bK, n, c, H, psi, psi_scale, static_cast<F*>(nullptr));
      const F slack = F(8) * Num<F>::eps() * (scale0 + psi_scale);
      if (psi <= psi0 + F(1e-4) * t * g_dot_d + slack) {
        accepted = true;
        break;
      }
      t *= F(0.5);
    }
    ++res.iterations;
    // No decrease possible at this precision: stop at the last (tiny-step) trial point.
    if (!accepted) break;
    const F errn = col_err(c);
    const bool stalled = errn > F(0.5) * err;
    err = errn;
    if (stalled && !(err > tol_accept)) break;
  }
  // Output: the row softmax at the final b. Rows sum to 1 up to rounding; columns to err.
  F T[NMAX * NMAX];
  scaled_eval<NMAX, true>(K, msum, b, bK, n, c, H, psi, psi_scale, T);
  KANTOR_BK_UNROLL
  for (int k = 0; k < NMAX * NMAX; ++k) L[k] = T[k];
  return res;
}

/// One normalization step Y = diag(1/d) X (rows) or X diag(1/d) (columns), d = sums + add.
/// With add = 0 (exact Sinkhorn) the denominator is floored at the smallest normal number: a
/// row/column with no mass would otherwise give 0/0 = NaN; it stays 0.
template <int NMAX, class F>
KANTOR_BK_HD void normalize_step(F* X, int n, bool rows, F add, F* dens) {
  KANTOR_BK_UNROLL
  for (int a = 0; a < NMAX; ++a) {
    if (a >= n) break;
    F s = F(0);
    KANTOR_BK_UNROLL
    for (int k = 0; k < NMAX; ++k)
      if (k < n) s += rows ? X[a * NMAX + k] : X[k * NMAX + a];
    const F d = bk_max(s + add, Num<F>::min_normal());
    if (dens) dens[a] = d;
    const F inv = bk_rcp(d);
    KANTOR_BK_UNROLL
    for (int k = 0; k < NMAX; ++k) {
      if (k >= n) continue;
      if (rows)
        X[a * NMAX + k] *= inv;
      else
        X[k * NMAX + a] *= inv;
    }
  }
}

/// Description of a truncated (fixed-iteration) map as a sequence of normalization steps.
struct TruncatedMap {
  bool deepseek;   // init = row softmax + 1e-6, denominators + 1e-6
  bool row_first;  // order of each sweep (DeepSeek: column step right after the softmax)
  int iterations;  // sweeps (DeepSeek: repeat)
  // Number of normalization steps after the initialization.
  KANTOR_BK_HD int steps() const { return deepseek ? 2 * iterations - 1 : 2 * iterations; }
  // Whether step s (0-based) normalizes rows.
  KANTOR_BK_HD bool step_is_rows(int s) const {
    if (deepseek) return (s % 2) == 1;  // col, row, col, row, ..., col
    return row_first ? (s % 2) == 0 : (s % 2) == 1;
  }
  template <class F>
  KANTOR_BK_HD F add() const {
    return deepseek ? F(kDeepSeekEps) : F(0);
  }
};

/// Initialization X0 of a truncated map from raw logits (in place).
///   Sinkhorn: X0 = exp(R - max R) (per-matrix max: cancels in every normalization, keeps
///   column-first correct). DeepSeek: X0 = row softmax(R) + 1e-6.
/// Returns a MatrixStatus: kOk, or an invalid input (pattern_masks: NaN / +inf logits, a row,
/// column or matrix of all -inf) with X left unchanged.
template <int NMAX, class F>
KANTOR_BK_HD int truncated_init(F* X, int n, const TruncatedMap& map) {
  F mx = neg_inf<F>();
  F sum = F(0);
  KANTOR_BK_UNROLL
  for (int k = 0; k < NMAX * NMAX; ++k) {
    if ((k / NMAX) >= n || (k % NMAX) >= n) continue;
    sum += X[k];
    mx = bk_max(mx, X[k]);
  }
  // Fast check as in prepare_log2: a finite sum has no NaN and no infinity.
  if (!(sum > neg_inf<F>() && sum < std::numeric_limits<F>::infinity())) {
    unsigned rowm[NMAX];
    const int st = pattern_masks<NMAX>(X, n, rowm);
    if (st != kOk) return st;
  }
  KANTOR_BK_UNROLL
  for (int i = 0; i < NMAX; ++i) {
    if (i >= n) break;
    F m = mx;
    if (map.deepseek) {
      m = neg_inf<F>();
      KANTOR_BK_UNROLL
      for (int j = 0; j < NMAX; ++j)
        if (j < n) m = bk_max(m, X[i * NMAX + j]);
    }
    // Guard (kept although empty rows are refused above): exp(-inf - (-inf)) = NaN.
    const bool empty = !(m > neg_inf<F>());
    F s = F(0);
    KANTOR_BK_UNROLL
    for (int j = 0; j < NMAX; ++j) {
      if (j >= n) break;
      // DeepSeek: accurate exp (its map is matched to 1e-6); Sinkhorn: the SFU exp2.
      const F e = empty          ? F(0)
                  : map.deepseek ? bk_exp(X[i * NMAX + j] - m)
                                 : bk_exp2((X[i * NMAX + j] - m) * F(kLog2e));
      X[i * NMAX + j] = e;
      s += e;
    }
    if (map.deepseek) {
      // s >= 1 unless the row is empty (then the softmax row is taken as 0).
      const F inv = empty ? F(0) : bk_rcp(s);
      KANTOR_BK_UNROLL
      for (int j = 0; j < NMAX; ++j)
        if (j < n) X[i * NMAX + j] = X[i * NMAX + j] * inv + F(kDeepSeekEps);
    }
  }
  return kOk;
}

/// One scaling step of P = diag(u) K diag(v). Row step: P_i <- P_i / (rowsum_i + add) is
/// u_i <- 1 / ((K v)_i + add / u_i); the state keeps den = 1/u (den_i <- (K v)_i + add den_i), so a
/// step costs n^2 FMAs and n reciprocals. Column step likewise with K^T u, v, den_v.
/// Guard: every denominator is at least 1e-30 (Num::floor): a row or column without mass, or one
/// whose sum underflows, would give 1/0 = inf and then inf * 0 = NaN. With the floor u, v <= 1e30
/// and u_i K_ij v_j stays finite because K_ij v_j <= den_i. Sinkhorn (no add) starts the sum at
/// the floor, d = 1e-30 + sum_k K_ak v_k: the floor is the first FMA's addend (no instruction,
/// where max(sum, 1e-30) cost n per step), and d equals the sum to rounding once the sum exceeds
/// 2^-75 (float; 2^-946 in double). DeepSeek takes max(sum + add den, 1e-30).
template <int NMAX, bool kRows, bool kAdd, class F>
KANTOR_BK_HD void scale_step(const F* K, F* u, F* v, F* den_u, F* den_v, int n, F add) {
  F* w = kRows ? u : v;
  F* den = kRows ? den_u : den_v;
  KANTOR_BK_UNROLL
  for (int a = 0; a < NMAX; ++a) {
    if (a >= n) break;
    F s = kAdd ? F(0) : Num<F>::floor();
    KANTOR_BK_UNROLL
    for (int k = 0; k < NMAX; ++k)
      if (k < n) s += kRows ? K[a * NMAX + k] * v[k] : K[k * NMAX + a] * u[k];
    const F d = kAdd ? bk_max(s + add * den[a], Num<F>::floor()) : s;
    den[a] = d;
    w[a] = bk_rcp(d);
  }
}

/// Forward of a truncated map, in place (X: logits in, P out), as diagonal scalings of X0.
template <int NMAX, class F>
KANTOR_BK_HD int truncated_forward(F* X, int n, const TruncatedMap& map) {
  const int st = truncated_init<NMAX>(X, n, map);
  if (st != kOk) return st;
  F u[NMAX], v[NMAX], du[NMAX], dv[NMAX];
  KANTOR_BK_UNROLL
  for (int k = 0; k < NMAX; ++k) u[k] = v[k] = du[k] = dv[k] = F(1);
  const F add = map.template add<F>();
  if (map.deepseek) {
    // column step, then (repeat - 1) x (row step, column step)
    scale_step<NMAX, false, true>(X, u, v, du, dv, n, add);
    for (int it = 1; it < map.iterations; ++it) {
      scale_step<NMAX, true, true>(X, u, v, du, dv, n, add);
      scale_step<NMAX, false, true>(X, u, v, du, dv, n, add);
    }
  } else if (map.row_first) {
    for (int it = 0; it < map.iterations; ++it) {
      scale_step<NMAX, true, false>(X, u, v, du, dv, n, add);
      scale_step<NMAX, false, false>(X, u, v, du, dv, n, add);
    }
  } else {
    for (int it = 0; it < map.iterations; ++it) {
      scale_step<NMAX, false, false>(X, u, v, du, dv, n, add);
      scale_step<NMAX, true, false>(X, u, v, du, dv, n, add);
    }
  }
  KANTOR_BK_UNROLL
  for (int i = 0; i < NMAX; ++i) {
    if (i >= n) break;
    KANTOR_BK_UNROLL
    for (int j = 0; j < NMAX; ++j)
      if (j < n) X[i * NMAX + j] = u[i] * X[i * NMAX + j] * v[j];
  }
  return st;
}

/// Exact reverse-mode gradient of a truncated map: R (logits) and G = dL/dP in, dL/dR out (in G).
/// No per-step storage: the input of step s is recomputed from X0 for every s (O(steps^2)
/// normalization steps, all on chip). Step backward, Y = X / d (d = sums + add):
///   dX = (dY - (dY . Y summed along the normalized direction)) / d.
template <int NMAX, class F>
KANTOR_BK_HD void truncated_backward(const F* R, F* G, int n, const TruncatedMap& map) {
  F X0[NMAX * NMAX];
  KANTOR_BK_UNROLL
  for (int k = 0; k < NMAX * NMAX; ++k) X0[k] = R[k];
  if (truncated_init<NMAX>(X0, n, map) != kOk) {
    KANTOR_BK_UNROLL
    for (int k = 0; k < NMAX * NMAX; ++k) G[k] = F(0);
    return;
  }
  const int steps = map.steps();
  const F add = map.template add<F>();
  for (int s = steps - 1; s >= 0; --s) {
    F X[NMAX * NMAX];
    KANTOR_BK_UNROLL
    for (int k = 0; k < NMAX * NMAX; ++k) X[k] = X0[k];
    for (int r = 0; r < s; ++r)
      normalize_step<NMAX>(X, n, map.step_is_rows(r), add, static_cast<F*>(nullptr));
    F d[NMAX];
    const bool rows = map.step_is_rows(s);
    normalize_step<NMAX>(X, n, rows, add, d);  // X is now Y_s
    KANTOR_BK_UNROLL
    for (int a = 0; a < NMAX; ++a) {
      if (a >= n) break;
      F dot = F(0);
      KANTOR_BK_UNROLL
      for (int k = 0; k < NMAX; ++k) {
        if (k >= n) continue;
        const int idx = rows ? a * NMAX + k : k * NMAX + a;
        dot += G[idx] * X[idx];
      }
      // Guard: a floored denominator (no mass) means the step is locally constant (output 0).
      const F inv = d[a] > Num<F>::min_normal() ? bk_rcp(d[a]) : F(0);
      KANTOR_BK_UNROLL
      for (int k = 0; k < NMAX; ++k) {
        if (k >= n) continue;
        const int idx = rows ? a * NMAX + k : k * NMAX + a;
        G[idx] = (G[idx] - dot) * inv;
      }
    }
  }
  // Through the initialization. Sinkhorn: X0 = exp(R - max), dR = dX0 * X0 (the max cancels).
  // DeepSeek: X0 = S + eps, S = row softmax: dR_ij = S_ij (dX0_ij - sum_k dX0_ik S_ik).
  KANTOR_BK_UNROLL
  for (int i = 0; i < NMAX; ++i) {
    if (i >= n) break;
    if (!map.deepseek) {
      KANTOR_BK_UNROLL
      for (int j = 0; j < NMAX; ++j)
        if (j < n) G[i * NMAX + j] *= X0[i * NMAX + j];
    } else {
      F dot = F(0);
      KANTOR_BK_UNROLL
      for (int j = 0; j < NMAX; ++j)
        if (j < n) dot += G[i * NMAX + j] * (X0[i * NMAX + j] - F(kDeepSeekEps));
      KANTOR_BK_UNROLL
      for (int j = 0; j < NMAX; ++j)
        if (j < n) G[i * NMAX + j] = (X0[i * NMAX + j] - F(kDeepSeekEps)) * (G[i * NMAX + j] - dot);
    }
  }
}

/// Implicit backward at P (rows sums r, column sums c, not necessarily 1), in place in G:
///   Gam = G o P, mu_r = Gam 1, mu_c = Gam^T 1,
///   (diag(c) - P^T diag(1/r) P) y = mu_c - P^T diag(1/r) mu_r  (y_{n-1} = 0),
///   x = diag(1/r) (mu_r - P y),  dL/dR = P o (G - x 1^T - 1 y^T).
template <int NMAX, class F>
KANTOR_BK_HD void implicit_backward(const F* P, F* G, int n) {
  constexpr int kH = (NMAX - 1) * NMAX / 2;
  F rinv[NMAX], mur[NMAX], c[NMAX], y[NMAX], A[kH];
  F pmin = F(1);  // smallest entry: > 0 means one block (nothing to pin)
  KANTOR_BK_UNROLL
  for (int j = 0; j < NMAX; ++j) {
    c[j] = F(0);
    y[j] = F(0);
  }
  KANTOR_BK_UNROLL
  for (int k = 0; k < kH; ++k) A[k] = F(0);
  KANTOR_BK_UNROLL
  for (int i = 0; i < NMAX; ++i) {
    if (i >= n) break;
    F r = F(0), mu = F(0);
    KANTOR_BK_UNROLL
    for (int j = 0; j < NMAX; ++j) {
      if (j >= n) break;
      const F p = P[i * NMAX + j];
      const F gam = G[i * NMAX + j] * p;
      pmin = bk_min(pmin, p);
      r += p;
      mu += gam;
      c[j] += p;
      y[j] += gam;  // mu_c accumulates here, rhs built below
    }
    // Guard: an all-zero row of P (no mass) has no multiplier; 1/0 would poison the system.
    rinv[i] = r > Num<F>::min_normal() ? bk_rcp(r) : F(0);
    mur[i] = mu;
  }
  // A = diag(c) - P^T diag(1/r) P, rhs = mu_c - P^T diag(1/r) mu_r on the first n-1 columns.
  KANTOR_BK_UNROLL
  for (int i = 0; i < NMAX; ++i) {
    if (i >= n) break;
    const F w = rinv[i];
    const F wm = w * mur[i];
    int k = 0;
    KANTOR_BK_UNROLL
    for (int j = 0; j < NMAX - 1; ++j) {
      const F pij = j < n ? P[i * NMAX + j] : F(0);
      if (j < n - 1) y[j] -= pij * wm;
      KANTOR_BK_UNROLL
      for (int l = j; l < NMAX - 1; ++l) {
        if (j < n - 1 && l < n - 1) A[k] -= w * pij * P[i * NMAX + l];
        ++k;
      }
    }
  }
  KANTOR_BK_UNROLL
  for (int j = 0; j < NMAX - 1; ++j)
    if (j < n - 1) A[packed<NMAX>(j, j)] += c[j];
  // Same gauges as the forward: a P whose support splits into blocks (a reducible pattern) makes
  // A singular in one direction per extra block; fix one y per block (x, y are determined up to
  // these shifts, which leave dL/dR unchanged).
  if (!(pmin > F(0))) {  // also for NaN: the slow path then pins what has no mass
    const unsigned pin = support_gauges<NMAX>(P, n);
    if (pin) apply_pins<NMAX>(A, y, n - 1, pin);
  }
  cholesky_solve<NMAX>(A, y, n - 1);
  y[n - 1] = F(0);
  KANTOR_BK_UNROLL
  for (int i = 0; i < NMAX; ++i) {
    if (i >= n) break;
    F py = F(0);
    KANTOR_BK_UNROLL
    for (int j = 0; j < NMAX; ++j)
      if (j < n) py += P[i * NMAX + j] * y[j];
    const F x = rinv[i] * (mur[i] - py);
    KANTOR_BK_UNROLL
    for (int j = 0; j < NMAX; ++j)
      if (j < n) G[i * NMAX + j] = P[i * NMAX + j] * (G[i * NMAX + j] - x - y[j]);
  }
}

/// Err = |P 1 - 1|_1 + |P^T 1 - 1|_1 of one stored matrix, accumulated in double whatever F is
/// (the certificate rule of docs/numerics.md: the reported error is that of the output as
/// stored, not of a float32 evaluation of it; the n^2 + 2n double additions leave a rounding of
/// at most (2n + 2) 2^-53 per sum, far below any tolerance).
template <int NMAX, class F>
KANTOR_BK_HD double marginal_error(const F* P, int n) {
  double c[NMAX];
  KANTOR_BK_UNROLL
  for (int j = 0; j < NMAX; ++j) c[j] = 0.0;
  double err = 0.0;
  KANTOR_BK_UNROLL
  for (int i = 0; i < NMAX; ++i) {
    if (i >= n) break;
    double r = 0.0;
    KANTOR_BK_UNROLL
    for (int j = 0; j < NMAX; ++j) {
      if (j >= n) break;
      r += double(P[i * NMAX + j]);
      c[j] += double(P[i * NMAX + j]);
    }
    err += bk_abs(r - 1.0);
  }
  KANTOR_BK_UNROLL
  for (int j = 0; j < NMAX; ++j)
    if (j < n) err += bk_abs(c[j] - 1.0);
  return err;
}

}  // namespace kantor::birkhoff
