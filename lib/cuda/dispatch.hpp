// The CUDA engine's one dispatch table: which LSE kernel family serves a pass, given its cost,
// key schedule, accumulator, precision and padded width, and why. Plain C++ (no CUDA types), so
// the table is tested without a GPU (tests/cuda/cuda_dispatch_test.cpp forces every entry).
#pragma once

#include <string>

#include "kantor/types.hpp"

namespace kantor::cuda {

/// What a pass needs.
struct PassTraits {
  Precision precision = Precision::kFp32;
  bool label_cost = false;  ///< LabelAugmented: a pair term per score
  bool block_list = false;  ///< block-list key schedule (else dense split-K)
  int dim = 1;              ///< the clouds' dimension d
};

/// The families (lib/cuda/lse_*.cu).
enum class LseFamily {
  kExact, kMma, kTf32Chunked, kGemm, kGemmFp32, kGemm3xTf32, kGemmFp64, kExpanded
};

/// Whether `f` runs on the exact kernel's copies and units (centred, unrounded clouds of padded
/// width simt_padded_dim(d), u = beta - cost / c): the exact and the expanded kernels.
inline bool exact_layout(LseFamily f) { return f == LseFamily::kExact || f == LseFamily::kExpanded; }

struct Dispatch {
  LseFamily family = LseFamily::kExact;
  /// The entry's reason (kAuto) or "forced by ContextOptions::kernel".
  std::string why;
};

/// The table (kAuto) or the forced family. Throws InvalidArgument when the forced family cannot
/// serve the pass, or for a precision no CUDA family serves, naming the pass and the reason.
Dispatch dispatch_lse(const PassTraits& pass, KernelChoice choice);

/// Whether `family` can serve `pass`; if not, *why_not says why.
bool can_implement(LseFamily family, const PassTraits& pass, std::string* why_not);

std::string to_string(LseFamily f);

}  // namespace kantor::cuda
