// The certificate passes on the GPU (lib/core/certificate.hpp has the math): one side, rows of the
// query cloud against every key, float64 with exact differences of the caller's coordinates.
// Plain C++ declarations; the stream is an opaque cudaStream_t.
#pragma once

#include <cstdint>

#include "lib/core/certificate.hpp"

namespace kantor::cuda {

template <class T>
struct CertifySide {
  const double* queries = nullptr;  ///< nq x d, row-major, the caller's coordinates (uncentred)
  const double* keys = nullptr;     ///< nk x d
  const double* query_w = nullptr;  ///< normalized weights (double)
  const double* key_w = nullptr;
  const T* query_pot = nullptr;     ///< potentials (f for the row side)
  const T* key_pot = nullptr;
  std::int64_t nq = 0, nk = 0;
  int d = 0;
  double cost_scale = 1, eps = 1;
  /// 1 / rho of the rows' side: 0 for a strict marginal, else the rows' targets are
  /// w exp(-p / rho) (unbalanced OT).
  double rho_inv = 0;
  /// LabelAugmented: C_ij += pair[query_labels[i] * classes + key_labels[j]] (c_w W, double;
  /// the column side gets W^T). Null = squared-Euclidean.
  const std::int32_t* query_labels = nullptr;
  const std::int32_t* key_labels = nullptr;
  const double* pair = nullptr;
  int classes = 0;
  /// Block list (kantor::BlockList with row tiles of kRowTile = 128 rows, device copies): row
  /// tile r sums over the key tiles of runs [run_ptr[r], run_ptr[r+1]) only. Null = every key.
  const std::int64_t* run_ptr = nullptr;
  const std::int32_t* runs = nullptr;
  int key_tile = 0;
  /// kCertifyOutputs doubles in device memory, accumulated (not overwritten): error, mass,
  /// weighted t, max t (as the bits of a non-negative double; start from 0), sum P C,
  /// sum P (f + g), sum of the rows' weights, the targets' rounding exposure, the fp32 path's own
  /// rounding bound (kantor::CertificateSide, in that order).
  double* out = nullptr;
  /// The fp32 evaluation (certify_fast_applies): the pairs in float32 on coordinates relative to
  /// each row tile's first point, with a rigorous bound of its rounding in out[8] (the model is
  /// in certify.cu). Float64 otherwise.
  bool fast = false;
  /// The fp32 path's plan statistics (sum P C, sum P (f + g)): the row side needs them, the
  /// column side not.
  bool stats = true;
  /// The sum of the key side's weights (the fp32 bound's term for negative exponents).
  double key_mass = 1;
  /// The fp32 path: each row of positive weight also writes next[i] = p_i - relax eps ln S_i
  /// (next_update, lib/core/certificate.hpp); a row whose S_i is not positive and finite adds
  /// +inf to out[8]. Null = nothing written. With statistics: the row side of
  /// Oracle::certify_kept_next (relax 1) and of Oracle::update_f_certified; without: the column
  /// side as Oracle::update_g_certified (with out_next).
  T* next = nullptr;
  /// With next and out_next, the side of the new pair (next against the same keys; with
  /// statistics, its plan statistics too) accumulated into out_next (kCertifyOutputs doubles,
  /// zeroed first): update_f_certified's and update_g_certified's new pair.
  double relax = 1;
  double* out_next = nullptr;
};

/// Doubles per side in CertifySide::out.
constexpr int kCertifyOutputs = 9;
/// Whether the fp32 path can evaluate a side: float potentials, a squared-Euclidean cost,
/// d <= kFastCertificateMaxDim (lib/core/certificate.hpp).
template <class T>
bool certify_fast_applies(const CertifySide<T>& p) {
  return sizeof(T) == 4 && p.pair == nullptr && p.d >= 1 && p.d <= kFastCertificateMaxDim;
}

/// Rows per block of the certificate kernel: the row tile its block lists must have.
constexpr int kCertifyRows = 128;

/// Asynchronous on `stream`; out must be zeroed first (memset_async).
void launch_certify_side(const CertifySide<float>& p, void* stream);
void launch_certify_side(const CertifySide<double>& p, void* stream);

/// The widest dimension the exact-difference certificate serves on a dense schedule; wider ones
/// run CertifyGemm (the same rule as the gemm-fp64 passes, docs/cuda-engine.md section 7).
constexpr int kCertifyGemmMinDim = 17;

/// Both sides of a dense float64 certificate from float64 score blocks: the clouds anchored at
/// the queries' mean (x' = x - o, y' = y - o in double, kept on the device with their norms),
/// then per chunk of query rows S = Y' X'^T by DGEMM and sq_ij = |x'_i|^2 + |y'_j|^2 - 2 S_ji,
/// each score read once for the row sums (a warp per row) and once for the column sums (a
/// thread per key, accumulated across chunks). The rounding of the expansion is inside the
/// bound (certificate_pair_expanded, lib/core/certificate.hpp). Owns a cuBLAS handle and its
/// buffers; built once per oracle on first use.
class CertifyGemm {
 public:
  /// x: n x d, y: m x d, row-major doubles on the device (y may be x: a self-problem).
  CertifyGemm(void* stream, const double* x, const double* y, std::int64_t n, std::int64_t m,
              int d);
  ~CertifyGemm();
  CertifyGemm(const CertifyGemm&) = delete;
  CertifyGemm& operator=(const CertifyGemm&) = delete;
  /// `rows` as for launch_certify_side (queries x, keys y: the data fields are not read; the
  /// anchored copies are), `cols` its swapped side (only its rho_inv and out are read); both
  /// outs zeroed first. No block lists, no fp32 path.
  void run(const CertifySide<float>& rows, const CertifySide<float>& cols);
  void run(const CertifySide<double>& rows, const CertifySide<double>& cols);

 private:
  template <class T>
  void run_impl(const CertifySide<T>& rows, const CertifySide<T>& cols);
  void release() noexcept;
  void* stream_;
  void* handle_ = nullptr;
  std::int64_t n_, m_, chunk_;
  int d_;
  int segments_ = 1;        // row segments of the column sums
  double* xs_ = nullptr;    // n x d anchored
  double* ys_ = nullptr;    // m x d anchored (xs_ for a self-problem)
  double* xn_ = nullptr;    // |x'_i|^2
  double* yn_ = nullptr;    // |y'_j|^2
  double* s_ = nullptr;     // chunk x m scores (column-major m x chunk)
  double* cacc_ = nullptr;  // 5 m column accumulators (CertificateRow fields) per segment
};

}  // namespace kantor::cuda
