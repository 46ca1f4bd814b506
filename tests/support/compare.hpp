// Element-wise comparisons with per-entry bounds that report the worst entry.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace kantor::testing {

/// |actual_i - expected_i| <= bound_i for every i (NaN fails). Reports the worst ratio.
template <class A>
::testing::AssertionResult all_close(const std::vector<A>& actual,
                                     const std::vector<double>& expected,
                                     const std::vector<double>& bound) {
  if (actual.size() != expected.size() || bound.size() != expected.size())
    return ::testing::AssertionFailure()
           << "size mismatch: " << actual.size() << " vs " << expected.size();
  std::size_t worst = 0;
  double worst_ratio = -1;
  bool ok = true;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double diff = std::abs(double(actual[i]) - expected[i]);
    const double ratio = diff / bound[i];
    if (!(diff <= bound[i])) ok = false;
    if (!(ratio <= worst_ratio)) {  // NaN ratios become the worst
      worst_ratio = ratio;
      worst = i;
    }
  }
  if (std::getenv("KANTOR_TEST_SHOW_MARGIN"))  // how close to the bound the worst entry came
    std::fprintf(stderr, "[margin] worst |diff| / bound = %.3g (entry %zu of %zu)\n", worst_ratio,
                 worst, actual.size());
  if (ok) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(17);
  os << "entry " << worst << " of " << actual.size() << ": actual " << double(actual[worst])
     << ", expected " << expected[worst] << ", |diff| "
     << std::abs(double(actual[worst]) - expected[worst]) << " > bound " << bound[worst];
  return ::testing::AssertionFailure() << os.str();
}

/// Same with one bound for every entry.
template <class A>
::testing::AssertionResult all_close(const std::vector<A>& actual,
                                     const std::vector<double>& expected, double bound) {
  return all_close(actual, expected, std::vector<double>(expected.size(), bound));
}

/// |actual - expected| <= bound for scalars, with both values in the message.
inline ::testing::AssertionResult near(double actual, double expected, double bound) {
  if (std::getenv("KANTOR_TEST_SHOW_MARGIN"))
    std::fprintf(stderr, "[margin] |diff| / bound = %.3g\n", std::abs(actual - expected) / bound);
  if (std::abs(actual - expected) <= bound) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(17);
  os << "actual " << actual << ", expected " << expected << ", |diff| "
     << std::abs(actual - expected) << " > bound " << bound;
  return ::testing::AssertionFailure() << os.str();
}

}  // namespace kantor::testing
