// String forms and parsing of the shared enums; float -> bfloat16 rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kantor/error.hpp"
#include "kantor/sinkhorn.hpp"
#include "kantor/types.hpp"

namespace kantor {
namespace {

TEST(Types, RoundTripStrings) {
  for (Backend b : {Backend::kCpu, Backend::kCuda, Backend::kAuto})
    EXPECT_EQ(parse_backend(to_string(b)), b);
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kBf16, Precision::kFp64})
    EXPECT_EQ(parse_precision(to_string(p)), p);
  for (Schedule s : {Schedule::kAlternating, Schedule::kSymmetric})
    EXPECT_EQ(parse_schedule(to_string(s)), s);
  EXPECT_EQ(to_string(MemorySpace::kHost), "host");
  EXPECT_EQ(to_string(MemorySpace::kDevice), "device");
}

TEST(Types, ParseErrorsNameTheOption) {
  try {
    parse_backend("gpu", "--backend");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--backend"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("'gpu'"), std::string::npos);
  }
  EXPECT_THROW(parse_precision("FP32"), InvalidArgument);
  EXPECT_THROW(parse_schedule("jacobi"), InvalidArgument);
}

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Reference rounding: the nearest of the two bfloat16 neighbours, ties to even, in double.
TEST(Types, Bfloat16RoundsToNearestEven) {
  for (std::uint32_t hi : {0x3F80u, 0x3F81u, 0xC2F7u, 0x0001u, 0x7F7Eu}) {
    for (std::uint32_t lo : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) {
      const float x = from_bits((hi << 16) | lo);
      const double down = from_bits(hi << 16), up = from_bits((hi + 1) << 16);
      double expect;
      const double dd = std::abs(double(x) - down), du = std::abs(up - double(x));
      if (dd < du)
        expect = down;
      else if (du < dd)
        expect = up;
      else
        expect = (hi & 1u) ? up : down;
      EXPECT_EQ(double(to_float(to_bfloat16(x))), expect) << std::hex << hi << " " << lo;
    }
  }
  EXPECT_TRUE(std::isnan(to_float(to_bfloat16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(to_float(to_bfloat16(std::numeric_limits<float>::infinity())),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(to_float(to_bfloat16(0.0f)), 0.0f);
}

}  // namespace
}  // namespace kantor
