// Internal launchers of the LSE kernel families (one per .cu file), used by lib/cuda/lse_pass.cu.
// Plain C++; streams are opaque cudaStream_t pointers.
#pragma once

#include "lib/cuda/lse_params.hpp"

namespace kantor::cuda {

/// LSE partials by the CUDA-core kernel (grid: row blocks of both sides x splits).
void launch_lse_simt(const LsePass<float>& p, void* stream);
void launch_lse_simt(const LsePass<double>& p, void* stream);
/// LSE partials by the TF32 tensor-core kernel.
void launch_lse_tf32(const LsePass<float>& p, void* stream);
/// LSE partials by the bf16 tensor-core kernel (p.ld in {16, 32, 64, 128}, packed bf16 clouds).
void launch_lse_bf16(const LsePass<float>& p, void* stream);
/// LSE partials by the expanded CUDA-core kernel (float data, p.dim <= kExpandedMaxDim, rows of
/// the exact path's padded width p.ld).
void launch_lse_expanded(const LsePass<float>& p, void* stream);
/// Finalize (+ error reduction) of a pass whose partials are written (p.alpha set).
void finish_lse_pass(const LsePass<float>& p, void* stream);
/// Rows per block of each kernel.
int simt_block_rows();
int tf32_block_rows(int ld);
int bf16_block_rows(int ld);
/// Resident blocks per SM of the kernel that serves padded width `ld` (occupancy query).
int simt_blocks_per_sm(int ld, bool is_double);
int tf32_blocks_per_sm(int ld);
int bf16_blocks_per_sm(int ld);
/// Resident blocks per SM of the expanded kernel on rows of padded width ld (4: its d <= 4
/// widths, else its d <= 8 width).
int expanded_blocks_per_sm(int ld);

}  // namespace kantor::cuda
