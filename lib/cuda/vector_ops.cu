// Kernels and launchers of the CUDA engine's VectorOps (lib/cuda/vector_ops.hpp). One kernel
// template per op, instantiated for float and double (plus one final-reduction kernel):
//   element-wise ops: a grid-stride loop over the rows x cols entries of a strided view (entry
//     idx -> row idx / cols, column idx % cols), 256 threads per block;
//   row_dots: one thread per row, double accumulation in column order; row_contract: one thread
//     per output entry, the same;
//   dot and subtract_mean's sum: block partials (grid = min(ceil(n / 2048), kReduceBlocks), a
//     function of n only; each thread sums a fixed grid-stride sequence, then block_sum's fixed
//     tree) and one block reducing the partials in order: deterministic, no atomics;
//   axpy_ratio / xpay_ratio: the ratio num / den is formed in each thread from device memory
//     (no host synchronization) and decides the branch (zero or non-finite: no update / y = x).
// Arithmetic as the CPU engine (oracles/cpu/cpu_vector_ops.hpp): the __d*_rn intrinsics keep
// nvcc from contracting a * b + c into an FMA, so the element-wise results match the CPU's bits.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "kantor/error.hpp"
#include "lib/cuda/check.hpp"
#include "lib/cuda/lse_common.cuh"
#include "lib/cuda/vector_ops.hpp"

namespace kantor::cuda {
namespace {

constexpr int kThreads = 256;        // element-wise kernels
constexpr int kReduceThreads = 256;  // partial sums
constexpr int kPerThread = 8;        // entries per thread before a reduction uses another block
constexpr std::int64_t kMaxGrid = std::int64_t(1) << 20;  // grid-stride beyond this

unsigned grid_for(std::int64_t total) {
  return unsigned(std::min<std::int64_t>((total + kThreads - 1) / kThreads, kMaxGrid));
}
__device__ __forceinline__ std::int64_t first_index() {
  return std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::int64_t grid_step() {
  return std::int64_t(gridDim.x) * blockDim.x;
}

template <class T>
__global__ void __launch_bounds__(kThreads) fill_kernel(MatrixView<T> dst, T value) {
  const std::int64_t total = dst.rows * dst.cols;
  for (std::int64_t idx = first_index(); idx < total; idx += grid_step()) {
    const std::int64_t i = idx / dst.cols, k = idx - i * dst.cols;
    dst.data[i * dst.stride + k] = value;
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    axpby_kernel(double alpha, MatrixView<const T> src, double beta, MatrixView<T> dst) {
  const std::int64_t total = dst.rows * dst.cols;
  for (std::int64_t idx = first_index(); idx < total; idx += grid_step()) {
    const std::int64_t i = idx / dst.cols, k = idx - i * dst.cols;
    T* d = dst.data + i * dst.stride + k;
    // beta = 0 ignores dst's old entry (NaN included).
    const double old = beta == 0 ? 0.0 : __dmul_rn(beta, double(*d));
    *d = T(__dadd_rn(__dmul_rn(alpha, double(src.data[i * src.stride + k])), old));
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    scale_rows_kernel(const T* __restrict__ s, MatrixView<const T> src, MatrixView<T> dst) {
  const std::int64_t total = dst.rows * dst.cols;
  for (std::int64_t idx = first_index(); idx < total; idx += grid_step()) {
    const std::int64_t i = idx / dst.cols, k = idx - i * dst.cols;
    dst.data[i * dst.stride + k] = s[i] * src.data[i * src.stride + k];
  }
}

/// dst_i = x_i * y_i, or (divide) x_i / y_i with 0 where y_i = 0. dst may alias x or y.
template <class T>
__global__ void __launch_bounds__(kThreads)
    binary_kernel(std::int64_t n, const T* x, const T* y, T* dst, bool divide) {
  for (std::int64_t i = first_index(); i < n; i += grid_step()) {
    const T a = x[i], b = y[i];
    dst[i] = divide ? (b == T(0) ? T(0) : a / b) : a * b;
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    row_products_kernel(MatrixView<const T> U, MatrixView<const T> W, MatrixView<T> dst) {
  const std::int64_t wc = W.cols, per_row = U.cols * wc;
  const std::int64_t total = U.rows * per_row;
  for (std::int64_t idx = first_index(); idx < total; idx += grid_step()) {
    const std::int64_t i = idx / per_row, r = idx - i * per_row;
    const std::int64_t k = r / wc, l = r - k * wc;
    dst.data[i * dst.stride + r] = U.data[i * U.stride + k] * W.data[i * W.stride + l];
  }
}

/// One thread per output entry (i, l): the p products in k order (M's entries of one thread are
/// q apart; neighbouring threads read neighbouring l).
template <class T>
__global__ void __launch_bounds__(kThreads)
    row_contract_kernel(double alpha, MatrixView<const T> u, MatrixView<const T> M, double beta,
                        MatrixView<T> out) {
  const std::int64_t q = out.cols, total = out.rows * q;
  for (std::int64_t idx = first_index(); idx < total; idx += grid_step()) {
    const std::int64_t i = idx / q, l = idx - i * q;
    const T* ui = u.data + i * u.stride;
    const T* mi = M.data + i * M.stride + l;
    double s = 0;
    for (std::int64_t k = 0; k < u.cols; ++k)
      s = __dadd_rn(s, __dmul_rn(double(ui[k]), double(mi[k * q])));
    T* o = out.data + i * out.stride + l;
    const double old = beta == 0 ? 0.0 : __dmul_rn(beta, double(*o));
    *o = T(__dadd_rn(__dmul_rn(alpha, s), old));
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    row_dots_kernel(MatrixView<const T> U, MatrixView<const T> W, T* out) {
  for (std::int64_t i = first_index(); i < U.rows; i += grid_step()) {
    const T* u = U.data + i * U.stride;
    const T* w = W.data + i * W.stride;
    double s = 0;
    for (std::int64_t k = 0; k < U.cols; ++k)
      s = __dadd_rn(s, __dmul_rn(double(u[k]), double(w[k])));
    out[i] = T(s);
  }
}

/// partials[b] = sum over this block's grid-stride entries of x_i y_i (y null: x_i), double.
template <class T>
__global__ void __launch_bounds__(kReduceThreads)
    partial_sums_kernel(std::int64_t n, const T* __restrict__ x, const T* __restrict__ y,
                        double* partials) {
  __shared__ double red[32];
  double v = 0;
  for (std::int64_t i = first_index(); i < n; i += grid_step())
    v = __dadd_rn(v, y ? __dmul_rn(double(x[i]), double(y[i])) : double(x[i]));
  const double r = block_sum(v, red);
  if (threadIdx.x == 0) partials[blockIdx.x] = r;
}

/// out[0] = (sum of the `count` partials, in a fixed order) / divisor; 0 when count = 0.
__global__ void __launch_bounds__(kReduceThreads)
    final_sum_kernel(const double* partials, int count, double divisor, double* out) {
  __shared__ double red[32];
  double v = 0;
  for (int b = threadIdx.x; b < count; b += blockDim.x) v = __dadd_rn(v, partials[b]);
  const double r = block_sum(v, red);
  if (threadIdx.x == 0) out[0] = count > 0 ? __ddiv_rn(r, divisor) : 0.0;
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    subtract_kernel(std::int64_t n, T* x, const double* mean) {
  const double mu = mean[0];
  for (std::int64_t i = first_index(); i < n; i += grid_step())
    x[i] = T(__dsub_rn(double(x[i]), mu));
}

/// Guard of both ratio kernels: a zero, infinite or NaN ratio (den = 0, 0 / 0, NaN inputs) is
/// "no step".
__device__ __forceinline__ bool usable_ratio(double r) { return isfinite(r) && r != 0; }

template <class T>
__global__ void __launch_bounds__(kThreads)
    axpy_ratio_kernel(std::int64_t n, const double* num, const double* den, double sign,
                      const T* x, T* y) {
  const double r = __ddiv_rn(__dmul_rn(sign, num[0]), den[0]);
  if (!usable_ratio(r)) return;
  for (std::int64_t i = first_index(); i < n; i += grid_step())
    y[i] = T(__dadd_rn(double(y[i]), __dmul_rn(r, double(x[i]))));
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    xpay_ratio_kernel(std::int64_t n, const T* x, const double* num, const double* den, T* y) {
  const double r = __ddiv_rn(num[0], den[0]);
  const bool keep = usable_ratio(r);
  for (std::int64_t i = first_index(); i < n; i += grid_step())
    y[i] = keep ? T(__dadd_rn(double(x[i]), __dmul_rn(r, double(y[i])))) : x[i];
}

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

[[noreturn]] void bad(const char* op, const std::string& what) {
  throw InvalidArgument(std::string("VectorOps::") + op + ": " + what);
}
template <class M>
void check_view(const char* op, const char* name, const M& v) {
  if (v.rows < 0 || v.cols < 0) bad(op, std::string(name) + " has a negative size");
  if (v.rows > 1 && v.stride < v.cols) bad(op, std::string(name) + " has stride < cols");
  if (v.rows > 0 && v.cols > 0 && !v.data) bad(op, std::string(name) + " is null");
}
template <class A, class B>
void check_same_shape(const char* op, const A& a, const B& b) {
  if (a.rows != b.rows || a.cols != b.cols)
    bad(op, "shapes differ (" + std::to_string(a.rows) + " x " + std::to_string(a.cols) +
                " and " + std::to_string(b.rows) + " x " + std::to_string(b.cols) + ")");
}
void check_n(const char* op, std::int64_t n) {
  if (n < 0) bad(op, "negative length " + std::to_string(n));
}

int reduce_blocks(std::int64_t n) {
  const std::int64_t per_block = std::int64_t(kReduceThreads) * kPerThread;
  return int(std::min<std::int64_t>((n + per_block - 1) / per_block, kReduceBlocks));
}

/// out[0] = sum_i x_i (y_i) / divisor through the partials (n >= 0; n = 0 writes 0).
template <class T>
void reduce_to(std::int64_t n, const T* x, const T* y, double divisor, double* out,
               double* partials, cudaStream_t st) {
  const int blocks = reduce_blocks(n);
  if (blocks > 0) {
    partial_sums_kernel<T><<<unsigned(blocks), kReduceThreads, 0, st>>>(n, x, y, partials);
    KANTOR_CUDA_CHECK_LAUNCH();
  }
  final_sum_kernel<<<1, kReduceThreads, 0, st>>>(partials, blocks, divisor, out);
  KANTOR_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class T>
void vec_fill(MatrixView<T> dst, T value, void* stream) {
  check_view("fill", "dst", dst);
  const std::int64_t total = dst.rows * dst.cols;
  if (total == 0) return;
  fill_kernel<T><<<grid_for(total), kThreads, 0, as_stream(stream)>>>(dst, value);
  KANTOR_CUDA_CHECK_LAUNCH();
}

template <class T>
void vec_axpby(double alpha, MatrixView<const T> src, double beta, MatrixView<T> dst,
               void* stream) {
  check_view("axpby", "src", src);
  check_view("axpby", "dst", dst);
  check_same_shape("axpby", src, dst);
  const std::int64_t total = dst.rows * dst.cols;
  if (total == 0) return;
  axpby_kernel<T><<<grid_for(total), kThreads, 0, as_stream(stream)>>>(alpha, src, beta, dst);
  KANTOR_CUDA_CHECK_LAUNCH();
}

template <class T>
void vec_scale_rows(const T* s, MatrixView<const T> src, MatrixView<T> dst, void* stream) {
  check_view("scale_rows", "src", src);
  check_view("scale_rows", "dst", dst);
  check_same_shape("scale_rows", src, dst);
  const std::int64_t total = dst.rows * dst.cols;
  if (total == 0) return;
  if (!s) bad("scale_rows", "s is null");
  scale_rows_kernel<T><<<grid_for(total), kThreads, 0, as_stream(stream)>>>(s, src, dst);
  KANTOR_CUDA_CHECK_LAUNCH();
}

template <class T>
void vec_multiply(std::int64_t n, const T* x, const T* y, T* dst, void* stream) {
  check_n("multiply", n);
  if (n == 0) return;
  binary_kernel<T><<<grid_for(n), kThreads, 0, as_stream(stream)>>>(n, x, y, dst, false);
  KANTOR_CUDA_CHECK_LAUNCH();
}

template <class T>
void vec_divide(std::int64_t n, const T* x, const T* y, T* dst, void* stream) {
  check_n("divide", n);
  if (n == 0) return;
  binary_kernel<T><<<grid_for(n), kThreads, 0, as_stream(stream)>>>(n, x, y, dst, true);
  KANTOR_CUDA_CHECK_LAUNCH();
}

template <class T>
void vec_row_products(MatrixView<const T> U, MatrixView<const T> W, MatrixView<T> dst,
                      void* stream) {
  check_view("row_products", "U", U);
  check_view("row_products", "W", W);
  check_view("row_products", "dst", dst);
  if (W.rows != U.rows || dst.rows != U.rows || dst.cols != U.cols * W.cols)
    bad("row_products", "U is " + std::to_string(U.rows) + " x " + std::to_string(U.cols) +
                            ", W " + std::to_string(W.rows) + " x " + std::to_string(W.cols) +
                            ", dst " + std::to_string(dst.rows) + " x " +
                            std::to_string(dst.cols) + " (want rows x U.cols W.cols)");
  const std::int64_t total = U.rows * U.cols * W.cols;
  if (total == 0) return;
  row_products_kernel<T><<<grid_for(total), kThreads, 0, as_stream(stream)>>>(U, W, dst);
  KANTOR_CUDA_CHECK_LAUNCH();
}

template <class T>
void vec_row_contract(double alpha, MatrixView<const T> u, MatrixView<const T> M, double beta,
                      MatrixView<T> out, void* stream) {
  check_view("row_contract", "u", u);
  check_view("row_contract", "M", M);
  check_view("row_contract", "out", out);
  if (M.rows != u.rows || out.rows != u.rows || M.cols != u.cols * out.cols)
    bad("row_contract", "u is " + std::to_string(u.rows) + " x " + std::to_string(u.cols) +
                            ", M " + std::to_string(M.rows) + " x " + std::to_string(M.cols) +
                            ", out " + std::to_string(out.rows) + " x " +
                            std::to_string(out.cols) + " (want M rows x u.cols out.cols)");
  const std::int64_t total = out.rows * out.cols;
  if (total == 0) return;
  row_contract_kernel<T>
      <<<grid_for(total), kThreads, 0, as_stream(stream)>>>(alpha, u, M, beta, out);
  KANTOR_CUDA_CHECK_LAUNCH();
}

template <class T>
void vec_row_dots(MatrixView<const T> U, MatrixView<const T> W, T* out, void* stream) {
  check_view("row_dots", "U", U);
  check_view("row_dots", "W", W);
  check_same_shape("row_dots", U, W);
  if (U.rows == 0) return;
  if (!out) bad("row_dots", "out is null");
  row_dots_kernel<T><<<grid_for(U.rows), kThreads, 0, as_stream(stream)>>>(U, W, out);
  KANTOR_CUDA_CHECK_LAUNCH();
}

template <class T>
void vec_dot(std::int64_t n, const T* x, const T* y, double* out, double* partials,
             void* stream) {
  check_n("dot", n);
  if (!out || !partials) bad("dot", "out and partials are required");
  if (n > 0 && (!x || !y)) bad("dot", "x and y are required");
  reduce_to<T>(n, x, y, 1.0, out, partials, as_stream(stream));
}

template <class T>
void vec_subtract_mean(std::int64_t n, T* x, double* scratch, double* partials, void* stream) {
  check_n("subtract_mean", n);
  if (!scratch || !partials) bad("subtract_mean", "scratch and partials are required");
  if (n > 0 && !x) bad("subtract_mean", "x is required");
  auto st = as_stream(stream);
  reduce_to<T>(n, x, static_cast<const T*>(nullptr), double(n), scratch, partials, st);
  if (n == 0) return;
  subtract_kernel<T><<<grid_for(n), kThreads, 0, st>>>(n, x, scratch);
  KANTOR_CUDA_CHECK_LAUNCH();
}

template <class T>
void vec_axpy_ratio(std::int64_t n, const double* num, const double* den, double sign, const T* x,
                    T* y, void* stream) {
  check_n("axpy_ratio", n);
  if (n == 0) return;
  if (!num || !den) bad("axpy_ratio", "num and den are required");
  axpy_ratio_kernel<T><<<grid_for(n), kThreads, 0, as_stream(stream)>>>(n, num, den, sign, x, y);
  KANTOR_CUDA_CHECK_LAUNCH();
}

template <class T>
void vec_xpay_ratio(std::int64_t n, const T* x, const double* num, const double* den, T* y,
                    void* stream) {
  check_n("xpay_ratio", n);
  if (n == 0) return;
  if (!num || !den) bad("xpay_ratio", "num and den are required");
  xpay_ratio_kernel<T><<<grid_for(n), kThreads, 0, as_stream(stream)>>>(n, x, num, den, y);
  KANTOR_CUDA_CHECK_LAUNCH();
}

void vec_copy_scalars(const double* src, double* dst, std::int64_t count, void* stream) {
  check_n("copy_scalars", count);
  if (count == 0 || src == dst) return;
  KANTOR_CUDA_TRY(cudaMemcpyAsync(dst, src, sizeof(double) * std::size_t(count),
                                  cudaMemcpyDeviceToDevice, as_stream(stream)));
}

#define KANTOR_VECTOR_OPS_INSTANTIATE(T)                                                       \
  template void vec_fill<T>(MatrixView<T>, T, void*);                                          \
  template void vec_axpby<T>(double, MatrixView<const T>, double, MatrixView<T>, void*);       \
  template void vec_scale_rows<T>(const T*, MatrixView<const T>, MatrixView<T>, void*);        \
  template void vec_multiply<T>(std::int64_t, const T*, const T*, T*, void*);                  \
  template void vec_divide<T>(std::int64_t, const T*, const T*, T*, void*);                    \
  template void vec_row_products<T>(MatrixView<const T>, MatrixView<const T>, MatrixView<T>,   \
                                    void*);                                                    \
  template void vec_row_contract<T>(double, MatrixView<const T>, MatrixView<const T>, double,   \
                                    MatrixView<T>, void*);                                     \
  template void vec_row_dots<T>(MatrixView<const T>, MatrixView<const T>, T*, void*);          \
  template void vec_dot<T>(std::int64_t, const T*, const T*, double*, double*, void*);         \
  template void vec_subtract_mean<T>(std::int64_t, T*, double*, double*, void*);               \
  template void vec_axpy_ratio<T>(std::int64_t, const double*, const double*, double, const T*, \
                                  T*, void*);                                                  \
  template void vec_xpay_ratio<T>(std::int64_t, const T*, const double*, const double*, T*,    \
                                  void*);

KANTOR_VECTOR_OPS_INSTANTIATE(float)
KANTOR_VECTOR_OPS_INSTANTIATE(double)
#undef KANTOR_VECTOR_OPS_INSTANTIATE

}  // namespace kantor::cuda
