// The CUDA engine's dispatch table (lib/cuda/dispatch.hpp). Each entry states its evidence:
// H200 measurements recorded in docs/cuda-engine.md and docs/benchmarks.md.
#include "lib/cuda/dispatch.hpp"

#include "kantor/error.hpp"
#include "lib/cuda/lse_params.hpp"

namespace kantor::cuda {

std::string to_string(LseFamily f) {
  switch (f) {
    case LseFamily::kExact: return "exact";
    case LseFamily::kMma: return "mma";
    case LseFamily::kTf32Chunked: return "tf32-chunked";
    case LseFamily::kGemm: return "gemm";
    case LseFamily::kGemmFp32: return "gemm-fp32";
    case LseFamily::kGemm3xTf32: return "gemm-3xtf32";
    case LseFamily::kGemmFp64: return "gemm-fp64";
    case LseFamily::kExpanded: return "expanded";
  }
  return "?";
}

namespace {

// Padded width from which dense squared-Euclidean tf32 passes take cuBLAS score blocks.
// Evidence (H200, n = m = 50k, 10 alternating iterations, eps = 0.1, ms; docs/cuda-engine.md,
// "Width rule"): fused chunked kernel / cuBLAS + row-LSE = 104.1 / 117.1 at d = 96, 134.8 /
// 120.1 at d = 128, 290.8 / 150.0 at d = 256, 667.1 / 213.4 at d = 512.
constexpr int kGemmMinPaddedDim = 128;

// Widest fp32 dense pass the exact kernel serves in the table (above: gemm-fp64; evidence at
// the entry in dispatch_lse).
constexpr int kExactFp32MaxDim = 16;

int tf32_width(int d) { return tf32_padded_dim(d); }

}  // namespace

bool can_implement(LseFamily family, const PassTraits& p, std::string* why_not) {
  auto no = [&](const std::string& w) {
    if (why_not) *why_not = w;
    return false;
  };
  const bool fp32_data = p.precision != Precision::kFp64;
  switch (family) {
    case LseFamily::kExact:
      // CUDA cores, exact differences, every cost and schedule, float and double data.
      return true;
    case LseFamily::kExpanded:
      // CUDA cores, float32 norm expansion of the centred clouds, both schedules.
      if (p.precision != Precision::kFp32)
        return no("the expanded kernel needs precision fp32 (float data, unrounded clouds)");
      if (p.dim > kExpandedMaxDim)
        return no("the expanded kernel serves d <= " + std::to_string(kExpandedMaxDim));
      if (p.label_cost) return no("the expanded kernel has no label pair term");
      return true;
    case LseFamily::kMma:
      if (p.precision == Precision::kTf32) {
        if (tf32_width(p.dim) > 64) return no("the mma kernel serves tf32 d <= 64");
      } else if (p.precision == Precision::kBf16) {
        if (p.dim > kBf16MaxDim) return no("the mma kernel serves bf16 d <= 128");
      } else {
        return no("the mma kernel needs precision tf32 or bf16");
      }
      // Label pair term and block lists: its policy variant (lse_mma_pipe_kernel<kPolicies>).
      return true;
    case LseFamily::kTf32Chunked:
      if (p.precision != Precision::kTf32 || !fp32_data)
        return no("the chunked kernel needs precision tf32");
      if (p.label_cost) return no("the chunked tf32 kernel has no label pair term");
      if (p.block_list) return no("the chunked tf32 kernel has no block-list schedule");
      return true;
    case LseFamily::kGemm:
      if (p.precision != Precision::kTf32) return no("the cuBLAS path needs precision tf32");
      if (p.block_list) return no("the cuBLAS path computes dense score blocks only");
      return true;  // label pair term: gathered by the row-LSE kernel
    case LseFamily::kGemmFp64:
      if (p.precision != Precision::kFp32)
        return no("the float64-score cuBLAS path needs precision fp32 (float data)");
      if (p.block_list) return no("the cuBLAS path computes dense score blocks only");
      return true;
    case LseFamily::kGemmFp32:
      if (p.precision != Precision::kFp32)
        return no("the float32 cuBLAS path needs precision fp32");
      if (p.block_list) return no("the cuBLAS path computes dense score blocks only");
      return true;
    case LseFamily::kGemm3xTf32:
      if (p.precision != Precision::kFp32)
        return no("the 3xTF32 cuBLAS path needs precision fp32 (it emulates float32 dot products)");
      if (p.block_list) return no("the cuBLAS path computes dense score blocks only");
      return true;
  }
  return no("unknown family");
}

Dispatch dispatch_lse(const PassTraits& p, KernelChoice choice) {
  if (choice != KernelChoice::kAuto) {
    const LseFamily f = choice == KernelChoice::kExact         ? LseFamily::kExact
                        : choice == KernelChoice::kMma         ? LseFamily::kMma
                        : choice == KernelChoice::kTf32Chunked ? LseFamily::kTf32Chunked
                        : choice == KernelChoice::kGemm        ? LseFamily::kGemm
                        : choice == KernelChoice::kGemmFp32    ? LseFamily::kGemmFp32
                        : choice == KernelChoice::kGemm3xTf32  ? LseFamily::kGemm3xTf32
                        : choice == KernelChoice::kExpanded    ? LseFamily::kExpanded
                                                               : LseFamily::kGemmFp64;
    std::string why;
    if (!can_implement(f, p, &why))
      throw InvalidArgument("kernel " + kantor::to_string(choice) + " cannot serve this pass (" +
                            kantor::to_string(p.precision) + ", d = " + std::to_string(p.dim) +
                            (p.label_cost ? ", label-augmented cost" : "") +
                            (p.block_list ? ", block list" : "") + "): " + why);
    return {f, "forced by the kernel choice (ContextOptions::kernel or make_oracle's)"};
  }
  // fp32 above d = 16 (dense): float64 score blocks (DGEMM on exact double copies of the float
  // data), the rest of the pass as the exact kernel's (float exponentials, double maxima). Its
  // scores are at least as accurate as exact float differences (a norm expansion in float64
  // loses ~2^-53 |x|^2, not ~2^-24 |x|^2 like the float32 / 3xTF32 expansions), and it is faster
  // from d = 32 on. Evidence (H200, n = m = 50k, fp32, 10 alternating iterations, eps = 0.1, ms,
  // exact / gemm-fp64; eighth session): 97.7 / 223.6 at d = 16, 363.9 / 247.3 at d = 32,
  // 709.3 / 282.4 at d = 64, and per 2 iterations at d = 784 1317.5 / 309.8. The exact kernel
  // pads d to a multiple of 16, so 17 <= d <= 32 all cost its d = 32 time. Accuracy on
  // Fashion-MNIST (60k x 10k, d = 784, eps = 0.1, converged OTDD, 150 cross iterations): the
  // float64 certificate of the potentials 0.10813 against the engine's residual 0.10798, the same
  // iteration counts as the exact kernel (certificate 0.10823) in 21.6 s of solving instead of
  // 58.5 s. The float32 expansions (gemm-fp32, gemm-3xtf32) stay opt-in: their certificate floor
  // was 0.155 / 0.170 there (docs/cuda-engine.md, "fp32 at large d").
  // fp64 stays exact: a DGEMM expansion of double data would lose relative accuracy where
  // |x|^2 >> |x - y|^2, and fp64 is the precision asked for reference-grade results.
  if (p.precision == Precision::kFp32 && !p.block_list && p.dim > kExactFp32MaxDim)
    return {LseFamily::kGemmFp64,
            "fp32 d > 16: cuBLAS float64 score blocks (as accurate as exact differences, faster)"};
  // fp32 block lists at d <= 8 (the multiscale solver's passes), no pair term: the norm
  // expansion on the CUDA cores, d FMAs per score instead of d differences and squares (8
  // instructions per pair against 15 at d = 3). Its rounding, a few float ulps of |x|^2 + |y|^2
  // + |beta| with the clouds centred on their bounding box (|x|^2 <= D^2 / 4), is of the order
  // of the fp32 potentials' own (docs/numerics.md section 3), and every multiscale result is
  // certified by its own float64-modelled pass. Evidence (H100, fourteenth session, `kantor
  // bench sinkhorn --precision fp32 --n 100000 --d 3 --iterations 10`, ms, exact / expanded): a
  // 10% block list 15.66 / 8.38 (eps 0.1) and 15.64 / 8.31 (eps 0.002), dense 159.2 / 81.8 and
  // 159.3 / 80.4, the marginal errors equal to 6 digits; the multiscale solver at 2^20 points
  // (the data, eps 0.0025): passes 0.29 -> 0.15 s, the same 167 iterations, certified
  // error 1.4728e-3 -> 1.4743e-3; at 2^17 and eps 5e-4 the same 379 iterations, 4.0926e-3 ->
  // 4.0947e-3 (docs/benchmarks.md, "The expanded kernel"). Dense fp32 passes stay exact by
  // default (the expanded kernel is opt-in there): at eps = 1e-3 on 300 points in [0, 1]^2 its
  // primal cost was 1.14e-5 off the float64 solve's, above the exact kernel's 1e-5 bound of
  // tests/cuda (CudaSinkhorn.SolvesMatchCpuFp32), with no certificate of its own to catch it.
  if (p.precision == Precision::kFp32 && p.block_list && !p.label_cost &&
      p.dim <= kExpandedMaxDim)
    return {LseFamily::kExpanded,
            "fp32 block list, d <= 8: the float32 norm expansion on the CUDA cores"};
  if (p.precision == Precision::kFp32 || p.precision == Precision::kFp64)
    return {LseFamily::kExact,
            p.precision == Precision::kFp64
                ? "fp64: exact differences on the CUDA cores"
                : (p.block_list ? "fp32 block list (label pair term or d > 8): exact differences"
                                : "fp32 d <= 16: exact differences on the CUDA cores")};
  if (p.precision == Precision::kBf16 && p.dim > kBf16MaxDim)
    throw InvalidArgument("precision bf16 on the CUDA engine serves d <= " +
                          std::to_string(kBf16MaxDim) + " (got d = " + std::to_string(p.dim) +
                          "); use tf32 for wider clouds");
  if (can_implement(LseFamily::kMma, p, nullptr))
    // H200, 50k x 50k, 10 iterations (lib/cuda/lse_tf32.cu): 19.26 ms at d = 3, 41.79 at d = 64
    // against 22.46 / 46.50 for the single-stage kernel and 3-4x the exact kernel. Label costs
    // and block lists run its policy variant (docs/benchmarks.md, "Engine redesign").
    return {LseFamily::kMma, std::string("tf32 d <= 64 / bf16 d <= 128: the pipelined mma.sync kernel") +
                                 (p.label_cost || p.block_list ? " (policy variant)" : "")};
  if (p.block_list || (p.label_cost && tf32_width(p.dim) < kGemmMinPaddedDim))
    // The wide tensor-core families do not have these policies: the exact kernel serves them
    // (fp32 exact differences: more accurate than asked, slower).
    return {LseFamily::kExact,
            std::string("no tensor-core family has the ") +
                (p.block_list ? "block-list schedule" : "label pair term") +
                " at this width: exact differences"};
  if (p.precision == Precision::kTf32 && tf32_width(p.dim) >= kGemmMinPaddedDim)
    return {LseFamily::kGemm, "tf32 padded d >= 128: cuBLAS score blocks beat the chunked kernel"};
  return {LseFamily::kTf32Chunked, "tf32 64 < d < 128 (padded 96): the chunked TF32 kernel"};
}

}  // namespace kantor::cuda
