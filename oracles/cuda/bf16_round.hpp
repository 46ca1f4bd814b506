// float -> bf16 rounding of the CUDA engine's bf16 precision (header-only plain C++, so that the
// tests of CPU-only builds can check it and reproduce the engine's inputs exactly).
#pragma once

#include <cstdint>
#include <cstring>

namespace kantor::bf16 {

/// float -> bf16 bit pattern with round-to-nearest, ties to even (the rounding of
/// cvt.rn.bf16.f32): keep 7 mantissa bits; a carry out of the mantissa increments the exponent,
/// and overflow rounds to +-inf. Guard: a NaN is returned as a quiet NaN of the same sign;
/// without it, a NaN whose payload sits in the low 16 bits would round to +-inf.
inline std::uint16_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return std::uint16_t(u >> 16);
}

/// The bf16 value with bit pattern b, as a float (exact).
inline float to_float(std::uint16_t b) {
  const std::uint32_t u = std::uint32_t(b) << 16;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

/// The bf16 value nearest x (ties to even), as a float.
inline float round(float x) { return to_float(bits(x)); }

}  // namespace kantor::bf16
