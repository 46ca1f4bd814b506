// The row pass's vector kernels on the AVX2 + FMA path (32-byte vectors), compiled through
// target attributes whatever the build's -march (see row_pass_kernels.inc for the ODR rule).
// Only on x86-64 with GCC or Clang; elsewhere the path reports itself absent.
#include <cstdint>

#include "lib/cpu/row_pass_isa.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define KANTOR_RP_NS isa_avx2
#define KANTOR_RP_TARGET __attribute__((target("avx2,fma")))
#define KANTOR_RP_BYTES 32
#define KANTOR_RP_FMA 1
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#include "lib/cpu/row_pass_kernels.inc"
#pragma GCC diagnostic pop

namespace kantor::cpu::detail {
const IsaKernels<float>* avx2_kernels_f32() { return &isa_avx2::kTable<float>; }
const IsaKernels<double>* avx2_kernels_f64() { return &isa_avx2::kTable<double>; }
}  // namespace kantor::cpu::detail
#else
namespace kantor::cpu::detail {
const IsaKernels<float>* avx2_kernels_f32() { return nullptr; }
const IsaKernels<double>* avx2_kernels_f64() { return nullptr; }
}  // namespace kantor::cpu::detail
#endif
