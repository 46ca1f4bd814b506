// validate() with what its scans already computed, for the problem preparation
// (lib/costs/problem_data.cpp), which would otherwise sum the weights again.
#pragma once

#include "kantor/problem.hpp"

namespace kantor::detail {

/// validate(p), also giving each side's weight total as it sums them (fixed chunks of 2^16
/// weights in double, added in chunk order: prepare's weight_total, bit for bit); 1 for uniform
/// weights, NaN for device weights. Either pointer may be null. scan_clouds = false skips the
/// coordinates' element-by-element scan (detail::validate_clouds_checked).
template <class T>
void validate_with_totals(const Problem<T>& p, double* total_a, double* total_b,
                          bool scan_clouds = true);

}  // namespace kantor::detail
