// Oracle::atom_pair_maxima on the GPU: the multiscale screen's second stage (docs/multiscale.md),
// the largest f_i + g_j - c |x_i - y_j|^2 of each given pair of atoms over its points of positive
// weight, float64 on the caller's coordinates, with the rounding model of lib/core/certificate.hpp
// (maxima_cost_scale, maxima_allowance). Plain C++ declarations; the stream is an opaque
// cudaStream_t.
#pragma once

#include <cstdint>

namespace kantor::cuda {

template <class T>
struct PairMaxima {
  const double* x = nullptr;  ///< n x d, row-major, device
  const double* y = nullptr;  ///< m x d
  const double* a = nullptr;  ///< weights (only their sign matters)
  const double* b = nullptr;
  const T* f = nullptr;
  const T* g = nullptr;
  std::int64_t n = 0, m = 0;
  int d = 0;
  double cost_scale = 1;           ///< c (the launcher applies maxima_cost_scale)
  std::int64_t atom = 0;           ///< points per atom, <= kMaxPairAtom
  const std::int32_t* pairs = nullptr;  ///< 2 K atom indices (I, J), device
  std::int64_t count = 0;          ///< K
  double* out = nullptr;           ///< K doubles, device
};

/// The largest atom (in points) the kernel takes: a pair's rows x keys index is 32-bit.
constexpr std::int64_t kMaxPairAtom = 4096;

/// One block per pair (grid-stride); no early stop: out[k] is the full maximum plus its
/// allowance (-inf without a pair of positive weight). Asynchronous on `stream`.
template <class T>
void launch_atom_pair_maxima(const PairMaxima<T>& p, void* stream);

}  // namespace kantor::cuda
