#include "kantor/types.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "kantor/error.hpp"

namespace kantor {

std::string to_string(Backend b) {
  switch (b) {
    case Backend::kCpu: return "cpu";
    case Backend::kCuda: return "cuda";
    case Backend::kAuto: return "auto";
  }
  return "?";
}

std::string format_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

std::string to_string(KernelChoice k) {
  switch (k) {
    case KernelChoice::kAuto: return "auto";
    case KernelChoice::kExact: return "exact";
    case KernelChoice::kMma: return "mma";
    case KernelChoice::kTf32Chunked: return "tf32-chunked";
    case KernelChoice::kGemm: return "gemm";
    case KernelChoice::kGemmFp32: return "gemm-fp32";
    case KernelChoice::kGemm3xTf32: return "gemm-3xtf32";
    case KernelChoice::kGemmFp64: return "gemm-fp64";
    case KernelChoice::kExpanded: return "expanded";
  }
  return "?";
}

namespace {
constexpr KernelChoice kAllKernelChoices[] = {
    KernelChoice::kAuto,      KernelChoice::kExact,    KernelChoice::kMma,
    KernelChoice::kTf32Chunked, KernelChoice::kGemm,   KernelChoice::kGemmFp32,
    KernelChoice::kGemm3xTf32, KernelChoice::kGemmFp64, KernelChoice::kExpanded};
}  // namespace

std::string kernel_choice_names(const std::string& sep) {
  std::string out;
  for (KernelChoice k : kAllKernelChoices) out += (out.empty() ? "" : sep) + to_string(k);
  return out;
}

KernelChoice parse_kernel_choice(const std::string& s, const std::string& what) {
  for (KernelChoice k : kAllKernelChoices)
    if (s == to_string(k)) return k;
  throw InvalidArgument(what + ": unknown value '" + s + "' (expected one of " +
                        kernel_choice_names(", ") + ")");
}

std::string to_string(MemorySpace s) { return s == MemorySpace::kHost ? "host" : "device"; }

std::string to_string(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kTf32: return "tf32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp64: return "fp64";
  }
  return "?";
}

Backend parse_backend(const std::string& s, const std::string& what) {
  if (s == "cpu") return Backend::kCpu;
  if (s == "cuda") return Backend::kCuda;
  if (s == "auto") return Backend::kAuto;
  throw InvalidArgument(what + ": unknown value '" + s + "' (expected cpu, cuda or auto)");
}

Precision parse_precision(const std::string& s, const std::string& what) {
  if (s == "fp32") return Precision::kFp32;
  if (s == "tf32") return Precision::kTf32;
  if (s == "bf16") return Precision::kBf16;
  if (s == "fp64") return Precision::kFp64;
  throw InvalidArgument(what + ": unknown value '" + s + "' (expected fp32, tf32, bf16 or fp64)");
}

bfloat16 to_bfloat16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  if (std::isnan(x)) return {std::uint16_t((u >> 16) | 0x40u)};  // keep it a (quiet) NaN
  const std::uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);      // round to nearest even
  return {std::uint16_t((u + rounding) >> 16)};
}

float to_float(bfloat16 x) {
  const std::uint32_t u = std::uint32_t(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace kantor
