// Device-side preparation of the CUDA oracle's operand copies (oracles/cuda/cuda_oracle.cpp):
// from one upload of the centred cloud (rows x d, row-major, T), the padded, TF32-rounded, split
// (3xTF32) and float64 copies and the row norms the kernel families read. Done on the host these
// were a second and third full pass over the data plus an upload each (at 60,000 x 784 and three
// problems, seconds of OTDD setup; docs/cuda-engine.md section 7). Plain C++ interface, streams
// are opaque cudaStream_t pointers; every call is asynchronous on `stream`.
//
// The arithmetic is the host versions' (exact conversions; TF32 rounding to nearest, ties away
// from zero, as cvt.rna.tf32.f32; lo = v - hi exact in float), except the order of the norms'
// sums: c sum_k v_k^2 accumulated in double over lane-strided partial sums and a fixed shuffle
// tree (run-to-run identical), then rounded once; it may differ from a sum in column order in the
// last bit of the double.
#pragma once

#include <cstdint>

namespace kantor::cuda {

enum class OperandRounding { kNone, kTf32 };

/// dst (rows x ld, U) = src (rows x d, T) rounded as r says (kTf32: float data only), zero columns
/// d..ld-1. ld >= d.
template <class T, class U>
void operand_padded(const T* src, std::int64_t rows, int d, U* dst, int ld, OperandRounding r,
                    void* stream);

/// dst (rows x 3 ld, float) = [lo, hi, hi] per row (x_side) or [hi, lo, hi], hi = TF32(v),
/// lo = v - hi; zero padding columns.
void operand_split3(const float* src, std::int64_t rows, int d, float* dst, int ld, bool x_side,
                    void* stream);

/// out_i = U(c sum_{k < ld} src_ik^2), the sum in double.
template <class T, class U>
void operand_norms(const T* src, std::int64_t rows, int ld, double c, U* out, void* stream);

/// From one upload of a cloud as the caller gave it (src, rows x d, T): centred (rows x d, T) =
/// T(double(src_ik) - center_k) and, when ref is not null, ref (rows x d, double) = double(src_ik);
/// center: d doubles in device memory. prepare_problem_data's arithmetic (exact conversions and
/// one IEEE subtraction and rounding), so the copies are the host's bit for bit.
template <class T>
void operand_centre(const T* src, std::int64_t rows, int d, const double* center, T* centred,
                    double* ref, void* stream);

/// The weights from the caller's (src, rows; null: uniform): ref_i = double(src_i) / total
/// (1 / rows when src is null) and w_i = T(ref_i), prepare_problem_data's arithmetic (one IEEE
/// division and rounding).
template <class T>
void operand_weights(const T* src, std::int64_t rows, double total, double* ref, T* w,
                     void* stream);

/// The engine's log weights: out_i = T(log(double(w_i))), -inf for a zero weight (a masked
/// point; every pass treats -inf as a masked key): the host's log_weight (lib/costs/
/// problem_data.hpp), the same value but where the device's and the host's double logs round
/// differently (both within an ulp of double; then an ulp of T apart at most, rarely).
template <class T>
void operand_logs(const T* w, std::int64_t rows, T* out, void* stream);

}  // namespace kantor::cuda
