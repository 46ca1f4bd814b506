// certificate_exp (lib/core/certificate.hpp), the CPU certificate's vectorizable exp, against long
// double expl: relative error <= kCertificateExpUlps u on its whole range, at random points, at
// the reduction's boundaries (k changes), and at the ends of the range. A wrong low-order
// coefficient, a wrong ln2 split or a wrong exponent field moves results by far more than 4 u.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "lib/core/certificate.hpp"

namespace kantor::testing {
namespace {

double ulps(double z) {
  const long double ref = std::exp(static_cast<long double>(z));
  const long double got = certificate_exp(z);
  return static_cast<double>(std::fabs(got - ref) / ref) / 0x1.0p-53;
}

TEST(CertificateExp, WithinItsUlpBoundOnTheWholeRange) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> wide(kCertificateExpMin, kCertificateExpMax);
  std::uniform_real_distribution<double> near0(-80.0, 10.0);  // where certificates evaluate
  double worst = 0;
  for (int i = 0; i < (1 << 20); ++i) {
    worst = std::max(worst, ulps(wide(rng)));
    worst = std::max(worst, ulps(near0(rng)));
  }
  // The reduction's boundaries (z log2 e at half-integers), 0, and the range's ends.
  std::vector<double> special = {0.0, -0.0, 1e-300, -1e-300, kCertificateExpMin,
                                 kCertificateExpMax, -64.0, 64.0, 1.0, -1.0};
  for (int k = -1021; k <= 1022; ++k) {
    const double z = (k + 0.5) / 1.44269504088896340736;
    for (double dz : {-1e-12, 0.0, 1e-12})
      if (z + dz >= kCertificateExpMin && z + dz <= kCertificateExpMax) special.push_back(z + dz);
  }
  for (double z : special) worst = std::max(worst, ulps(z));
  EXPECT_LE(worst, kCertificateExpUlps) << "worst relative error in units of 2^-53";
  EXPECT_GT(worst, 0.0);  // not accidentally the library exp in long double
  ::testing::Test::RecordProperty("worst_ulps", std::to_string(worst));
}

TEST(CertificateExp, ExactScalesAndFiniteEnds) {
  EXPECT_EQ(certificate_exp(0.0), 1.0);
  EXPECT_TRUE(std::isfinite(certificate_exp(kCertificateExpMax)));
  EXPECT_GE(certificate_exp(kCertificateExpMin), 0x1.0p-1022);  // normal
  // e^(k ln2) ~ 2^k for integers k: the exponent field is right across the range.
  for (int k = -1000; k <= 1000; k += 37) {
    const double z = k * 0.69314718055994530942;
    EXPECT_NEAR(certificate_exp(z) / std::ldexp(1.0, k), 1.0, 1e-13) << k;
  }
}

// certificate_exp2f (the CPU fp32 certificate's 2^z) against long double exp2l: relative error
// <= kCertificateExp2fU units of 2^-24 on [-126, 127] (random points, the rounding boundaries of
// k = round(z), integers, the ends), and exact powers of two at integers.
TEST(CertificateExp2f, WithinItsBoundOnTheWholeRange) {
  auto units = [](float z) {
    const long double ref = std::exp2(static_cast<long double>(z));
    const long double got = certificate_exp2f(z);
    return static_cast<double>(std::fabs(got - ref) / ref) / 0x1.0p-24;
  };
  std::mt19937_64 rng(12);
  std::uniform_real_distribution<float> wide(-126.0f, 127.0f), near0(-40.0f, 20.0f);
  double worst = 0;
  for (int i = 0; i < (1 << 20); ++i) {
    worst = std::max(worst, units(wide(rng)));
    worst = std::max(worst, units(near0(rng)));
  }
  for (int k = -126; k <= 126; ++k) {
    EXPECT_EQ(certificate_exp2f(float(k)), std::ldexp(1.0f, k)) << k;
    for (const float z : {float(k) + 0.5f, std::nextafter(float(k) + 0.5f, -1e9f),
                          std::nextafter(float(k) + 0.5f, 1e9f), float(k) - 0.25f})
      if (z >= -126.0f && z <= 127.0f) worst = std::max(worst, units(z));
  }
  worst = std::max(worst, units(127.0f));
  EXPECT_LE(worst, kCertificateExp2fU) << "worst relative error in units of 2^-24";
  EXPECT_GT(worst, 0.0);
  ::testing::Test::RecordProperty("worst_units", std::to_string(worst));
}

}  // namespace
}  // namespace kantor::testing
