// The row pass's vector kernels on the AVX-512 path (64-byte vectors, F + DQ, with AVX2 + FMA),
// compiled through target attributes whatever the build's -march (see row_pass_kernels.inc for
// the ODR rule). Only on x86-64 with GCC or Clang; elsewhere the path reports itself absent.
#include <cstdint>

#include "lib/cpu/row_pass_isa.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define KANTOR_RP_NS isa_avx512
#define KANTOR_RP_TARGET __attribute__((target("avx512f,avx512dq,avx2,fma")))
#define KANTOR_RP_BYTES 64
#define KANTOR_RP_FMA 2
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#include "lib/cpu/row_pass_kernels.inc"
#pragma GCC diagnostic pop

namespace kantor::cpu::detail {
const IsaKernels<float>* avx512_kernels_f32() { return &isa_avx512::kTable<float>; }
const IsaKernels<double>* avx512_kernels_f64() { return &isa_avx512::kTable<double>; }
}  // namespace kantor::cpu::detail
#else
namespace kantor::cpu::detail {
const IsaKernels<float>* avx512_kernels_f32() { return nullptr; }
const IsaKernels<double>* avx512_kernels_f64() { return nullptr; }
}  // namespace kantor::cpu::detail
#endif
