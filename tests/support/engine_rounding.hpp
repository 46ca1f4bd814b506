// The coordinates as the CUDA engine's tensor-core precisions store them: an independent
// reference for the engine's bit-level rounding (TF32 in arithmetic; bf16 by the engine's own
// function, itself checked against hand-computed bit patterns in tests/cuda).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kantor/types.hpp"
#include "oracles/cuda/bf16_round.hpp"

namespace kantor::testing {

// float -> TF32, round to nearest with ties away from zero (cvt.rna.tf32.f32). Normal floats keep
// 11 significant bits (frexp, std::round: ties away from zero); subnormals keep multiples of
// 2^-136 (the same 10 stored mantissa bits). Inf/NaN pass through.
inline float round_tf32(float x) {
  if (!std::isfinite(x) || x == 0.f) return x;
  if (std::abs(x) < std::numeric_limits<float>::min())
    return float(std::ldexp(std::round(std::ldexp(double(x), 136)), -136));
  int e = 0;
  const double mant = std::frexp(double(x), &e);  // x = mant 2^e, 0.5 <= |mant| < 1
  return float(std::ldexp(std::round(std::ldexp(mant, 11)), e - 11));
}

// The centred float coordinate v as the engine of precision p stores it: TF32-rounded on tf32,
// bf16-rounded (ties to even, the engine's own function) on bf16, unchanged otherwise.
inline float engine_round(Precision p, float v) {
  return p == Precision::kTf32 ? round_tf32(v) : p == Precision::kBf16 ? bf16::round(v) : v;
}

// Replaces x (n x d) and y (m x d) by the values the engine of precision p computes with, in
// double: float(v - center) rounded by engine_round, plus the center (the midpoint of the joint
// bounding box, lib/costs/problem_data.cpp). Inputs must already be float values.
inline void round_like_engine(std::vector<double>* x, std::vector<double>* y, std::int64_t d,
                              Precision p) {
  const std::int64_t n = std::int64_t(x->size()) / d, m = std::int64_t(y->size()) / d;
  for (std::int64_t k = 0; k < d; ++k) {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (std::int64_t i = 0; i < n; ++i)
      lo = std::min(lo, (*x)[std::size_t(i * d + k)]), hi = std::max(hi, (*x)[std::size_t(i * d + k)]);
    for (std::int64_t j = 0; j < m; ++j)
      lo = std::min(lo, (*y)[std::size_t(j * d + k)]), hi = std::max(hi, (*y)[std::size_t(j * d + k)]);
    const double center = 0.5 * (lo + hi);
    for (auto* v : {x, y})
      for (std::size_t i = std::size_t(k); i < v->size(); i += std::size_t(d))
        (*v)[i] = double(engine_round(p, float((*v)[i] - center))) + center;
  }
}

}  // namespace kantor::testing
