// Ground costs of a Problem: every cost here compares point features by the squared Euclidean
// distance, optionally plus a label term (docs/numerics.md section 1).
//
//   SqEuclidean     C_ij = c |x_i - y_j|^2
//   LabelAugmented  C_ij = c |x_i - y_j|^2 + c_w W[l_i, l_j]
//
// LabelAugmented is the ground cost of dataset distances (OTDD): labels l_i of the source and
// l_j of the target index one label space shared by both sides (the union of their classes, so
// that the self-terms OT(A, A) and OT(B, B) of a divergence use the same table W).
#pragma once

#include <cstdint>
#include <type_traits>
#include <variant>

#include "kantor/view.hpp"

namespace kantor {

/// C_ij = scale |x_i - y_j|^2. Views may be host or device memory.
template <class T>
struct SqEuclidean {
  MatrixView<const T> x;  ///< source points, n x d
  MatrixView<const T> y;  ///< target points, m x d
  double scale = 1.0;     ///< c > 0
};

/// C_ij = features.scale |x_i - y_j|^2 + table_scale W[labels_x[i], labels_y[j]].
template <class T>
struct LabelAugmented {
  SqEuclidean<T> features;
  VectorView<const std::int32_t> labels_x;  ///< n labels in [0, L)
  VectorView<const std::int32_t> labels_y;  ///< m labels in [0, L)
  MatrixView<const double> table;           ///< W, L x L, finite and >= 0 (host or device)
  double table_scale = 1.0;                 ///< c_w >= 0
};

/// The cost of a Problem: one of the nouns above.
template <class T>
using Cost = std::variant<SqEuclidean<T>, LabelAugmented<T>>;

/// The squared-Euclidean part of any cost (the whole of a SqEuclidean one).
template <class T>
const SqEuclidean<T>& features(const Cost<T>& c) {
  if (const auto* l = std::get_if<LabelAugmented<T>>(&c)) return l->features;
  return std::get<SqEuclidean<T>>(c);
}
template <class T>
SqEuclidean<T>& features(Cost<T>& c) {
  if (auto* l = std::get_if<LabelAugmented<T>>(&c)) return l->features;
  return std::get<SqEuclidean<T>>(c);
}

/// The name of a cost's kind: "sqeuclidean" or "label-augmented".
template <class T>
const char* cost_name(const Cost<T>& c) {
  return std::holds_alternative<SqEuclidean<T>>(c) ? "sqeuclidean" : "label-augmented";
}

static_assert(std::is_trivially_copyable<SqEuclidean<float>>::value, "costs are PODs");
static_assert(std::is_trivially_copyable<LabelAugmented<double>>::value, "costs are PODs");

}  // namespace kantor
