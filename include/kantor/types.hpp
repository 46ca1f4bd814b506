// Small enums shared by every engine, with their string forms (used by the CLI and reports).
#pragma once

#include <cstdint>
#include <string>

namespace kantor {

/// Which engine runs the work. kAuto picks CUDA when a device is visible, else CPU.
enum class Backend { kCpu, kCuda, kAuto };

/// Where a view's memory lives.
enum class MemorySpace { kHost, kDevice };

/// Arithmetic mode of an engine, fixed for all engines:
///   kFp32 strict float32 (no TF32), kTf32 / kBf16 tensor-core dot products with float32
///   accumulation (CUDA engine only), kFp64 float64 throughout.
enum class Precision { kFp32, kTf32, kBf16, kFp64 };

/// Which LSE kernel family serves the passes: kAuto = the engine's dispatch table (the CUDA
/// engine's is lib/cuda/dispatch.cpp, with the measured evidence for each entry); the others
/// force one family, for tests and benchmarks (InvalidArgument when it cannot serve the pass:
/// the message says why). CUDA engine: kExact = CUDA cores, exact differences (fp32, fp64 and
/// the fallback of every other family); kMma = the pipelined mma.sync kernel (tf32 d <= 64,
/// bf16 d <= 128); kTf32Chunked = TF32 in 32-wide d chunks (any d); kGemm = cuBLAS TF32 score
/// blocks + row LSE (tf32, dense schedule); kGemmFp32 = the same path with cuBLAS float32
/// score blocks (CUDA cores, round-to-nearest; fp32, dense schedule); kGemm3xTf32 = the same path
/// for fp32 with each dot product as three TF32 products of split operands (x = hi + lo:
/// lo.hi + hi.lo + hi.hi) on the tensor cores. Both are opt-in: their scores are float32 norm
/// expansions, whose rounding scales with |x|^2 (docs/numerics.md section 3).
/// kGemmFp64 = the same path for fp32 data with float64 score blocks (cuBLAS DGEMM on the FP64
/// tensor cores) and double row maxima: the norm expansion without its float32 rounding; opt-in.
/// The CPU engine has one family and accepts only kAuto and kExact.
enum class KernelChoice {
  kAuto, kExact, kMma, kTf32Chunked, kGemm, kGemmFp32, kGemm3xTf32, kGemmFp64, kExpanded
};

std::string to_string(Backend b);
std::string to_string(KernelChoice k);
/// Parse "auto" | "exact" | "mma" | "tf32-chunked" | "gemm" | "gemm-fp32" | "gemm-3xtf32" |
/// "gemm-fp64" | "expanded".
KernelChoice parse_kernel_choice(const std::string& s, const std::string& what = "kernel");
/// Every KernelChoice name, in order, joined by `sep` (help texts and messages).
std::string kernel_choice_names(const std::string& sep);
std::string to_string(MemorySpace s);
std::string to_string(Precision p);

/// Parse "cpu" | "cuda" | "auto". Throws InvalidArgument naming `what` on anything else.
Backend parse_backend(const std::string& s, const std::string& what = "backend");
/// Parse "fp32" | "tf32" | "bf16" | "fp64". Throws InvalidArgument naming `what` otherwise.
Precision parse_precision(const std::string& s, const std::string& what = "precision");

/// Storage type of bfloat16 values (top 16 bits of an IEEE float32). Math is always fp32.
struct bfloat16 {
  std::uint16_t bits;
};
/// float -> bfloat16 with round-to-nearest-even (NaN stays NaN).
bfloat16 to_bfloat16(float x);
float to_float(bfloat16 x);

}  // namespace kantor
