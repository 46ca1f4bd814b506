// Vector and matrix kernels of the CUDA engine's VectorOps (include/kantor/oracle.hpp): the glue
// of the derivative algorithms, in device memory. Plain C++: no CUDA types here, streams are
// opaque cudaStream_t pointers. Kernels and launchers: lib/cuda/vector_ops.cu (one kernel per op,
// T in {float, double}).
//
// Contracts (those of kantor::VectorOps, with the CPU engine's arithmetic of
// oracles/cpu/cpu_vector_ops.hpp: products of T in T, combinations with double coefficients in
// double and rounded once to T, no FMA contraction, so that both engines round alike):
//   - every call is asynchronous on `stream`; nothing synchronizes with the host;
//   - scalars (num, den, the results of dot and subtract_mean) are doubles in device memory;
//   - reductions (dot, subtract_mean's sum) accumulate in double over a fixed grid (a block count
//     that depends on n only) and a fixed tree (warp shuffles, then the warps in order, then the
//     block partials in order): run-to-run bitwise identical, no atomics;
//   - element-wise ops may run in place (dst aliasing a source of the same shape and stride).
// Shape mismatches throw InvalidArgument before anything is launched.
#pragma once

#include <cstdint>

#include "kantor/view.hpp"

namespace kantor::cuda {

/// Blocks of the first reduction step (the size of the partials workspace, in doubles).
constexpr int kReduceBlocks = 1024;

/// dst = value.
template <class T>
void vec_fill(MatrixView<T> dst, T value, void* stream);
/// dst = alpha src + beta dst (beta = 0: dst's old entries are not read).
template <class T>
void vec_axpby(double alpha, MatrixView<const T> src, double beta, MatrixView<T> dst,
               void* stream);
/// dst_ik = s_i src_ik.
template <class T>
void vec_scale_rows(const T* s, MatrixView<const T> src, MatrixView<T> dst, void* stream);
/// dst_i = x_i * y_i.
template <class T>
void vec_multiply(std::int64_t n, const T* x, const T* y, T* dst, void* stream);
/// dst_i = x_i / y_i, 0 where y_i = 0.
template <class T>
void vec_divide(std::int64_t n, const T* x, const T* y, T* dst, void* stream);
/// dst(i, k W.cols + l) = U_ik W_il.
template <class T>
void vec_row_products(MatrixView<const T> U, MatrixView<const T> W, MatrixView<T> dst,
                      void* stream);
/// out_il = alpha sum_k u_ik M(i, k q + l) + beta out_il, q = out.cols (beta = 0: out's old
/// entries are not read); the sum in double in k order, one rounding to T.
template <class T>
void vec_row_contract(double alpha, MatrixView<const T> u, MatrixView<const T> M, double beta,
                      MatrixView<T> out, void* stream);
/// out_i = sum_k U_ik W_ik (double accumulation in k order, rounded once to T).
template <class T>
void vec_row_dots(MatrixView<const T> U, MatrixView<const T> W, T* out, void* stream);
/// out[0] = sum_i x_i y_i in double. `partials`: kReduceBlocks doubles of device workspace.
template <class T>
void vec_dot(std::int64_t n, const T* x, const T* y, double* out, double* partials, void* stream);
/// scratch[0] = mean(x) (0 for n = 0), then x_i = T(x_i - scratch[0]). `partials` as for vec_dot.
template <class T>
void vec_subtract_mean(std::int64_t n, T* x, double* scratch, double* partials, void* stream);
/// r = sign num[0] / den[0] read on the device; y += r x unless r is 0 or not finite.
template <class T>
void vec_axpy_ratio(std::int64_t n, const double* num, const double* den, double sign, const T* x,
                    T* y, void* stream);
/// r = num[0] / den[0] read on the device; y = x + r y, or y = x where r is 0 or not finite.
template <class T>
void vec_xpay_ratio(std::int64_t n, const T* x, const double* num, const double* den, T* y,
                    void* stream);
/// dst[0..count) = src[0..count) (device to device, stream ordered).
void vec_copy_scalars(const double* src, double* dst, std::int64_t count, void* stream);

}  // namespace kantor::cuda
