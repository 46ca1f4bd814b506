// Internal interface between the row pass's driver (row_pass.cpp: Eigen, scheduling, policies,
// compiled at the build's flags) and its vector kernels (row_pass_kernels.inc, compiled once per
// ISA path under GCC/Clang target attributes in row_pass_isa_*.cpp). Plain pointers and PODs
// only: nothing here is an inline function that two paths could share.
#pragma once

#include <cstdint>

namespace kantor::cpu::detail {

/// Keys [k0, k0 + len) of one chunk: scores go to buffer entries [off, off + len) (off a multiple
/// of the path's lane count; entries up to the next multiple are written -inf), the bias of key
/// k0 + j is row_bias[r][bo + j].
struct KeySegment {
  std::int64_t k0 = 0, len = 0, off = 0, bo = 0;
};

/// One chunk of the direct (d <= 8) LSE path for a block of br rows.
template <class T>
struct DirectChunk {
  const T* q = nullptr;  ///< br rows of d scaled queries (q' = scale log2(e) q), row-major
  std::int64_t d = 0;
  std::int64_t br = 0;
  const T* kt = nullptr;  ///< keys transposed: coordinate c of key k at kt[c * ldk + k]
  std::int64_t ldk = 0;
  const T* const* row_bias = nullptr;  ///< br pointers: biases in exp2 units (log2(e) b)
  const std::int32_t* order = nullptr;  ///< null, or the order in which to visit the br rows
  const KeySegment* segs = nullptr;
  std::int64_t nsegs = 0;
  std::int64_t chunk_len = 0;  ///< end of the last segment rounded up to whole vectors
  T* s = nullptr;              ///< scratch, chunk_len entries
  T* row_max = nullptr;        ///< br running maxima (exp2 units), updated
  double* row_sum = nullptr;   ///< br running sums, updated
};

/// One chunk of the GEMM (d > 8) LSE path: the kernel packs the chunk's keys into panels, writes
/// the scaled dot products of the block's rows to the tile rows (at the segments' offsets), adds
/// the biases in place, then folds the chunk.
template <class T>
struct GemmChunk {
  const T* q = nullptr;  ///< br rows of d scaled queries, row-major
  std::int64_t d = 0;
  const T* kt = nullptr;  ///< keys transposed, as for DirectChunk
  std::int64_t ldk = 0;
  T* panel = nullptr;   ///< scratch, >= 2 d chunk_len entries
  T* qsplat = nullptr;  ///< scratch, >= 8 d (64 / sizeof(T)) entries
  T* tile = nullptr;   ///< br x ld scratch
  std::int64_t ld = 0;
  std::int64_t br = 0;
  const T* const* row_bias = nullptr;
  const std::int32_t* order = nullptr;
  const KeySegment* segs = nullptr;
  std::int64_t nsegs = 0;
  std::int64_t chunk_len = 0;
  T* row_max = nullptr;
  double* row_sum = nullptr;
};

template <class T>
struct IsaKernels {
  int lanes = 0;  ///< vector lanes of T
  void (*direct)(const DirectChunk<T>&) = nullptr;
  void (*gemm)(const GemmChunk<T>&) = nullptr;
  void (*exp2)(const T* t, std::int64_t count, T* out) = nullptr;
};

// Defined in row_pass_isa_{baseline,avx2,avx512}.cpp; null where the path is not compiled in
// (non-x86 targets, compilers without target attributes).
const IsaKernels<float>* baseline_kernels_f32();
const IsaKernels<double>* baseline_kernels_f64();
const IsaKernels<float>* avx2_kernels_f32();
const IsaKernels<double>* avx2_kernels_f64();
const IsaKernels<float>* avx512_kernels_f32();
const IsaKernels<double>* avx512_kernels_f64();

}  // namespace kantor::cpu::detail
