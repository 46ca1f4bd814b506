// The row pass's vector kernels on the baseline path: 16-byte vectors, no FMA, at the build's
// flags (SSE2 on x86-64, NEON or scalar code elsewhere). See row_pass_kernels.inc.
#include <cstdint>

#include "lib/cpu/row_pass_isa.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define KANTOR_RP_NS isa_baseline
#define KANTOR_RP_TARGET
#define KANTOR_RP_BYTES 16
#define KANTOR_RP_FMA 0
#include "lib/cpu/row_pass_kernels.inc"

namespace kantor::cpu::detail {
const IsaKernels<float>* baseline_kernels_f32() { return &isa_baseline::kTable<float>; }
const IsaKernels<double>* baseline_kernels_f64() { return &isa_baseline::kTable<double>; }
}  // namespace kantor::cpu::detail
